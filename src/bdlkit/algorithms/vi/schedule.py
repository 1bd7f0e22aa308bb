"""How a stochastic VI method's last iterates settle: a cosine step size, and tail averaging.

With a constant step the last iterate of a stochastic VI method keeps jittering around the
optimum: on a 10-D Gaussian Target (sds 0.01 to 10) 20 000 constant-lr ADVI steps from the
exact Laplace start ended with a mean 0.12 sd off and a std 11 % off. Two defaults fix the
class::

    rate(t)  = resolve(lr, t) · ½ (1 + cos(π min(t, T)/T))     (schedule="cosine")
    λ̄        = mean of λ_t over the last ``average``·T steps     (Polyak–Ruppert)

The cosine (IVON's default, Shen et al. 2024) lets the iterate settle as the step decays
to zero; it alone still leaves a floor: the noise freezes once the remaining steps are
fewer than the relaxation time 1/rate, at a variance of about rate/2 (measured on that
Gaussian, worst of 10 coordinates over 3 seeds: ADVI 0.025–0.037 sd in the means, IVON
0.040–0.052). Averaging the iterates of the last half divides the variance by the number
of relaxation times it spans, the 1/T rate no step-size schedule beats (ADVI 0.014–0.022,
IVON 0.018–0.022; Dhaka et al., "Robust, Accurate Stochastic Optimization for Variational
Inference", NeurIPS 2020, average the iterates for the same reason). ``average=None`` is
0.5 on a Target and 0 on a network, whose mean still improves in the second half of a
run (there the cosine alone, as IVON, is the default). λ̄ averages the mean and the
precision 1/σ² of the diagonal Gaussian (averaging log σ biased σ up by 2.5 % on a
Gaussian, the closed form's fast curvature average being that noisy); the approximation
of a state is λ̄ once it holds an iterate (the state's :class:`RunningMean` counts them,
so any copy of the method reads it alike).

T (``run_steps``) is the run's length: :func:`bdlkit.infer` and the runner bind it through
:meth:`Annealing.for_run`. A loop of one's own that never binds it (nor passes
``run_steps``) runs at the constant rate without averaging. The factor multiplies a
schedule ``lr`` too. Inside a compiled chunk the step counter is a 0-d tensor
(:mod:`bdlkit.engine.compiled`), and the factor and the averaging weight are computed with
tensor operations, so the chunk holds no Python decision on it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from bdlkit.core.schedules import resolve
from bdlkit.core.tree import all_finite, pytree_dataclass, tree_map
from bdlkit.families.diag_gaussian import DiagGaussian, DiagGaussianParams
from bdlkit.problems import Target

SCHEDULES = ("cosine", "constant")
TARGET_AVERAGE = 0.5  # average=None on a Target: the last half of the run


@pytree_dataclass
class RunningMean:
    """The mean ``lam`` of the ``count`` iterates averaged so far (λ₀ while count is 0);
    ``GAUSSIAN_FIELDS`` lets a change of variables map it with λ."""

    GAUSSIAN_FIELDS: ClassVar[tuple[str, ...]] = ("lam",)

    lam: DiagGaussianParams
    count: Any  # int (a 0-d tensor inside a compiled chunk)


def cosine_factor(step: Any, total: int) -> Any:
    """½(1 + cos(π min(t, T)/T)): 1 at t = 0, 0 at t = T (a float, or a 0-d tensor for a
    tensor ``step``)."""
    if isinstance(step, torch.Tensor):
        return 0.5 * (1.0 + torch.cos(step.clamp(max=total) * (math.pi / total)))
    return 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))


@dataclass(frozen=True)
class Annealing:
    """How a VI method's step size decays and its iterates are averaged (keyword-only;
    module docstring).

    Args:
        schedule: "cosine" (default: the step size decays to 0 over the run as
            ½(1 + cos(π t/T))) or "constant".
        average: the fraction of the run, at its end, whose iterates λ the approximation
            averages, in [0, 1) (default: 0.5 on a Target, 0 on a network).
        run_steps: T, the run's length for the cosine and the averaging (default: bound by
            bdlkit.infer and the runner; a loop of your own that leaves it unset runs at the
            constant rate without averaging).
    """

    schedule: Literal["cosine", "constant"] = field(default="cosine", kw_only=True)
    average: float | None = field(default=None, kw_only=True)
    run_steps: int | None = field(default=None, kw_only=True)

    def check_annealing(self) -> None:
        """Refuse a schedule outside ``SCHEDULES``, a fraction outside [0, 1) or a length
        below 1."""
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        frac = self.average
        if frac is not None and (isinstance(frac, bool) or not isinstance(frac, (int, float))
                                 or not 0 <= frac < 1):
            raise ValueError(f"average must be a fraction of the run in [0, 1) (None: 0.5 on a "
                             f"Target, 0 on a network), got {frac!r}")
        steps = self.run_steps
        if steps is not None and (isinstance(steps, bool) or int(steps) != steps or steps < 1):
            raise ValueError(f"run_steps must be an integer >= 1 (or None: the run's length), "
                             f"got {steps!r}")

    @property
    def average_fraction(self) -> float:
        """``average``, with None resolved by the problem (module docstring)."""
        if self.average is not None:
            return float(self.average)
        return TARGET_AVERAGE if isinstance(self.problem, Target) else 0.0  # type: ignore[attr-defined]

    def factor(self, step: Any) -> Any:
        """The cosine factor at ``step`` (1 for a constant schedule or an unbound run)."""
        if self.schedule == "constant" or self.run_steps is None:
            return 1.0
        return cosine_factor(step, int(self.run_steps))

    def rate(self, step: Any) -> Any:
        """The step size at ``step``: ``lr`` (or its schedule) times the cosine factor."""
        base = resolve(self.lr, step)  # type: ignore[attr-defined]
        factor = self.factor(step)
        return base if isinstance(factor, float) and factor == 1.0 else base * factor

    def average_start(self) -> int | None:
        """The step after which iterates enter the average (None: no averaging)."""
        frac = self.average_fraction
        if self.run_steps is None or frac == 0:
            return None
        return int(round(self.run_steps * (1 - frac)))

    def initial_average(self, lam: DiagGaussianParams) -> RunningMean | None:
        """The state's average at step 0: λ₀ with count 0 when this run averages, else None
        (the state's structure then stays the same for the whole run, as a compiled chunk
        needs)."""
        if self.average_start() is None:
            return None
        return RunningMean(lam=tree_map(lambda x: x.detach().clone(), lam), count=0)

    def averaged(self, average: RunningMean | None, lam: DiagGaussianParams,
                 step: Any) -> RunningMean | None:
        """The running mean of λ after ``step`` completed steps: unchanged before the
        averaging starts, then x̄ + (x − x̄)/k for the k-th averaged iterate (so x̄ = x at
        k = 1), x the mean μ and the precision 1/σ² (the natural parameters: averaging log σ
        instead would bias σ up by about a quarter of the precision's relative variance)."""
        start = self.average_start()
        if average is None or start is None:
            return average
        inside = step > start  # a bool, or a 0-d tensor inside a compiled chunk
        if isinstance(inside, torch.Tensor):
            count = average.count + inside.to(step.dtype)
            weight: Any = inside.to(step.dtype) / count.clamp(min=1)
        else:
            count = average.count + int(inside)
            weight = 1.0 / count if inside else 0.0
        def mean(old: Tensor, new: Tensor) -> Tensor:
            return old + (new - old) * weight

        def log_sigma(old: Tensor, new: Tensor) -> Tensor:  # the mean of the precision e^{−2ρ}
            return mean((-2 * old).exp(), (-2 * new).exp()).log() * -0.5

        return RunningMean(lam=DiagGaussianParams(mu=tree_map(mean, average.lam.mu, lam.mu),
                                                  rho=tree_map(log_sigma, average.lam.rho,
                                                               lam.rho)),
                           count=count)

    @staticmethod
    def settled(average: RunningMean | None, lam: DiagGaussianParams) -> DiagGaussianParams:
        """q's λ: the average once it holds an iterate, else λ itself (chosen by tensor
        operations when the count is a tensor, inside a compiled chunk)."""
        if average is None:
            return lam
        if isinstance(average.count, torch.Tensor):
            some = average.count > 0
            return tree_map(lambda a, x: torch.where(some, a, x), average.lam, lam)
        return average.lam if average.count > 0 else lam

    def advance_average(self, state: Any) -> Any:
        """``state`` (with ``lam``, ``average`` and ``step``) with its average advanced."""
        return dataclasses.replace(state, average=self.averaged(state.average, state.lam,
                                                                state.step))

    # the diagonal Gaussian's answers, read from the average once it holds iterates
    def approximation(self, state: Any) -> DiagGaussian:
        return DiagGaussian(self.settled(state.average, state.lam))

    def params(self, state: Any) -> Any:
        """The variational mean μ (of the average once it holds iterates)."""
        return self.settled(state.average, state.lam).mu

    def is_finite(self, state: Any) -> bool:
        return all_finite((state.lam, None if state.average is None else state.average.lam))

    def for_run(self, total_steps: int) -> Any:
        """This method with the run's length bound (the cosine and the averaging)."""
        if self.run_steps is not None:
            return self
        return dataclasses.replace(self, run_steps=int(total_steps))


__all__ = ["SCHEDULES", "TARGET_AVERAGE", "Annealing", "RunningMean", "cosine_factor"]
