"""Plumbing shared by the closed-form Gaussian VI updates (GSM, BaM).

GSM and BaM have no learning-rate optimiser: each step draws a batch θ_1..θ_B ~ q_t,
evaluates the scores g_b = ∇log π(θ_b) and maps (q_t, θ, g) to q_{t+1} in closed form.
The map can fail numerically (a covariance that is not positive definite, a NaN or inf;
at high dimension these are the failure modes the SSM-prox paper reports). A failed
update is **rejected**: the state keeps q_t, counts the rejection, and the step reports
``info["accepted"] = 0`` instead of raising, as GSM's reference code rejects a
non-positive-definite update. :meth:`GaussianProjectionVI.status` turns a state into ``"ok"`` or
``"numerical_failure"`` (``patience`` rejections in a row: the method is stuck), which is
what the benchmarks record.

The state holds λ (a :class:`DiagGaussianParams` for the diagonal variants, which work
on any pytree of parameters, or a :class:`FullGaussianParams` on a Target's flat vector),
the noise generator state, the step and the rejection counters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from bdlkit.algorithms.options import choices_of
from bdlkit.algorithms.vi.common import entropy as diag_entropy
from bdlkit.algorithms.vi.common import minibatch_scores
from bdlkit.core import rng
from bdlkit.core.protocol import Batch, Info, Problem, Variational
from bdlkit.core.tree import (
    TensorTree,
    detach_clone,
    device_of,
    pytree_dataclass,
    tree_flatten_with_path,
    tree_leaves,
    tree_unflatten,
)
from bdlkit.families import diag_gaussian, full_gaussian
from bdlkit.families.diag_gaussian import DiagGaussian, DiagGaussianParams
from bdlkit.families.full_gaussian import FullGaussian, FullGaussianParams
from bdlkit.problems import Target

OK, NUMERICAL_FAILURE = "ok", "numerical_failure"
DEFAULT_PATIENCE = 50


@pytree_dataclass
class ProjectionState:
    """q_t, the generator state, the step, all rejected updates and the current streak."""

    lam: Any  # DiagGaussianParams | FullGaussianParams
    rng_state: Tensor
    step: int
    rejected: int
    streak: int


class GaussianProjectionVI(Variational):
    """What GSM and BaM answer the same way (state is a :class:`ProjectionState`)."""

    patience: int = DEFAULT_PATIENCE
    problem: Problem
    num_samples: int
    covariance: str
    init_std: float

    def init(
        self, params: TensorTree | DiagGaussianParams | FullGaussianParams | None = None, *,
        generator: torch.Generator,
    ) -> ProjectionState:
        """q₀ centred at ``params`` (default ``problem.init_params``) with σ = ``init_std``,
        or a copy of ``params`` when it already is a λ of the right family (warm start)."""
        lam = init_lam(self.problem, self.covariance, self.init_std, params, generator)
        return initial_state(lam, generator)

    def draw(self, state: ProjectionState, batch: Batch
             ) -> tuple[torch.Generator, TensorTree, Tensor, TensorTree]:
        """The step's generator, ``num_samples`` draws from q_t, their mean log density and
        their (minibatch) scores."""
        lam = state.lam
        gen = rng.from_state(state.rng_state, device=device_of(lam))
        family = full_gaussian if isinstance(lam, FullGaussianParams) else diag_gaussian
        thetas = family.sample(lam, self.num_samples, gen)
        value, scores = minibatch_scores(self.problem, thetas, batch)
        return gen, thetas, value, scores

    def params(self, state: ProjectionState) -> TensorTree:
        """The variational mean."""
        lam = state.lam
        return lam.mean if isinstance(lam, FullGaussianParams) else lam.mu

    def approximation(self, state: ProjectionState) -> DiagGaussian | FullGaussian:
        lam = state.lam
        return FullGaussian(lam) if isinstance(lam, FullGaussianParams) else DiagGaussian(lam)

    def status(self, state: ProjectionState) -> str:
        """``"numerical_failure"`` after ``patience`` rejected updates in a row, else ``"ok"``."""
        return NUMERICAL_FAILURE if state.streak >= self.patience else OK


def initial_state(lam: DiagGaussianParams | FullGaussianParams,
                  generator: torch.Generator) -> ProjectionState:
    device = tree_leaves(lam)[0].device
    noise = rng.split(generator, device=device)
    return ProjectionState(lam=lam, rng_state=rng.state_of(noise), step=0, rejected=0,
                           streak=0)


def finite(tree: Any) -> bool:
    """True when every leaf of ``tree`` is finite."""
    return all(bool(torch.isfinite(x).all()) for x in tree_leaves(tree))


def accept_or_reject(state: ProjectionState, new_lam: Any | None, generator: torch.Generator,
                     value: Tensor) -> tuple[ProjectionState, Info]:
    """The next state: ``new_lam`` if it is not ``None`` and finite, else q_t kept and the
    rejection counted. ``value`` is the mean log density of the batch (for the log).
    ``info`` is numeric (the run log stores floats): ``accepted`` 1/0 and the total
    ``rejected``."""
    ok = new_lam is not None and finite(new_lam)
    new = ProjectionState(
        lam=new_lam if ok else state.lam,
        rng_state=rng.state_of(generator),
        step=state.step + 1,
        rejected=state.rejected + (0 if ok else 1),
        streak=0 if ok else state.streak + 1,
    )
    entropy = (full_gaussian.entropy(state.lam) if isinstance(state.lam, FullGaussianParams)
               else diag_entropy(state.lam))
    return new, {"log_prob": value, "elbo": value + entropy,  # of q_t, whose draws these are
                 "accepted": 1.0 if ok else 0.0, "rejected": new.rejected}


def leafwise(fn: Callable[..., tuple[Tensor, Tensor]], tree: TensorTree,
             *rest: TensorTree) -> tuple[TensorTree, TensorTree]:
    """``fn`` on matching leaves of ``tree`` and ``rest``; its pairs split into two trees
    shaped like ``tree``."""
    _, leaves, spec = tree_flatten_with_path(tree)
    outs = [fn(*ls) for ls in zip(leaves, *(tree_leaves(t) for t in rest))]
    return tree_unflatten(spec, [o[0] for o in outs]), tree_unflatten(spec, [o[1] for o in outs])


def diag_from_var(mean: TensorTree, var: TensorTree) -> DiagGaussianParams | None:
    """λ = (μ, ½ log σ²), or ``None`` unless every variance is finite and positive (and every
    mean finite)."""
    ok = all(bool((v > 0).all() and torch.isfinite(v).all()) for v in tree_leaves(var))
    if not ok or not all(bool(torch.isfinite(m).all()) for m in tree_leaves(mean)):
        return None
    _, leaves, spec = tree_flatten_with_path(var)
    return DiagGaussianParams(mu=mean, rho=tree_unflatten(spec, [0.5 * v.log() for v in leaves]))


def init_lam(problem: Problem, covariance: str, init_std: float,
             params: TensorTree | DiagGaussianParams | FullGaussianParams | None,
             generator: torch.Generator) -> DiagGaussianParams | FullGaussianParams:
    """λ₀ centred at ``params`` (default ``problem.init_params``) with σ = ``init_std``, or
    ``params`` itself (a copy) when it already is a λ of the right family (warm start)."""
    family = FullGaussianParams if covariance in ("full", "lowrank") else DiagGaussianParams
    if isinstance(params, (DiagGaussianParams, FullGaussianParams)):
        if not isinstance(params, family):
            raise ValueError(f"covariance={covariance!r} needs a {family.__name__} to warm "
                             f"start from, got a {type(params).__name__}")
        return detach_clone(params)
    if params is None:
        params = problem.init_params(generator)
    if isinstance(problem, Target):
        params = torch.as_tensor(params, dtype=problem.dtype)
        if params.shape != (problem.dim,):
            raise ValueError(
                f"VI on a Target fits one approximation: the starting point must have shape "
                f"({problem.dim},), got {tuple(params.shape)} (chains= is for samplers)"
            )
    if family is FullGaussianParams:
        return full_gaussian.init(params, init_std)
    return diag_gaussian.init(params, init_std)


def field_choices(alg: Any, name: str) -> tuple[Any, ...] | None:
    """The values of the ``Literal`` in the annotation of the dataclass field ``name``."""
    return choices_of(alg.__dataclass_fields__[name].type)


#: ``init_std=None`` on a network: σ₀ of ADVI's default (``docs/vi.md``). GSM and BaM
#: were designed for Targets of unit scale (σ₀ = 1); a σ₀ of 1 on every weight of a
#: network gives draws whose predictions are noise (the defaults study,
#: ``bdlkit bench defaults``: RMSE above the mean predictor on UCI).
NETWORK_INIT_STD = 1e-2


def network_defaults(alg: Any) -> None:
    """Fill ``covariance=None`` and ``init_std=None`` by the problem: the full covariance
    and σ₀ = 1 on a :class:`~bdlkit.Target`, the diagonal family and σ₀ =
    :data:`NETWORK_INIT_STD` on a network (a d × d covariance needs one flat vector)."""
    target = isinstance(alg.problem, Target)
    if alg.covariance is None:
        object.__setattr__(alg, "covariance", "full" if target else "diag")
    if alg.init_std is None:
        object.__setattr__(alg, "init_std", 1.0 if target else NETWORK_INIT_STD)


def setup(alg: Any) -> None:
    """``__post_init__`` of GSM and BaM: fill the problem-dependent defaults
    (:func:`network_defaults`), check the options they share (:func:`check_hyper`, the
    covariances being those of the field's ``Literal``) and coerce them."""
    network_defaults(alg)
    check_hyper(alg.problem, alg.num_samples, alg.covariance, field_choices(alg, "covariance"),
                alg.init_std, alg.patience)
    for name, kind in (("num_samples", int), ("init_std", float), ("patience", int)):
        object.__setattr__(alg, name, kind(getattr(alg, name)))


def check_hyper(problem: Problem, num_samples: int, covariance: str, choices: tuple[str, ...],
                init_std: float, patience: int) -> None:
    """Validate what GSM and BaM share; the full-covariance family needs a Target."""
    if isinstance(num_samples, bool) or int(num_samples) != num_samples or num_samples < 1:
        raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")
    if covariance not in choices:
        raise ValueError(f"covariance must be one of {choices}, got {covariance!r}")
    if not init_std > 0 or not math.isfinite(init_std):
        raise ValueError(f"init_std must be a finite number > 0, got {init_std!r}")
    if isinstance(patience, bool) or int(patience) != patience or patience < 1:
        raise ValueError(f"patience must be an integer >= 1, got {patience!r}")
    if covariance != "diag" and not isinstance(problem, Target):
        raise ValueError(
            f"covariance={covariance!r} needs a Target (one flat parameter vector, d × d "
            f"covariance); for a {type(problem).__name__} use covariance='diag'"
        )


__all__ = [
    "DEFAULT_PATIENCE", "NUMERICAL_FAILURE", "OK", "GaussianProjectionVI",
    "ProjectionState", "accept_or_reject", "check_hyper", "diag_from_var", "field_choices",
    "finite", "init_lam", "initial_state", "leafwise", "network_defaults", "setup",
]
