"""Agreement and total variation against a reference predictive (HMC), ``docs/metrics.md``.

Definitions of the NeurIPS 2021 BDL competition (Izmailov et al. 2021)::

    agreement = (1/n) Σ_i 1[argmax_c p̂(c|x_i) = argmax_c p_ref(c|x_i)]
    TV        = (1/n) Σ_i ½ Σ_c |p̂(c|x_i) − p_ref(c|x_i)|

Rows must be aligned by test index (the caller's job; ``docs/metrics.md`` on a permuted subset).
Two lines each, so written here rather than pulled from a library.

:func:`within_chain_diversity` applies the same two measures *between the draws of one
chain* (mean over pairs of draws): how much a sampler explores in function space, 0 for a
chain that stands still (``docs/metrics.md``, Within-chain diversity).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch import Tensor


def _check(probs: Tensor, ref: Tensor) -> None:
    if probs.ndim != 2 or probs.shape != ref.shape:
        raise ValueError(
            f"predictive {tuple(probs.shape)} and reference {tuple(ref.shape)} must both be "
            "(n, K) with the same n and K, rows aligned by test index"
        )
    for name, p in (("predictive", probs), ("reference", ref)):
        p = p.double()
        if not torch.isfinite(p).all():
            raise ValueError(f"{name} probabilities contain NaN or inf")
        if (p < 0).any() or not torch.allclose(p.sum(-1), torch.ones_like(p[:, 0]), atol=1e-3):
            hint = " (these look like log probabilities: exponentiate them)" if (
                p <= 0).all() else ""
            raise ValueError(f"{name} rows must be probabilities (>= 0, summing to 1){hint}")


def agreement(probs: Tensor, ref: Tensor) -> float:
    """Fraction of inputs whose top class matches the reference's."""
    _check(probs, ref)
    return float((probs.argmax(-1) == ref.to(probs.device).argmax(-1)).double().mean())


def total_variation(probs: Tensor, ref: Tensor) -> float:
    """Mean over inputs of ``½ Σ_c |p̂ − p_ref|``."""
    _check(probs, ref)
    diff = probs.double() - ref.to(probs.device).double()
    return float(0.5 * diff.abs().sum(-1).mean())


def within_chain_diversity(draw_probs: Tensor) -> dict[str, float]:
    """Mean pairwise disagreement and total variation between the S >= 2 draws of one chain.

    ``draw_probs`` is ``(S, n, K)``: each draw's predictive probabilities on n inputs. For
    every input and every pair of distinct draws i < j, disagreement is
    ``1[argmax p_i ≠ argmax p_j]`` and TV ``½ Σ_c |p_i − p_j|``; both are averaged over pairs
    and inputs. Returns ``{"disagreement": ..., "tv": ...}``."""
    if draw_probs.ndim != 3 or draw_probs.shape[0] < 2:
        raise ValueError(f"draw_probs must be (S, n, K) with S >= 2 draws of one chain, got "
                         f"{tuple(draw_probs.shape)}")
    p = draw_probs.double()
    if not torch.isfinite(p).all():
        raise ValueError("draw probabilities contain NaN or inf")
    s = p.shape[0]
    pairs = s * (s - 1)
    counts = torch.nn.functional.one_hot(p.argmax(-1), p.shape[-1]).sum(0).double()  # (n, K)
    same = (counts * (counts - 1)).sum(-1) / pairs  # ordered pairs with the same top class
    per_point = p.transpose(0, 1)  # (n, S, K)
    l1 = torch.cat([torch.cdist(c, c, p=1).sum((-1, -2))  # diagonal is 0; chunks bound memory
                    for c in per_point.split(max(1, 2**22 // (s * s)))]) / pairs
    return {"disagreement": float(1.0 - same.mean()), "tv": float(0.5 * l1.mean())}


def load_reference(path: str | os.PathLike) -> Tensor:
    """Reference probabilities ``(n, K)`` from ``.npy``/``.npz`` (no pickle) or safetensors.

    An ``.npz`` or safetensors file must hold exactly one array (or one named ``probs``).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"reference file {path} does not exist")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            return torch.from_numpy(np.load(path, allow_pickle=False))
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        elif suffix == ".safetensors":
            from bdlkit.core.serialization import load_tensors

            arrays = load_tensors(path)
        else:
            raise ValueError(f"unsupported reference format {suffix!r}: use .npy, .npz or "
                             ".safetensors")
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read reference probabilities from {path}: {err}") from None
    if "probs" in arrays:
        return torch.as_tensor(arrays["probs"])
    if len(arrays) != 1:
        raise ValueError(f"{path} holds {sorted(arrays)}; name the probabilities 'probs'")
    return torch.as_tensor(next(iter(arrays.values())))
