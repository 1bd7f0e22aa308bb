"""Out-of-distribution detection from a BMA predictive (``docs/metrics.md``).

OOD inputs are the positive class; the higher a score, the more OOD. Three scores:
the predictive entropy ``H[p̄(·|x)]``, the negated max probability −max_k p̄_k, and the
mutual information H[p̄] − E_s H[p_s] (epistemic uncertainty; needs per-draw entropies,
see :class:`bdlkit.evaluation.predictive.ClassificationBMA`). AUROC and AUPR (average precision)
come from scikit-learn (``roc_auc_score``, ``average_precision_score``), as in the
papers' protocol: float64 and exact with tied scores (torchmetrics accumulates in
float32).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from bdlkit.metrics.classification import entropy_from_log_probs


def predictive_entropy(probs: Tensor) -> Tensor:
    """Entropy of each row of ``probs`` (``0 log 0 = 0``)."""
    return entropy_from_log_probs(probs.double().log())


def max_prob_score(probs: Tensor) -> Tensor:
    """``−max_k p_k``: higher for less confident, more likely OOD, inputs."""
    return -probs.double().max(-1).values


def auroc_aupr(score_in: Tensor, score_out: Tensor) -> tuple[float, float]:
    """AUROC and AUPR for telling ``score_out`` (OOD, positive) from ``score_in``."""
    from sklearn.metrics import average_precision_score, roc_auc_score

    if score_in.ndim != 1 or score_out.ndim != 1:
        raise ValueError("scores must be 1-D, one per input")
    if not len(score_in) or not len(score_out):
        raise ValueError("both in-distribution and OOD sets must be non-empty")
    scores = torch.cat([score_in.double(), score_out.double()]).cpu().numpy()
    if np.isnan(scores).any():
        raise ValueError("OOD scores contain NaN")
    target = np.r_[np.zeros(len(score_in)), np.ones(len(score_out))]
    return float(roc_auc_score(target, scores)), float(average_precision_score(target, scores))


def ood_auroc(probs_in: Tensor, probs_out: Tensor) -> float:
    """AUROC of the predictive entropy for telling ``probs_out`` (OOD) from ``probs_in``."""
    if probs_in.ndim != 2 or probs_out.ndim != 2 or probs_in.shape[1] != probs_out.shape[1]:
        raise ValueError(
            f"probs_in {tuple(probs_in.shape)} and probs_out {tuple(probs_out.shape)} must be "
            "(n, K) with the same K"
        )
    return auroc_aupr(predictive_entropy(probs_in), predictive_entropy(probs_out))[0]


def ood_metrics(bma_in, bma_out) -> dict[str, float]:
    """AUROC and AUPR for entropy, max probability and mutual information.

    ``bma_in``/``bma_out``: :class:`~bdlkit.evaluation.predictive.ClassificationBMA` of the test and
    OOD inputs. Keys ``ood_auroc`` (entropy, the headline number), ``ood_aupr``, and
    ``ood_{auroc,aupr}_{maxprob,mi}`` (no MI scores for a single draw: they are all 0), and
    ``ood_aupr_base_rate``: the AUPR of an uninformative score, the OOD fraction
    ``n_out / (n_in + n_out)``, against which an AUPR must be read (0.94 means little when
    the base rate is 0.91).
    """
    n_in, n_out = len(bma_in.entropy), len(bma_out.entropy)
    out: dict[str, float] = {"ood_aupr_base_rate": n_out / (n_in + n_out)}
    scores = [("", lambda b: b.entropy), ("_maxprob", lambda b: max_prob_score(b.probs))]
    if min(bma_in.num_samples, bma_out.num_samples) > 1:  # MI is 0 for a single draw
        scores.append(("_mi", lambda b: b.mutual_information))
    for name, score in scores:
        auroc, aupr = auroc_aupr(score(bma_in), score(bma_out))
        out[f"ood_auroc{name}"], out[f"ood_aupr{name}"] = auroc, aupr
    return out
