"""Classification metrics on a BMA predictive ``probs (n, K)`` and labels ``(n,)``.

Definitions: ``docs/metrics.md``. Accuracy, NLL and Brier are one-line
reductions. The two ECE variants are hand-written (vectorised torch) rather than taken from
torchmetrics, because torchmetrics' ``MulticlassCalibrationError`` bins differently:

- it assigns ``lower <= conf < upper`` (``torch.bucketize(..., right=True) - 1``) with float32
  ``torch.linspace`` edges, whereas the L2E top-label convention is ``lower < conf <= upper``.
  Whether a confidence on an edge lands in the same bin then depends on float32 rounding of
  the edge: 0.2 and 0.4 happen to agree, 0.6 and 0.8 move one bin up;
- a confidence of exactly 1.0 gets a 16th bin of its own instead of joining the last bin;
- it casts confidences to float32.

On random Dirichlet probabilities the two agree to float32 precision; with confidences on bin
edges or wrong predictions at 1.0 they differ (``tests/metrics/test_classification.py``).
torchmetrics has no all-class (BayesDLL) variant at all.

Bin edges of the top-label ECE are ``b / num_bins`` rounded to the dtype of ``probs``, so a
float32 confidence ``0.2`` lies exactly on the edge ``3/15``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "accuracy",
    "brier",
    "classification_metrics",
    "ece",
    "ece_all_class",
    "nll",
    "reliability_bins",
]


def _check(probs: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """Validate shapes, label range and NaNs; return ``labels`` as int64 on ``probs.device``."""
    if not isinstance(probs, Tensor) or not isinstance(labels, Tensor):
        raise ValueError("probs and labels must be torch tensors")
    if probs.ndim != 2:
        raise ValueError(f"probs must have shape (n, num_classes), got {tuple(probs.shape)}")
    if not probs.dtype.is_floating_point:
        raise ValueError(f"probs must be floating point, got dtype {probs.dtype}")
    if labels.ndim != 1:
        raise ValueError(f"labels must have shape (n,), got {tuple(labels.shape)}")
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise ValueError(f"labels must be integer class indices, got dtype {labels.dtype}")
    n, k = probs.shape
    if labels.shape[0] != n:
        raise ValueError(f"probs has {n} rows but labels has {labels.shape[0]} entries")
    if n == 0 or k == 0:
        raise ValueError(f"need at least one example and one class, got probs {(n, k)}")
    if torch.isnan(probs).any():
        raise ValueError(f"probs contains {int(torch.isnan(probs).sum())} NaN values")
    labels = labels.to(device=probs.device, dtype=torch.long)
    bad = (labels < 0) | (labels >= k)
    if bad.any():
        raise ValueError(
            f"labels must be in [0, {k}); found {int(bad.sum())} out of range, "
            f"e.g. {labels[bad][:5].tolist()}"
        )
    return probs, labels


def accuracy(probs: Tensor, labels: Tensor) -> float:
    """``(1/n) Σ_i 1[argmax_k p_ik = y_i]`` (ties go to the first maximal class)."""
    probs, labels = _check(probs, labels)
    return float((probs.argmax(-1) == labels).double().mean())


def nll(probs: Tensor, labels: Tensor) -> float:
    """``−(1/n) Σ_i log max(p_{i,y_i}, tiny)``; a zero probability gives a large finite value."""
    probs, labels = _check(probs, labels)
    p_true = probs.gather(1, labels[:, None])[:, 0]
    tiny = torch.finfo(probs.dtype).tiny
    return float(-p_true.clamp_min(tiny).log().double().mean())


def nll_from_log_probs(log_probs: Tensor, labels: Tensor) -> float:
    """``−(1/n) Σ_i log p̄_{i,y_i}`` from log probabilities: exact, no clipping (a BMA
    predictive accumulated in log space keeps probabilities far below float32's range)."""
    if log_probs.ndim != 2 or labels.shape != (log_probs.shape[0],):
        raise ValueError(f"log_probs {tuple(log_probs.shape)} and labels "
                         f"{tuple(labels.shape)} must be (n, K) and (n,)")
    return float(-log_probs.double().gather(1, labels[:, None].to(log_probs.device)).mean())


def entropy_from_log_probs(log_probs: Tensor) -> Tensor:
    """Row entropies ``−Σ_k p_k log p_k`` (``0 log 0 = 0``), in float64."""
    lp = log_probs.double()
    return -(lp.exp() * lp).nan_to_num(0.0).sum(-1)


def brier(probs: Tensor, labels: Tensor) -> float:
    """``(1/n) Σ_i Σ_k (p_ik − 1[k = y_i])²`` (in [0, 2])."""
    probs, labels = _check(probs, labels)
    onehot = torch.nn.functional.one_hot(labels, probs.shape[1]).to(torch.float64)
    return float(((probs.double() - onehot) ** 2).sum(-1).mean())


def _top_label_bins(probs: Tensor, labels: Tensor, num_bins: int) -> dict[str, Tensor]:
    """Per-bin count and sums of confidence and correctness (reducible across shards).

    Bin ``b`` holds the examples with ``edges[b] < max_k p_ik <= edges[b+1]``. Confidences
    outside ``(0, 1]`` (rounding, unnormalised rows) are put in the nearest end bin.
    """
    if not isinstance(num_bins, int) or num_bins < 1:
        raise ValueError(f"num_bins must be a positive integer, got {num_bins!r}")
    probs, labels = _check(probs, labels)
    conf, pred = probs.max(-1)
    edges = (torch.arange(num_bins + 1, dtype=torch.float64) / num_bins).to(probs.dtype)
    edges = edges.to(probs.device)
    # bucketize(right=False): edges[i-1] < conf <= edges[i]  ->  bin i - 1
    idx = (torch.bucketize(conf, edges, right=False) - 1).clamp(0, num_bins - 1)
    correct = (pred == labels).double()
    zeros = torch.zeros(num_bins, dtype=torch.float64, device=probs.device)
    return {
        "edges": edges.double(),
        "count": zeros.index_add(0, idx, torch.ones_like(correct)),
        "conf_sum": zeros.index_add(0, idx, conf.double()),
        "correct_sum": zeros.index_add(0, idx, correct),
    }


def reliability_bins(probs: Tensor, labels: Tensor, num_bins: int = 15) -> dict:
    """Top-label reliability statistics (L2E convention, bins ``lower < conf <= upper``).

    Returns a dict of lists: ``edges`` (num_bins + 1), ``counts`` (ints), ``confidence`` (mean
    max-probability per bin) and ``accuracy`` (fraction correct per bin); both are 0.0 for an
    empty bin. ``ece`` is ``Σ_b |accuracy_b − confidence_b| · counts_b / n``.
    """
    stats = _top_label_bins(probs, labels, num_bins)
    count = stats["count"]
    denom = count.clamp_min(1.0)
    conf = stats["conf_sum"] / denom
    acc = stats["correct_sum"] / denom
    ece_value = float(((acc - conf).abs() * count).sum() / count.sum())
    return {
        "edges": stats["edges"].tolist(),
        "counts": [int(c) for c in count.tolist()],
        "confidence": conf.tolist(),
        "accuracy": acc.tolist(),
        "ece": ece_value,
    }


def ece(probs: Tensor, labels: Tensor, num_bins: int = 15) -> float:
    """Top-label ECE (L2E; docs/metrics.md, variant 1): ``Σ_b |acc_b − conf_b| · n_b / n``.

    ``num_bins`` equal-width bins on the maximum probability, membership
    ``lower < conf <= upper``. Hand-written: torchmetrics bins ``lower <= conf < upper``
    (see the module docstring).
    """
    return reliability_bins(probs, labels, num_bins)["ece"]


def ece_all_class(probs: Tensor, labels: Tensor, num_bins: int = 15) -> tuple[float, float]:
    """All-class ECE and MCE (BayesDLL; docs/metrics.md, variant 2).

    All ``K·n`` probabilities ``p_ij`` are binned with edges ``linspace(0, 1 + 1e-8,
    num_bins + 1)`` and membership ``lower <= p < upper`` (``np.digitize``), so ``p = 0`` is in
    the first bin and ``p = 1`` in the last. With ``acc_b`` the fraction of pairs in bin ``b``
    with ``j = y_i`` and ``conf_b`` their mean probability::

        ECE = Σ_b |acc_b − conf_b| · n_b / Σ_b n_b,     MCE = max_{b: n_b > 0} |acc_b − conf_b|

    Comparisons are in float64 against numpy's edges, as in the reference code.
    """
    if not isinstance(num_bins, int) or num_bins < 1:
        raise ValueError(f"num_bins must be a positive integer, got {num_bins!r}")
    probs, labels = _check(probs, labels)
    edges = torch.as_tensor(np.linspace(0.0, 1.0 + 1e-8, num_bins + 1), device=probs.device)
    p = probs.double().reshape(-1)
    hit = torch.nn.functional.one_hot(labels, probs.shape[1]).double().reshape(-1)
    # bucketize(right=True) == np.digitize(right=False): edges[i-1] <= p < edges[i]
    idx = torch.bucketize(p, edges[1:], right=True).clamp(max=num_bins - 1)
    zeros = torch.zeros(num_bins, dtype=torch.float64, device=probs.device)
    count = zeros.index_add(0, idx, torch.ones_like(p))
    gap = (zeros.index_add(0, idx, hit) - zeros.index_add(0, idx, p)).abs() / count.clamp_min(1.0)
    ece_value = float((gap * count).sum() / count.sum())
    mce_value = float(gap[count > 0].max())
    return ece_value, mce_value


def classification_metrics(
    probs: Tensor, labels: Tensor, log_probs: Tensor | None = None
) -> dict[str, float]:
    """``{"accuracy", "nll", "ece", "brier"}`` of a BMA predictive (15-bin top-label ECE).

    With ``log_probs`` the NLL is computed from them exactly (:func:`nll_from_log_probs`).
    """
    return {
        "accuracy": accuracy(probs, labels),
        "nll": nll(probs, labels) if log_probs is None else nll_from_log_probs(log_probs,
                                                                               labels),
        "ece": ece(probs, labels),
        "brier": brier(probs, labels),
    }
