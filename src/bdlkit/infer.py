"""``bdlkit.infer``: run any method on any problem in one call.

The data flow is: problem → algorithm (``build``) → ``init`` → ``step`` over
minibatches → kept samples / final state → :class:`~bdlkit.result.Result`.

Sampler defaults: the first half of the steps is burn-in, and draws are thinned so
that about 1 000 per chain (Target) or 100 (network) are kept. On a Target,
samplers run ``chains=4`` independent chains vectorised in one state. Every random
draw (initialisation, data order, algorithm noise) is derived from ``seed``.
"""

from __future__ import annotations

import inspect
import json
import math
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from . import rng
from .algorithms import get_method
from .problems import BayesianModel, Target
from .result import Result
from .tree import all_finite, stack
from .types import Algorithm, Problem


class NonFiniteError(FloatingPointError):
    """The log density or the parameters became NaN or infinite during inference."""


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
    _check_hyper(module, method, hyper)
    problem.validate_data(data)
    is_target = isinstance(problem, Target)
    if isinstance(problem, BayesianModel):
        _warn_num_data(problem, data)
    total = _resolve_steps(steps, epochs, data, batch_size, is_target)
    algorithm: Algorithm = module.build(problem, **hyper)
    sampler = algorithm.kind == "sampler"
    if chains is not None and not is_target:
        raise ValueError("chains= is for Targets; for a network run infer with several seeds")
    if is_target and isinstance(init, Tensor):
        init_chains = init.shape[0] if init.ndim == 2 else None
        if chains is not None and chains != init_chains:
            raise ValueError(f"init has shape {tuple(init.shape)} but chains={chains}")
        chains = init_chains
    elif is_target and chains is None:
        chains = 4 if sampler else None
    if chains is not None and chains < 1:
        raise ValueError(f"chains must be >= 1, got {chains}")
    burnin = total // 2 if burnin is None else burnin
    if not 0 <= burnin < total:
        raise ValueError(f"burnin must be in [0, steps={total}), got {burnin}")
    per_chain_keep = 1000 if is_target else 100
    thin = max(1, (total - burnin) // per_chain_keep) if thin is None else thin
    if thin < 1:
        raise ValueError(f"thin must be >= 1, got {thin}")
    if max_samples is not None and max_samples < 1:
        raise ValueError(f"max_samples must be >= 1, got {max_samples}")
    if max_samples is None and not is_target:
        max_samples = per_chain_keep

    gen = rng.generator(seed)
    data_gen = rng.split(gen)
    if init is None:
        init = problem.init_params(gen, chains) if chains else problem.init_params(gen)
    state = algorithm.init(init, generator=gen)

    kept: deque = deque(maxlen=max_samples)
    history: list[dict[str, float]] = []
    if log_every < 1:
        raise ValueError(f"log_every must be >= 1, got {log_every}")
    batches = _batches(problem, data, batch_size, data_gen)
    start = time.perf_counter()
    bar = tqdm(total=total, desc=method, disable=not progress, leave=False)
    for _ in range(total):
        state, info = algorithm.step(state, next(batches))
        t = state.step
        value = info.get("log_prob")
        if value is not None and not torch.isfinite(value).all():
            raise NonFiniteError(
                f"{method}: the log density became {value.item() if value.numel() == 1 else 'NaN'} "
                f"at step {t}; the step size is probably too large (lower lr) or the data "
                "contain extreme values"
            )
        if sampler and t > burnin and (t - burnin) % thin == 0:
            kept.append(algorithm.params(state))
        if t % log_every == 0 or t == total:
            history.append({"step": t, **{k: _scalar(v) for k, v in info.items()}})
            bar.set_postfix(log_prob=f"{history[-1].get('log_prob', float('nan')):.4g}")
        bar.update(1)
    bar.close()
    if not all_finite(algorithm.params(state)):
        raise NonFiniteError(f"{method}: parameters are NaN or inf after {total} steps; lower lr")
    config = {
        "method": method,
        "kind": algorithm.kind,
        "hyper": {k: v for k, v in hyper.items() if _is_json(v)},
        "hyper_serializable": all(_is_json(v) for v in hyper.values()),
        "seed": seed,
        "steps": total,
        "batch_size": batch_size,
        "chains": chains,
        "burnin": burnin,
        "thin": thin,
        "wall_time_s": time.perf_counter() - start,
        "problem": repr(problem),
    }
    samples = stack(list(kept)) if kept else None
    return Result(problem, algorithm, state, samples, history, config)


def _check_hyper(module: Any, method: str, hyper: dict[str, Any]) -> None:
    params = list(inspect.signature(module.build).parameters)[1:]
    unknown = sorted(set(hyper) - set(params))
    if unknown:
        raise ValueError(
            f"unknown hyperparameter(s) {unknown} for method {method!r}; valid: {params}"
        )


def _resolve_steps(
    steps: int | None, epochs: int | None, data: Any, batch_size: int, is_target: bool
) -> int:
    if (steps is None) == (epochs is None):
        raise ValueError("give exactly one of steps= or epochs=")
    if steps is not None:
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        return int(steps)
    if is_target:
        raise ValueError("epochs= needs data; a Target has none: use steps=")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if isinstance(data, torch.utils.data.DataLoader):
        return epochs * len(data)
    n = len(_tensors(data)[0])
    return epochs * math.ceil(n / min(batch_size, n))


def _tensors(data: Any) -> tuple[Tensor, Tensor]:
    if hasattr(data, "x_train"):
        return data.x_train, data.y_train
    return data[0], data[1]


def _batches(
    problem: Problem, data: Any, batch_size: int, generator: torch.Generator
) -> Iterator[Any]:
    """Endless minibatches: reshuffled every epoch with ``generator``; ``None`` for a Target."""
    if isinstance(problem, Target):
        while True:
            yield None
    if isinstance(data, torch.utils.data.DataLoader):
        while True:
            yield from ((b[0], b[1]) for b in data)
    x, y = _tensors(data)
    n = len(x)
    size = min(batch_size, n)
    while True:
        perm = torch.randperm(n, generator=generator)
        for i in range(0, n, size):
            idx = perm[i : i + size]
            yield x[idx], y[idx]


def _warn_num_data(problem: BayesianModel, data: Any) -> None:
    if isinstance(data, torch.utils.data.DataLoader):
        n = len(data.dataset) if hasattr(data, "dataset") else None
    else:
        n = len(_tensors(data)[0])
    if n is not None and n != problem.num_data:
        import warnings

        warnings.warn(
            f"BayesianModel.num_data={problem.num_data} but the training data has {n} rows; "
            "the likelihood is scaled to num_data",
            stacklevel=3,
        )


def _scalar(v: Any) -> float:
    if isinstance(v, Tensor):
        return float(v.detach().sum()) if v.numel() > 1 else float(v.detach())
    return float(v)


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except TypeError:
        return False
    return True
