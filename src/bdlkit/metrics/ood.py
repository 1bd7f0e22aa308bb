"""Out-of-distribution detection from a BMA predictive (``algorithms.md`` C.5).

The score is the predictive entropy H[p̄(·|x)] = -Σ_k p̄_k log p̄_k; OOD inputs are
the positive class. AUROC comes from torchmetrics (``binary_auroc``).
"""

from __future__ import annotations

import torch
from torch import Tensor


def predictive_entropy(probs: Tensor) -> Tensor:
    """Entropy of each row of ``probs`` (``0 log 0 = 0``)."""
    p = probs.double()
    return -(p * torch.log(p.clamp_min(torch.finfo(p.dtype).tiny))).sum(-1)


def ood_auroc(probs_in: Tensor, probs_out: Tensor) -> float:
    """AUROC of the entropy for telling ``probs_out`` (OOD) from ``probs_in``."""
    if probs_in.ndim != 2 or probs_out.ndim != 2 or probs_in.shape[1] != probs_out.shape[1]:
        raise ValueError(
            f"probs_in {tuple(probs_in.shape)} and probs_out {tuple(probs_out.shape)} must be "
            "(n, K) with the same K"
        )
    if not len(probs_in) or not len(probs_out):
        raise ValueError("both in-distribution and OOD sets must be non-empty")
    from torchmetrics.functional.classification import binary_auroc  # slow import: lazy

    scores = torch.cat([predictive_entropy(probs_in), predictive_entropy(probs_out)])
    target = torch.cat([torch.zeros(len(probs_in)), torch.ones(len(probs_out))]).long()
    return float(binary_auroc(scores.cpu(), target))
