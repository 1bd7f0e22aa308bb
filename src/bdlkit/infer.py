"""``bdlkit.infer``: run any method on any problem in one call.

The data flow is: problem → algorithm (``build``) → ``init`` → ``step`` over
minibatches (:class:`~bdlkit.runner.Runner`, in memory) → kept samples / final
state → :class:`~bdlkit.result.Result`.

Sampler defaults: the first half of the steps is burn-in, and draws are thinned so
that about 1 000 per chain (Target) or 100 (network) are kept. On a Target,
samplers run ``chains=4`` independent chains vectorised in one state. Every random
draw (initialisation, data order, algorithm noise) is derived from ``seed``.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from torch import Tensor

from .algorithms import get_method
from .config import check_keys, method_hyperparameters
from .problems import BayesianModel, Target
from .result import Result
from .runner import NonFiniteError, Runner, default_store, store_options
from .types import Algorithm, Problem

__all__ = ["NonFiniteError", "infer"]


def infer(
    problem: Problem,
    method: str,
    *,
    data: Any = None,
    steps: int | None = None,
    epochs: int | None = None,
    seed: int = 0,
    batch_size: int = 128,
    chains: int | None = None,
    burnin: int | None = None,
    thin: int | None = None,
    max_samples: int | None = None,
    init: Any = None,
    log_every: int = 1,
    progress: bool = False,
    **hyper: Any,
) -> Result:
    """Fit ``method`` to ``problem`` and return a :class:`~bdlkit.result.Result`.

    Args:
        problem: a :class:`~bdlkit.Target` or :class:`~bdlkit.BayesianModel`.
        method: a name from ``bdlkit.algorithms.METHODS`` ("map", "sgld", ...).
        data: training data for a model: a Dataset, ``(x, y)`` tensors or a DataLoader
            (a DataLoader shuffles with its own generator: give it one for
            reproducible runs).
        steps / epochs: how long to run (exactly one of them; epochs need data).
        seed: seeds initialisation, data order and algorithm noise.
        batch_size: minibatch size when ``data`` holds tensors.
        chains: parallel chains on a Target (default 4 for samplers, or the leading
            dimension of a 2-D ``init``).
        burnin, thin, max_samples: which sampler draws are kept (module docstring).
        init: starting parameters (default: ``problem.init_params``).
        log_every: record the step's info in ``Result.history`` every this many steps.
        progress: show a tqdm progress bar.
        **hyper: the method's hyperparameters (e.g. ``lr``).
    """
    module = get_method(method)
    check_keys(hyper, method_hyperparameters(method), f"the hyperparameters of method {method!r}")
    problem.validate_data(data)
    is_target = isinstance(problem, Target)
    algorithm: Algorithm = module.build(problem, **hyper)
    if chains is not None and not is_target:
        raise ValueError("chains= is for Targets; for a network run infer with several seeds")
    if is_target and isinstance(init, Tensor):
        init_chains = init.shape[0] if init.ndim == 2 else None
        if chains is not None and chains != init_chains:
            raise ValueError(f"init has shape {tuple(init.shape)} but chains={chains}")
        chains = init_chains
    elif is_target and chains is None:
        chains = 4 if algorithm.kind == "sampler" else None
    if max_samples is not None and max_samples < 1:
        raise ValueError(f"max_samples must be >= 1, got {max_samples}")
    runner = Runner(
        algorithm, data, seed=seed, batch_size=batch_size, init=init, chains=chains,
        log_every=log_every, progress=progress,
    )
    rows = runner.batches.num_rows
    if isinstance(problem, BayesianModel) and rows is not None and rows != problem.num_data:
        warnings.warn(
            f"BayesianModel.num_data={problem.num_data} but the training data has {rows} rows; "
            "the likelihood is scaled to num_data",
            stacklevel=2,
        )
    total = runner.num_steps(steps, epochs)
    if algorithm.kind == "sampler":
        runner.store = default_store(total, is_target, None, burnin, thin, max_samples,
                                     **store_options(algorithm))
    config = {
        "hyper": {k: v for k, v in hyper.items() if _is_json(v)},
        "hyper_serializable": all(_is_json(v) for v in hyper.values()),
    }
    return runner.fit(total, config=config)


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except TypeError:
        return False
    return True
