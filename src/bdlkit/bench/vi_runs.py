"""One guarded VI run on a Target, measured along the way: the engine of the VI benchmarks.

``run_vi`` builds a method, runs it for a budget of **score evaluations** (so a method
that spends B scores per step gets budget/B steps) under a wall-clock limit, and measures
the approximation at about ``num_points`` log-spaced steps. Whatever goes wrong becomes a
``status`` in the record, never an exception that stops a suite:

====================  =========================================================
``ok``                the whole budget was spent
``timeout``           the wall-clock limit ran out first (the curve so far is kept)
``numerical_failure`` the method reported itself stuck (GSM/BaM: ``patience``
                      rejected updates in a row)
``diverged``          NaN/inf in the parameters, in a measurement, or a
                      :class:`bdlkit.core.errors.NonFiniteError` from the method
``out_of_memory``     an allocation failed, or the estimated size of the method's
                      d × d matrices exceeds ``memory_limit_gb`` (then it is not run)
``error``             any other exception (its message is kept)
====================  =========================================================

Time counts only ``step`` calls, not the measurements. ``tune_then_repeat`` implements the
equal-size tuning grid: per method, every grid point on the first seed, the one whose final
criterion (the negative ELBO or KL) is lowest among runs that did not fail, then that point
on the remaining seeds.
"""

from __future__ import annotations

import math
import statistics
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from bdlkit import algorithms
from bdlkit.core import rng
from bdlkit.core.errors import NonFiniteError
from bdlkit.core.schedules import exponential
from bdlkit.families.full_gaussian import FullGaussian
from bdlkit.problems import Target

Measure = Callable[[Tensor, Tensor, Any], dict[str, float]]  # (mean, cov, approximation)
"""``measure(mean (d,), cov, approximation)`` → metrics; ``cov`` is ``(d, d)`` (full) or ``(d,)``
variances; the approximation itself for what its moments cannot give (a flow's ELBO)."""

FULL_MATRICES = {"gsm": 8, "bam": 12}  # d × d float work arrays of the full variants (approx.)


@dataclass(frozen=True)
class Annealed:
    """A learning rate annealed geometrically from ``start`` to ``start · ratio`` over the run."""

    start: float
    ratio: float = 1e-2

    def resolve(self, steps: int) -> Callable[[int], float]:
        return exponential(self.start, self.start * self.ratio, max(steps, 1))

    def __str__(self) -> str:
        return f"{self.start:g}→{self.start * self.ratio:g}"


@dataclass(frozen=True)
class MethodSpec:
    """A benchmark row: a registered ``method`` with fixed ``hyper`` and a tuning ``grid``."""

    label: str
    method: str
    hyper: dict[str, Any] = field(default_factory=dict)
    grid: tuple[dict[str, Any], ...] = ({},)

    def configs(self) -> list[dict[str, Any]]:
        return [{**self.hyper, **point} for point in self.grid]


def scores_per_step(method: str, hyper: dict[str, Any]) -> int:
    """Score evaluations (gradients of log π) one step spends: the ``num_samples`` that
    the method's ``build`` resolves from ``hyper`` (its default may depend on other
    options, e.g. score_vi's solver)."""
    if "num_samples" in hyper:
        return int(hyper["num_samples"])
    probe = Target(lambda th: -0.5 * (th * th).sum(-1), dim=1)
    build = {k: v for k, v in hyper.items() if not isinstance(v, Annealed)}
    try:
        with warnings.catch_warnings():  # the real build warns, not this probe
            warnings.simplefilter("ignore")
            return int(algorithms.get_method(method).build(probe, **build).num_samples)
    except (ValueError, TypeError):  # bad options: run_vi records the error of its build
        return 1


def describe(hyper: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in hyper.items())


def estimated_gb(method: str, hyper: dict[str, Any], dim: int) -> float:
    """Rough memory of the d × d arrays a full-covariance variant keeps (float64)."""
    if hyper.get("covariance", "full") == "diag" or method not in FULL_MATRICES:
        return 0.0
    return FULL_MATRICES[method] * dim * dim * 8 / 2**30


def log_points(steps: int, num_points: int) -> list[int]:
    """About ``num_points`` log-spaced step counts in ``[0, steps]`` (0 and steps included)."""
    if steps <= 0:
        return [0]
    pts = {0, steps} | {int(round(x)) for x in torch.logspace(0, math.log10(steps),
                                                               num_points).tolist()}
    return sorted(p for p in pts if 0 <= p <= steps)


def moments(approx: Any) -> tuple[Tensor, Tensor]:
    """``(mean, cov)`` of a Target approximation: ``cov`` (d, d) if full, else (d,) variances."""
    if isinstance(approx, FullGaussian):
        return approx.mean, approx.cov
    return approx.mean, approx.std ** 2


