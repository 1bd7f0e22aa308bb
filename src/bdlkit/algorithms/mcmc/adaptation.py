"""The default length of a full-batch sampler's adaptation (HMC's dual averaging of ε,
NUTS's warm-up): half the run, at most a cap.

A fixed adaptation length refuses every run shorter than it (``bdlkit fit --method hmc
--epochs 30`` is 30 full-batch iterations); half the run matches the default burn-in,
so every kept draw comes from the tuned sampler whatever the run length.
"""

from __future__ import annotations


def default_adaptation(requested: int | None, cap: int, total_steps: int | None) -> int:
    """``requested`` when given; else ``min(cap, total_steps // 2)``, or ``cap`` when the
    run length is not known (an algorithm stepped by hand, outside a runner)."""
    if requested is not None:
        return requested
    if total_steps is None:
        return cap
    return min(cap, total_steps // 2)
