"""score_vi's option defaults and checks: the solvers' defaults, the default precision
floor, the ranges, the combinations, and the options that cannot act.

Kept apart from :mod:`.score_vi` so the algorithm file holds the update; every rule here
names the option, the allowed range and the fix.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from bdlkit.algorithms.vi.score_vi_closed_form import CURVATURE_UPDATES
from bdlkit.core.protocol import Problem
from bdlkit.core.value_range import LOW
from bdlkit.problems import Target

PRECONDITIONERS = ("sigma2", "natural", "none")
#: The defaults of the options whose sensible value depends on the solver (stated once).
#: closed_form: ``benchmarks/results/natural-vi-study`` (``bdlkit bench natural-vi-study``).
SOLVER_DEFAULTS: dict[str, dict[str, Any]] = {
    "gradient": {"lr": 1e-2, "num_samples": 1, "antithetic": False, "alpha_max": 0.5,
                 "warmup": 0, "omega": None, "curvature_decay": 0.0, "momentum": 0.9,
                 "init_std": 1e-2, "hess_init": None, "curvature_update": None},
    "closed_form": {"lr": None, "num_samples": 2, "antithetic": True, "alpha_max": 0.5,
                    "warmup": None, "omega": 0.1, "curvature_decay": 0.999, "momentum": 0.9,
                    "init_std": None, "hess_init": 3.0, "curvature_update": None},
}
#: The closed form's defaults on a Target. Its scores are exact and the curvature estimate
#: accurate (unbiased, from exact scores), so the average is fast and linear.
TARGET_CLOSED_FORM = {"curvature_decay": 0.9, "curvature_update": "linear"}
#: The options that cannot act in a configuration, as tuples of the solver, whether only
#: at K = 1, the options, and why (with the fix).
INERT_RULES = [
    ("gradient", False, ("omega", "curvature_decay", "hess_init", "curvature_update"),
     "they are options of solver='closed_form'"),
    ("gradient", True, ("alpha_max", "warmup"),
     "α has no effect with one inner step, the proximal term having zero gradient at "
     "the anchor: use inner_steps > 1 or solver='closed_form'"),
    ("closed_form", False, ("lr",),
     "the closed form takes damped argmin steps of size omega, not lr: set omega"),
]


def warn_inert(solver: str, inner_steps: int, given: dict[str, Any]) -> None:
    """Warn about options the user set that cannot act in this configuration (set: not
    None and not the solver's default, which a resolved algorithm holds)."""
    for rule_solver, only_k1, keys, why in INERT_RULES:
        inert = [k for k in keys
                 if given[k] is not None and given[k] != SOLVER_DEFAULTS[solver][k]]
        if inert and solver == rule_solver and (inner_steps == 1 or not only_k1):
            warnings.warn(f"score_vi: {', '.join(inert)} cannot act with solver={solver!r} "
                          f"and inner_steps={inner_steps} ({why})",
                          stacklevel=6)  # build's caller


def precision_floor(problem: Problem, target: float = 1e-8) -> float:
    """The default ``a_min``: the prior precision 1/(σ₀² T) of a BayesianModel's isotropic
    Gaussian prior (a log-concave likelihood cannot make q wider than the prior), at most
    1/LOW² = 1e30, the precision of the narrowest prior at T = 1
    (:mod:`bdlkit.core.value_range`), so that it stays within float32 whatever σ₀ and T;
    else ``target`` (a Target's density has no separate prior)."""
    if isinstance(problem, Target):
        return target
    return min(1.0 / (problem.prior.scale ** 2 * problem.temperature), LOW ** -2)


def _integer(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or int(value) != value or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def check(problem: Problem, solver: str, loss: str, precondition: str, inner_steps: Any,
          a_min: float | None, max_step: float, opts: dict[str, Any]) -> None:
    """Refuse an option outside its range or a combination that cannot work."""
    if loss not in ("rb", "mc"):
        raise ValueError(f"loss must be 'rb' (Rao-Blackwellised) or 'mc', got {loss!r}")
    if precondition not in PRECONDITIONERS:
        raise ValueError(f"precondition must be one of {PRECONDITIONERS}, got {precondition!r}")
    s = opts["num_samples"]
    _integer("num_samples", s, 1)
    _integer("inner_steps", inner_steps, 1)
    w = opts["warmup"]
    if w is not None and (isinstance(w, bool) or int(w) != w or w < 0):
        raise ValueError(f"warmup must be an integer >= 0 (or None: 10 % of the run), got {w!r}")
    if opts["antithetic"] and s % 2:
        raise ValueError(f"antithetic=True draws pairs: num_samples must be even, got {s}; "
                         "pass num_samples=2 (or 4, ...) or antithetic=False")
    if not 0 <= opts["alpha_max"] <= 1:
        raise ValueError(f"alpha_max must be in [0, 1], got {opts['alpha_max']}")
    if not 0 <= opts["momentum"] < 1:
        raise ValueError(f"momentum must be in [0, 1), got {opts['momentum']}")
    if precondition == "natural" and s < 2:
        raise ValueError(f"num_samples={s}: precondition='natural' centres the cross term over "
                         "draws and needs num_samples >= 2 (e.g. num_samples=2, "
                         "antithetic=True)")
    if solver == "closed_form":
        _check_closed_form(opts, opts["curvature_update"], loss, s)
    if not max_step > 0:
        raise ValueError(f"max_step (in units of σ) must be > 0 (inf: no trust region), got "
                         f"{max_step!r}")
    init_std = opts["init_std"]
    if (init_std is not None and not (init_std > 0 and math.isfinite(init_std))) \
            or (a_min is not None and not a_min > 0):
        raise ValueError(f"init_std and a_min must be finite numbers > 0, got {init_std!r} and "
                         f"{a_min!r}")
    lr = opts["lr"]
    if lr is not None and not callable(lr) and not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")


def _check_closed_form(opts: dict[str, Any], curvature_update: str, loss: str, s: int) -> None:
    if not (opts["omega"] is not None and 0 < opts["omega"] <= 1):
        raise ValueError(f"omega (the closed form's damping) must be in (0, 1], got "
                         f"{opts['omega']!r}; try 0.1")
    start = opts["hess_init"] != "estimate"
    if s < 2 and (loss == "mc" or not opts["antithetic"] and not start):
        raise ValueError(f"num_samples={s}: a curvature estimate from one draw is IVON's "
                         "uncentred Price estimate, which needs the averaged curvature of "
                         "hess_init (and loss='rb'); or draw one antithetic pair, "
                         "num_samples=2 (the default)")
    if not 0 <= opts["curvature_decay"] < 1:
        raise ValueError(f"curvature_decay must be in [0, 1) (0: no averaging), got "
                         f"{opts['curvature_decay']!r}; try 0.999")
    h0 = opts["hess_init"]
    if start and (isinstance(h0, bool) or not isinstance(h0, (int, float))
                  or not 0 < h0 < math.inf):
        raise ValueError(f"hess_init must be a finite number > 0 (the initial curvature per "
                         f"datum) or 'estimate' (start at the first estimate), got {h0!r}")
    if curvature_update not in CURVATURE_UPDATES:
        raise ValueError(f"curvature_update must be one of {CURVATURE_UPDATES}, got "
                         f"{curvature_update!r}")
    if curvature_update == "riemannian" and not start:
        raise ValueError("curvature_update='riemannian' needs a number hess_init (its average "
                         "starts at λ0·h0 + P); with hess_init='estimate' use "
                         "curvature_update='linear'")


__all__ = ["INERT_RULES", "PRECONDITIONERS", "SOLVER_DEFAULTS", "TARGET_CLOSED_FORM", "check",
           "precision_floor", "warn_inert"]