def run_vi(target: Target, method: str, hyper: dict[str, Any], *, measure: Measure,
           budget: int, init_mean: Tensor, time_limit: float, seed: int = 0,
           num_points: int = 20, memory_limit_gb: float = 8.0) -> dict[str, Any]:
    """Run ``method`` on ``target`` for ``budget`` score evaluations; a record (see module)."""
    per_step = scores_per_step(method, hyper)
    steps = max(budget // per_step, 1)
    hyper_run = {k: (v.resolve(steps) if isinstance(v, Annealed) else v)
                 for k, v in hyper.items()}
    record: dict[str, Any] = {"method": method, "hyper": describe(hyper), "seed": seed,
                              "scores_per_step": per_step, "planned_steps": steps,
                              "status": "ok", "message": "", "curve": []}
    gb = estimated_gb(method, hyper, target.dim)
    if gb > memory_limit_gb:
        record.update(status="out_of_memory", steps=0, seconds=0.0,
                      message=f"needs ~{gb:.1f} GB of d×d arrays (limit {memory_limit_gb} GB)")
        return record
    elapsed, t = 0.0, 0
    algo = state = None
    try:
        algo = algorithms.get_method(method).build(target, **hyper_run)
        state = algo.init(init_mean.clone(), generator=rng.generator(seed))
        points = log_points(steps, num_points)
        for stop in points:
            start = time.perf_counter()
            while t < stop and elapsed + time.perf_counter() - start < time_limit:
                state, _ = algo.step(state, None)
                t += 1
                if algo.status(state) != "ok":
                    record["status"] = algo.status(state)
                    break
            elapsed += time.perf_counter() - start
            point = _measure_point(algo, state, measure, t, per_step, elapsed)
            record["curve"].append(point)
            if not all(math.isfinite(v) for v in point.values()):
                record.update(status="diverged", message="non-finite measurement")
            if record["status"] != "ok":
                break
            if t < stop:
                record.update(status="timeout",
                              message=f"{t} of {steps} steps in {time_limit:g} s")
                break
    except NonFiniteError as exc:
        record.update(status="diverged", message=str(exc).splitlines()[0][:300])
    except (torch.OutOfMemoryError, MemoryError) as exc:
        record.update(status="out_of_memory", message=str(exc)[:300])
    except Exception as exc:  # noqa: BLE001 -- a suite must survive any one run
        if "out of memory" in str(exc).lower():
            record.update(status="out_of_memory", message=str(exc)[:300])
        else:
            record.update(status="error", message=f"{type(exc).__name__}: {exc}"[:300],
                          traceback=traceback.format_exc(limit=3))
    record.update(steps=t, seconds=elapsed, score_evals=t * per_step)
    record["final"] = record["curve"][-1] if record["curve"] else {}
    return record


def _measure_point(algo: Any, state: Any, measure: Measure, t: int, per_step: int,
                   elapsed: float) -> dict[str, float]:
    approx = algo.approximation(state)
    mean, cov = moments(approx)
    with torch.no_grad():
        values = measure(mean.detach(), cov.detach(), approx)
    return {"step": t, "score_evals": t * per_step, "seconds": elapsed,
            **{k: float(v) for k, v in values.items()}}


FAILED = ("diverged", "numerical_failure", "out_of_memory", "error")


def select_best(runs: Sequence[dict[str, Any]], criterion: str) -> dict[str, Any] | None:
    """The grid point (``hyper``) whose runs have the lowest median final ``criterion``
    (with one run per point, as in :func:`tune_then_repeat`, simply the lowest).

    Runs that failed (``FAILED``) do not compete; a timed-out run competes with the value
    it reached. Returns ``{"hyper", "runs"}`` or ``None`` when every run failed.
    """
    by_hyper: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_hyper.setdefault(r["hyper"], []).append(r)
    best, best_value = None, math.inf
    for hyper, group in by_hyper.items():
        values = [r["final"].get(criterion, math.nan) for r in group
                  if r["status"] not in FAILED]
        values = [v for v in values if math.isfinite(v)]
        if len(values) < len(group):
            continue
        value = statistics.median(values)
        if value < best_value:
            best, best_value = {"hyper": hyper, "runs": group}, value
    return best


def tune_then_repeat(grid: Sequence[dict[str, Any]], seeds: Sequence[int],
                     run_one: Callable[[dict[str, Any], int], dict[str, Any]],
                     criterion: str) -> list[dict[str, Any]]:
    """The equal-size tuning protocol: every grid point on ``seeds[0]``, the point with the
    lowest final ``criterion`` (:func:`select_best`) chosen once, then repeated on the other
    seeds. Every run gets ``selected`` (True for the chosen point's runs)."""
    runs = [run_one(hyper, seeds[0]) for hyper in grid]
    best = select_best(runs, criterion)
    if best is not None:
        chosen = next(h for h in grid if describe(h) == best["hyper"])
        runs += [run_one(chosen, seed) for seed in seeds[1:]]
    for r in runs:
        r["selected"] = best is not None and r["hyper"] == best["hyper"]
    return runs


def summarize_status(runs: Sequence[dict[str, Any]]) -> str:
    """``"ok"`` if every run is ok, else the counts, e.g. ``"timeout×2, ok×1"``."""
    counts: dict[str, int] = {}
    for r in runs:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    if set(counts) == {"ok"}:
        return "ok"
    return ", ".join(f"{k}×{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


__all__ = [
    "FAILED", "Annealed", "MethodSpec", "describe", "log_points", "moments", "run_vi",
    "scores_per_step", "select_best", "summarize_status", "tune_then_repeat",
]
