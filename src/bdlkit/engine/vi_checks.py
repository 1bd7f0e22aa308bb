"""End-of-run checks of a VI result: is σ still at its start, is q still moving?

A VI run ends after as many steps as it was given, converged or not, and its answer then
looks like any other. Two failures are cheap to see from the states alone, so the runner
warns about them at the end of every ``kind == "vi"`` run (:func:`warn_if_unfinished`):

* **σ never moved** (:func:`sigma_message`, any problem): the median σ over all
  coordinates is within a factor :data:`SIGMA_FACTOR` of the method's ``init_std``.
  Starting from a near point mass (the small default ``init_std``, chosen for networks),
  Adam moves log σ by about ``lr`` per step, so a short run returns the initial point
  estimate with a thin layer of noise, and its BMA is the mean's prediction. Skipped for a warm start from a
  Gaussian (``init=DiagGaussianParams``, or ``bdlkit.infer``'s Laplace start), whose σ
  was not a guess. If ``init_std`` already was the posterior scale the warning is a false
  alarm; filter :class:`~bdlkit.core.errors.PointEstimateWarning` then.
* **q still moving** (:func:`convergence_message`, Targets only, where the gradients are
  exact up to the draws): between the state at :data:`SNAPSHOT_FRACTION` of the steps and
  the final one, some mean moved more than :data:`MEAN_SHIFT` final σ, or some log σ more
  than :data:`LOG_SIGMA_SHIFT`. Near the optimum, a step size that is small against σ
  (the default ``lr`` in the Laplace-standardised coordinates of :mod:`bdlkit.infer`,
  where σ ≈ 1) jitters q below both thresholds; a drift along a badly conditioned
  direction does not. Measured with the defaults: no warning for any VI method over 5
  seeds on three Gaussian Targets at 500 and 2000 steps; for advi on the six posteriordb
  posteriors at 2000 steps one, eight schools at 0.53 σ (its error then halved by 8000). Both quantities are invariant under the affine change of variables
  of :mod:`bdlkit.algorithms.vi.laplace`. Networks are not checked: minibatch noise keeps μ moving at
  any constant lr, so the check would fire on runs that are fine.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor

from bdlkit.core.errors import NotConvergedWarning, PointEstimateWarning
from bdlkit.core.protocol import Algorithm, Variational
from bdlkit.core.tree import tree_leaves
from bdlkit.families.diag_gaussian import DiagGaussian, sigma_summary
from bdlkit.problems import Target

#: A median σ within this factor (either way) of its initial value has never moved.
SIGMA_FACTOR = 1.5
#: The snapshot compared with the end of the run, as a fraction of the run.
SNAPSHOT_FRACTION = 0.75
#: A mean that moved more than this many final σ since the snapshot has not converged.
MEAN_SHIFT = 0.5
#: A log σ that moved more than this since the snapshot has not converged.
LOG_SIGMA_SHIFT = 0.3


def snapshot_step(total: int) -> int | None:
    """The step whose state :func:`convergence_message` compares with the last (``None``
    for runs too short to have one before the end)."""
    step = int(total * SNAPSHOT_FRACTION)
    return step if 1 <= step < total else None


def sigma_message(algorithm: Algorithm, state: Any) -> str | None:
    """Why σ looks unmoved, with the fix; ``None`` when it moved, or when the method has no
    ``init_std`` or its q is not a diagonal Gaussian (``state.lam``)."""
    init_std = algorithm.hyperparameters().get("init_std")
    q = algorithm.approximation(state) if isinstance(algorithm, Variational) else None
    lam = q.params if isinstance(q, DiagGaussian) else None
    if not isinstance(init_std, (int, float)) or lam is None:
        return None
    overall = sigma_summary(lam)[-1]  # the row over every coordinate
    median = float(overall["median"])
    if not init_std / SIGMA_FACTOR <= median <= init_std * SIGMA_FACTOR:
        return None
    fixes = ["run more steps"]
    knob, value = step_size(algorithm)
    if value is not None:
        fixes.append(f"a larger {knob} (now {_describe(value)}) or init_std")
    else:
        fixes.append("a larger init_std")
    if algorithm.name == "score_vi" and algorithm.hyperparameters()["solver"] != "closed_form" \
            and isinstance(algorithm.problem, Target):  # on networks it is experimental
        fixes.append("for score_vi solver='closed_form' (σ then moves by a fixed fraction "
                     "per step whatever its scale)")
    return (
        f"{algorithm.name}: the median σ over all {overall['size']} coordinates is "
        f"{median:.3g}, within a factor {SIGMA_FACTOR:g} of init_std={init_std:g}: σ has "
        "barely moved from its start, so the approximation is still close to a point "
        f"estimate (its predictions are nearly those of its mean). Fix: {'; '.join(fixes)}. "
        "If init_std already was the posterior scale, ignore this (PointEstimateWarning)"
    )


def step_size(algorithm: Algorithm) -> tuple[str, Any]:
    """The name and value of the method's step size: ``step_size_param`` when the method
    declares one (e.g. a damping), else ``lr``; value ``None`` for methods without one."""
    knob = algorithm.step_size_param
    return knob, algorithm.hyperparameters().get(knob)


def _describe(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else repr(value)


def marginals(approximation: Any) -> tuple[Tensor, Tensor]:
    """The means and marginal stds of a Gaussian approximation, flattened to ``(d,)``."""
    def flat(tree: Any) -> Tensor:
        return torch.cat([t.detach().reshape(-1) for t in tree_leaves(tree)])

    return flat(approximation.mean), flat(approximation.std)


def convergence_message(algorithm: Algorithm, before: Any, after: Any, before_step: int,
                        total: int) -> str | None:
    """Why q was still moving between ``before`` (the state after ``before_step`` steps) and
    ``after`` (after ``total``), with the fix; ``None`` when it had settled."""
    mean0, std0 = marginals(algorithm.approximation(before))
    mean1, std1 = marginals(algorithm.approximation(after))
    shift = ((mean1 - mean0).abs() / std1).nan_to_num(nan=float("inf"))
    log_ratio = (std1.log() - std0.log()).abs().nan_to_num(nan=float("inf"))
    moved = (shift > MEAN_SHIFT) | (log_ratio > LOG_SIGMA_SHIFT)
    count = int(moved.sum())
    if count == 0:
        return None
    knob, value = step_size(algorithm)
    if knob == "lr" and value is not None:
        fix = ("run more steps while q still drifts; once it only jitters, anneal the step "
               f"size to 0 so that it settles, e.g. lr=bdlkit.core.schedules.exponential(1e-2, "
               f"1e-4, {total})")
    elif value is not None:
        fix = (f"run more steps while q still drifts; if it only jitters, a smaller {knob} "
               f"(now {_describe(value)})")
    else:
        fix = "run more steps, or raise num_samples (less noise in each update)"
    return (
        f"{algorithm.name}: the run has not converged: between step {before_step} and step "
        f"{total}, {count} of {len(moved)} coordinates moved their mean by more than "
        f"{MEAN_SHIFT:g} final σ (up to {float(shift.max()):.3g}) or their log σ by more "
        f"than {LOG_SIGMA_SHIFT:g} (up to {float(log_ratio.max()):.3g}). Fix: {fix}"
    )


def warn_if_unfinished(algorithm: Algorithm, state: Any, *, warm_start: bool,
                       snapshot: Any = None, snapshot_at: int | None = None,
                       total: int = 0) -> None:
    """Issue the warnings of the module docstring for the final ``state`` of a VI run;
    ``snapshot`` is the state after ``snapshot_at`` steps (None: no convergence check)."""
    message = None if warm_start else sigma_message(algorithm, state)
    if message is not None:
        warnings.warn(message, PointEstimateWarning, stacklevel=4)
    if snapshot is not None and snapshot_at is not None:
        message = convergence_message(algorithm, snapshot, state, snapshot_at, total)
        if message is not None:
            warnings.warn(message, NotConvergedWarning, stacklevel=4)


__all__ = ["LOG_SIGMA_SHIFT", "MEAN_SHIFT", "SIGMA_FACTOR", "SNAPSHOT_FRACTION",
           "convergence_message", "marginals", "sigma_message", "snapshot_step", "step_size",
           "warn_if_unfinished"]
