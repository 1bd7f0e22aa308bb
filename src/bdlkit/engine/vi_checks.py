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
* **q not at a stationary point** (:func:`stationarity`, :func:`convergence_message`): the
  gradient of the ELBO at the final q, estimated from fresh antithetic draws with the
  full-data score, expressed as the Newton step it asks for. Per coordinate, with
  q = N(μ, σ²) and the ELBO's curvature at its optimum (1/σ² in μ, 2 in log σ)::

      Δμ_i/σ_i = σ_i · mean_k ŝ_i(θ_k),     Δlog σ_i = (mean_k ŝ_i(θ_k) σ_i ε_ik + 1)/2

  A coordinate has not converged when a step is larger than :data:`MEAN_SHIFT` (its σ) or
  :data:`LOG_SIGMA_SHIFT` and significant (more than :data:`Z_CUTOFF` Monte Carlo standard
  errors from zero). Unlike the movement of q over the run's last part, this does not stop
  when the step size has decayed (the cosine schedule of :mod:`bdlkit.algorithms.vi.schedule`)
  or the iterates are averaged, and it asks nothing of the method: ADVI, IVON and the closed
  form share the mean-field ELBO's stationary points. Both quantities are invariant under
  the affine change of variables of :mod:`bdlkit.algorithms.vi.laplace`. The runner warns on
  a Target (exact scores, :data:`TARGET_DRAWS` draws, any coordinate); for a network the
  benchmarks call :func:`stationarity` with the training data (full-data scores, a few
  draws) and report the fraction of weights that have not converged.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bdlkit.core.errors import NotConvergedWarning, PointEstimateWarning
from bdlkit.core.protocol import Algorithm, Variational
from bdlkit.core.tree import device_of, num_draws, randn_like, stack, tree_leaves, tree_map
from bdlkit.families.diag_gaussian import DiagGaussian, sigma_summary
from bdlkit.problems import Target

#: A median σ within this factor (either way) of its initial value has never moved.
SIGMA_FACTOR = 1.5
#: A Newton step on μ larger than this many σ has not converged.
MEAN_SHIFT = 0.5
#: A Newton step on log σ larger than this has not converged.
LOG_SIGMA_SHIFT = 0.3
#: ... when it is also this many Monte Carlo standard errors from zero.
Z_CUTOFF = 3.0
#: Draws (antithetic pairs) of the check on a Target, whose scores are cheap.
TARGET_DRAWS = 256


def sigma_message(algorithm: Algorithm, state: Any) -> str | None:
    """Why σ looks unmoved, with the fix; ``None`` when it moved, when the method has no
    ``init_std`` or its σ₀ is not a guess (``guessed_init_std``: IVON's and the closed
    form's come from an initial curvature, and move on purpose slowly), or when q is not a
    diagonal Gaussian (``state.lam``)."""
    init_std = algorithm.hyperparameters().get("init_std")
    if isinstance(algorithm, Variational) and not algorithm.guessed_init_std:
        return None
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
            and isinstance(algorithm.problem, Target):  # scale-free there (exact scores)
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


@dataclass(frozen=True)
class Stationarity:
    """The Newton steps the ELBO asks for at q, per coordinate (flattened), with their z."""

    mean_step: Tensor  # Δμ_i/σ_i
    log_sigma_step: Tensor  # Δlog σ_i
    mean_z: Tensor
    log_sigma_z: Tensor

    @property
    def unconverged(self) -> Tensor:
        """The coordinates with a large and significant step (module docstring)."""
        return (((self.mean_step.abs() > MEAN_SHIFT) & (self.mean_z.abs() > Z_CUTOFF))
                | ((self.log_sigma_step.abs() > LOG_SIGMA_SHIFT)
                   & (self.log_sigma_z.abs() > Z_CUTOFF)))

    def summary(self) -> dict[str, float]:
        """The fraction of coordinates that have not converged and the steps' 90 % quantiles."""
        def q90(t: Tensor) -> float:
            t = t.abs().double()
            return float(t.quantile(0.9)) if 1 < t.numel() <= 2**24 else float(t.max())

        return {"unconverged": float(self.unconverged.double().mean()),
                "mean_step_q90": q90(self.mean_step),
                "log_sigma_step_q90": q90(self.log_sigma_step)}


