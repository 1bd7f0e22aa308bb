"""``bdlkit.infer``: run any method on any problem in one call.

The data flow is: problem → algorithm (``build``) → ``init`` → ``step`` over
minibatches (:class:`~bdlkit.engine.runner.Runner`, in memory) → kept samples / final
state → :class:`~bdlkit.engine.result.Result`.

Sampler defaults: the first half of the steps is burn-in, and draws are thinned so
that about 1 000 per chain (Target) or 100 (network) are kept. On a Target,
samplers run ``chains=4`` independent chains vectorised in one state. Every random
draw (initialisation, data order, algorithm noise) is derived from ``seed``.

VI on a Target (methods of kind ``"vi"``) starts by default at the mode with the diagonal
Laplace scales s (``start="laplace"``, :mod:`bdlkit.algorithms.vi.laplace`): the method runs on the
standardised coordinates z, θ = θ̂ + s ⊙ z, from q₀ = N(0, init_std² I) with
``init_std=1`` unless given (so q₀ is the Laplace approximation itself, and an explicit
``init_std`` is in units of s), and one learning rate fits every coordinate however
differently they are scaled. The result is mapped back: ``Result.state``'s λ,
``sample``, ``params`` and ``algorithm.approximation`` are all in θ, and the history's
``log_prob`` is log π(θ) (the ELBO is the same in both coordinates; other losses, and
the optimiser's moments in ``state``, are those of the run on z). The start costs a mode
search (at most 500 L-BFGS iterations) and d Hessian-vector products. Without a usable
mode (the search or the Hessian fails, or ends no higher than log π(0)) the run warns and
starts from ``problem.init_params`` as with ``start="init"``.
"""

from __future__ import annotations

import json
import warnings
from typing import TYPE_CHECKING, Any

from bdlkit.core.errors import NonFiniteError

if TYPE_CHECKING:
    import torch

    from bdlkit.algorithms.vi import laplace
    from bdlkit.core.protocol import Algorithm, Problem
    from bdlkit.engine.result import Result

__all__ = ["NonFiniteError", "infer"]

