"""The default sample store of a run: how much burn-in, how much thinning, what cap.

A policy of the engine's, kept apart from the stores themselves so that
:class:`~bdlkit.engine.runner.Runner` asks one function what a run keeps.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from bdlkit.core.errors import caller_stacklevel
from bdlkit.engine.collect.disk import DiskStore
from bdlkit.engine.collect.store import MemoryStore, SampleStore


def default_store(
    total: int,
    is_target: bool,
    run_dir: Path | None = None,
    burnin: int | None = None,
    thin: int | None = None,
    max_samples: int | None = None,
    gated: bool = False,
    warmup: int = 0,
) -> SampleStore:
    """The default sample store: first half burn-in; about 1 000 (Target, per chain) or
    100 (network) thinned draws kept; on disk under ``run_dir/samples`` when given.

    ``gated``: the algorithm chooses its draws itself (``keep(t)``, cyclical SG-MCMC), so
    the defaults are no burn-in and no thinning (only the cap applies). ``warmup``: the
    algorithm adapts itself for that many steps (HMC's step size, NUTS's warm-up), so the
    default burn-in is at least that long, and a shorter one given by the user warns."""
    if warmup >= total:
        raise ValueError(
            f"the sampler adapts its step size for {warmup} steps, the whole run of {total} "
            "steps, so no draw would come from the tuned sampler: lower adapt_steps (hmc) or "
            "warmup (nuts), or run more steps"
        )
    if burnin is None:
        burnin = 0 if gated else max(total // 2, warmup)
    elif burnin < warmup:
        warnings.warn(f"burnin={burnin} keeps draws from the first {warmup} steps, in which "
                      "the sampler still adapts its step size: they are not from the "
                      "stationary chain; use burnin >= the warm-up",
                      stacklevel=caller_stacklevel())
    if not 0 <= burnin < total:
        raise ValueError(f"burnin must be in [0, steps={total}), got {burnin}")
    keep = 1000 if is_target else 100
    if thin is None:
        thin = 1 if gated else max(1, (total - burnin) // keep)
    if max_samples is None and not is_target:
        max_samples = keep
    if run_dir is None:
        return MemoryStore(burnin=burnin, thin=thin, max_samples=max_samples)
    return DiskStore(Path(run_dir) / "samples", burnin=burnin, thin=thin,
                     max_samples=max_samples, exist_ok=True)


def store_options(algorithm: Any) -> dict[str, Any]:
    """What an algorithm tells :func:`default_store`: whether it chooses its own draws
    (``chooses_draws``, with ``keep``) and how long it adapts itself (``warmup_steps``)."""
    return {"gated": algorithm.chooses_draws, "warmup": int(algorithm.warmup_steps)}