@torch.no_grad()
def stationarity(problem: Any, approximation: Any, data: Any = None, draws: int = 16,
                 seed: int = 0) -> Stationarity:
    """The ELBO's Newton steps at a diagonal-Gaussian ``approximation`` (module docstring)
    from ``draws`` fresh draws (antithetic pairs); a network's score is the full-data one
    over ``data`` = (x, y), in one batch."""
    mean, std = approximation.params.mu, approximation.params.rho
    gen = torch.Generator(device=device_of(mean)).manual_seed(seed)
    half = randn_like(mean, gen, max(1, draws // 2))
    eps = tree_map(lambda e: torch.cat([e, -e]), half)
    sigma = tree_map(torch.exp, std)
    thetas = tree_map(lambda m, s, e: m + s * e, mean, sigma, eps)
    if isinstance(problem, Target):
        scores = problem.value_and_score(thetas, None)[1]
    else:
        scores = stack([problem.value_and_score(tree_map(lambda t, k=k: t[k], thetas),
                                                data)[1] for k in range(num_draws(thetas))])

    def flat(tree: Any) -> Tensor:
        return torch.cat([t.detach().reshape(t.shape[0], -1) for t in tree_leaves(tree)],
                         dim=1).double()

    s, e, sd = flat(scores), flat(eps), flat(tree_map(lambda x: x[None], sigma))
    g_mu, g_rho = s * sd, s * sd * e
    n = g_mu.shape[0]

    def z(g: Tensor, offset: float = 0.0) -> Tensor:
        return (g.mean(0) + offset) / (g.std(0) / n ** 0.5).clamp_min(1e-300)

    return Stationarity(mean_step=g_mu.mean(0), log_sigma_step=(g_rho.mean(0) + 1) / 2,
                        mean_z=z(g_mu), log_sigma_z=z(g_rho, 1.0))


def convergence_message(algorithm: Algorithm, state: Any, total: int) -> str | None:
    """Why the final q of a run on a Target is not at the ELBO's stationary point, with the
    fix; ``None`` when it is (or q is not a diagonal Gaussian)."""
    q = algorithm.approximation(state) if isinstance(algorithm, Variational) else None
    if not isinstance(q, DiagGaussian):
        return None
    check = stationarity(algorithm.problem, q, draws=TARGET_DRAWS)
    count = int(check.unconverged.sum())
    if count == 0:
        return None
    knob, value = step_size(algorithm)
    fix = (f"run more steps (now {total}); with a constant schedule, a smaller {knob}"
           + (f" (now {_describe(value)})" if value is not None else ""))
    return (
        f"{algorithm.name}: the run has not converged: at the final q, {count} of "
        f"{len(check.unconverged)} coordinates still have an ELBO gradient that asks for a "
        f"significant step of more than {MEAN_SHIFT:g} σ in the mean (up to "
        f"{float(check.mean_step.abs().max()):.3g}) or {LOG_SIGMA_SHIFT:g} in log σ (up to "
        f"{float(check.log_sigma_step.abs().max()):.3g}). Fix: {fix}"
    )


def warn_if_unfinished(algorithm: Algorithm, state: Any, *, warm_start: bool,
                       total: int = 0) -> None:
    """Issue the warnings of the module docstring for the final ``state`` of a VI run (the
    stationarity check on a Target only)."""
    message = None if warm_start else sigma_message(algorithm, state)
    if message is not None:
        warnings.warn(message, PointEstimateWarning, stacklevel=4)
    if isinstance(algorithm.problem, Target):
        message = convergence_message(algorithm, state, total)
        if message is not None:
            warnings.warn(message, NotConvergedWarning, stacklevel=4)


__all__ = ["LOG_SIGMA_SHIFT", "MEAN_SHIFT", "SIGMA_FACTOR", "Stationarity", "TARGET_DRAWS",
           "Z_CUTOFF", "convergence_message", "marginals", "sigma_message", "stationarity",
           "step_size", "warn_if_unfinished"]