STARTS = ("auto", "laplace", "init")


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
    start: str = "auto",
    log_every: int = 1,
    progress: bool | None = None,
    device: str | torch.device | None = None,
    callbacks: list[Any] | None = None,
    compile: bool = False,
    **hyper: Any,
) -> Result:
    """Fit ``method`` to ``problem`` and return a :class:`~bdlkit.engine.result.Result`.

    Args:
        problem: a :class:`~bdlkit.Target` or :class:`~bdlkit.BayesianModel`.
        method: a name from ``bdlkit.algorithms.METHODS`` ("map", "sgld", ...).
        data: training data for a model: a Dataset, ``(x, y)`` tensors or a DataLoader
            (a DataLoader shuffles with its own generator: give it one for
            reproducible runs).
        steps: how long to run, in steps (give exactly one of ``steps`` and ``epochs``).
        epochs: how long to run, in passes over ``data``.
        seed: seeds initialisation, data order and algorithm noise.
        batch_size: minibatch size when ``data`` holds tensors.
        chains: parallel chains on a Target (default 4 for samplers, or the leading
            dimension of a 2-D ``init``).
        burnin, thin, max_samples: which sampler draws are kept (module docstring).
        init: starting parameters (default: ``problem.init_params``); for VI also a
            Gaussian λ to warm-start from. An explicit ``init`` means ``start="init"``.
        start: where VI on a Target starts: ``"laplace"`` (at the mode, on the
            Laplace-standardised coordinates: module docstring), ``"init"`` (from
            ``init`` or ``problem.init_params`` with σ = ``init_std``, the only start for
            networks and non-VI methods), or ``"auto"`` (default): ``"laplace"`` for VI
            on a Target without ``init``, else ``"init"``.
        log_every: record the step's info in ``Result.history`` every this many steps.
        progress: show a tqdm progress bar; ``None`` (default) shows one where stderr is
            a terminal and the run lasts more than a few seconds
            (:data:`~bdlkit.engine.runner.AUTO_PROGRESS_DELAY_S`), ``False`` never.
        device: run on this device (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``): a
            BayesianModel is moved there in place (``model.to(device)``), with ``init``
            and every training batch, tensors or DataLoader
            (:mod:`bdlkit.engine.placement`); default: where the model already is.
            Predict with inputs on the same device.
        callbacks: called with each logged entry and the Result
            (:mod:`bdlkit.engine.callbacks`); a Laplace-started VI run shows them the run
            on z (its ``log_prob`` and Result before the mapping back to θ).
        compile: run compiled (:mod:`bdlkit.engine.compiled`): on a Target in unrolled
            chunks of 100 steps compiled once (about 20 s; the run's ``config["compile"]``
            reports it), logged at chunk ends; on a network with the element-wise update
            compiled. Where a step cannot be compiled the run warns and stays eager.
        **hyper: the method's hyperparameters (e.g. ``lr``).
    """
    # imported here, not at the top: ``import bdlkit`` binds this function without torch
    import torch
    from torch import Tensor

    from bdlkit.algorithms import get_method
    from bdlkit.algorithms.vi import laplace
    from bdlkit.core.protocol import Variational
    from bdlkit.engine.placement import place
    from bdlkit.engine.runner import Runner
    from bdlkit.problems import BayesianModel, Target
    from bdlkit.runs.config import check_device, check_keys, method_hyperparameters

    module = get_method(method)
    check_keys(hyper, method_hyperparameters(method), f"the hyperparameters of method {method!r}")
    if device is not None:  # checked before anything moves: a typo leaves the model in place
        check_device(str(device))
    problem, init = place(problem, init, device)
    is_target = isinstance(problem, Target)
    algorithm: Algorithm = module.build(problem, **hyper)
    if chains is not None and not is_target:
        raise ValueError("chains= is for Targets; for a network run infer with several seeds")
    if chains is not None and isinstance(algorithm, Variational):
        raise ValueError(f"{method} fits one approximation: chains= is for samplers; drop it")
    run_hyper, start_at = hyper, _laplace_start(problem, algorithm, init, start)
    if start_at is not None:  # the same method on z, θ = θ̂ + s ⊙ z (module docstring)
        run_hyper = {**algorithm.laplace_start, **hyper}  # q₀ = the Laplace approximation
        algorithm = module.build(laplace.standardized(problem, start_at), **run_hyper)
        init = torch.zeros(problem.dim, dtype=problem.dtype)
    if is_target and isinstance(init, Tensor):
        init_chains = init.shape[0] if init.ndim == 2 else None
        if chains is not None and chains != init_chains:
            raise ValueError(f"init has shape {tuple(init.shape)} but chains={chains}")
        chains = init_chains
    elif is_target and chains is None:
        chains = 4 if algorithm.collects_draws else None
    runner = Runner(  # validates the data, binds the run length, builds the store
        algorithm, data, steps=steps, epochs=epochs, seed=seed, batch_size=batch_size,
        burnin=burnin, thin=thin, max_samples=max_samples, init=init, chains=chains,
        log_every=log_every,
        progress="auto" if progress is None else progress, warm_start=True if start_at else None,
        callbacks=callbacks, compile=compile,
    )
    rows = runner.batches.num_rows
    if isinstance(problem, BayesianModel) and rows is not None and rows != problem.num_data:
        warnings.warn(
            f"BayesianModel.num_data={problem.num_data} but the training data has {rows} rows; "
            "the likelihood is scaled to num_data",
            stacklevel=2,
        )
    config = {
        "hyper": {k: v for k, v in hyper.items() if _is_json(v)},
        "hyper_serializable": all(_is_json(v) for v in hyper.values()),
        "start": "laplace" if start_at else "init",
        **({"laplace": start_at.message} if start_at else {}),
    }
    result = runner.fit(config=config)
    if start_at is None:
        return result
    # the same method on θ, with the run's length bound as the runner bound it on z
    return _on_theta(result, module.build(problem, **run_hyper).for_run(runner.total),
                     start_at)


def _laplace_start(problem: Any, algorithm: Algorithm, init: Any,
                   start: str) -> laplace.LaplaceStart | None:
    """The Laplace start of ``problem`` when ``start`` asks for it (or, for ``"auto"``,
    when the method is VI on a Target without ``init``), else ``None``."""
    from bdlkit.algorithms.vi import laplace
    from bdlkit.core.protocol import Variational
    from bdlkit.problems import Target

    if start not in STARTS:
        raise ValueError(f"start must be one of {STARTS}, got {start!r}")
    applies = isinstance(problem, Target) and isinstance(algorithm, Variational)
    if start == "laplace" and (not applies or init is not None):
        raise ValueError(
            "start='laplace' is for VI methods on a Target without init= (got "
            f"{algorithm.name} on a {type(problem).__name__}"
            f"{' with init=' if init is not None else ''}); use start='init'"
        )
    if start == "init" or not applies or init is not None:
        return None
    found = laplace.laplace_start(problem)
    if found.fallback:
        warnings.warn(
            f"{algorithm.name}: no Laplace start for {problem.name!r} ({found.message}); "
            "starting from problem.init_params with the method's init_std instead. Pass "
            "init= (a point near the posterior) or start='init' to choose the start yourself",
            stacklevel=3,
        )
        return None
    return found


def _on_theta(result: Result, algorithm: Algorithm, start: laplace.LaplaceStart) -> Result:
    """``result`` of the run on z with its state (λ) and logged log densities in θ, and
    ``algorithm`` (the same method built on the original problem) to read it."""
    from bdlkit.algorithms.vi import laplace
    from bdlkit.engine.result import Result

    shift = laplace.log_det(start)
    history = [{**e, "log_prob": e["log_prob"] - shift} if "log_prob" in e else e
               for e in result.history]
    return Result(algorithm.problem, algorithm, laplace.state_to_theta(result.state, start),
                  None, history, result.config)


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except TypeError:
        return False
    return True
