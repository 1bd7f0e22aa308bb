"""The L2E update: constants, the kinetic energies and one step (Kim et al., ICML 2024).

The features and the MLP over them, by chunks of the flat vector, are
:mod:`bdlkit.l2e.features` (re-exported here).

Pure tensor functions on *lists of parameter leaves*, shared by the sampler
(:mod:`bdlkit.algorithms.sgmcmc.l2e`) and the meta-training (:mod:`bdlkit.l2e.meta_train`, which
runs them under ``torch.func.vmap`` over a population of meta-parameters). Written here,
from ``docs/l2e.md`` (the code form), because no library implements L2E in PyTorch.

Per step, with g the minibatch gradient of the per-datum loss (``bdlkit.algorithms.sgmcmc.common.loss_gradient``):

1. rolling means ``m_b ← b·m_b + (1−b)·g`` for b ∈ {0.1, 0.5, 0.9, 0.99, 0.999, 0.9999}
   (start at 0, no bias correction, updated before the features);
2. features per scalar parameter, in this order: ``[g, θ, r, m_0.1, …, m_0.9999]``, each
   divided by ``sqrt(mean(x²) + 1e-5)`` over its own tensor (per leaf, per feature);
3. one MLP 9 → 32 → 32 → 2 (ReLU) applied to every scalar: ``α = exp_mult·out₀``,
   ``β = precond_mult·out₁``;
4. ``r ← r − ε·(grad_scale·g + α(θ, r) + C·β(θ, r)) + sqrt(v)·ξ`` with
   v = 2·C·noise_mult (``noise_mode="code"``) or 2·C·ε (``"paper"``), times the problem's
   temperature T;
5. the features again with the new r (same g, θ, m), β' = precond_mult·out₁, and
   ``θ ← θ + ε·β'``.

With α = 0 and β(θ, r) = r (:class:`IdentityKinetic`), ``"paper"`` noise and
grad_scale = N this is SGHMC with lr = ε²·N and friction ε·C (``docs/sgmcmc.md``).

Two kinetic forms (``Constants.kinetic_form``, ``docs/l2e.md``, What the form guarantees):

* ``"free"`` (the paper's and the released code's): α and β are the MLP's two free
  outputs. Nothing makes β a gradient of a kinetic energy in r: the features are normalised,
  so β is of order ``precond_mult`` whatever the size of r, and a learned β that ignores r
  turns the sampler into an optimiser (the injected noise lives in r only).
* ``"momentum"`` (:class:`MomentumKinetic`): β = s ⊙ r with s = precond_mult·softplus(out₁)/ln 2
  > 0 computed from the two slowest rolling means only (every other feature column zeroed,
  r's among them), α = 0. That is K(θ, r) = ½·Σ s_i r_i², a learned diagonal mass; with s
  constant, paper noise and grad_scale = N the update is preconditioned SGHMC, whose
  stationary law is the posterior (up to the step size). s varies slowly with the rolling
  means and the ∇_θ K term is dropped, as pSGLD drops its Γ term: a bias of the order of
  the variation of s, not a collapse.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import asdict, dataclass, field
from typing import ClassVar, Protocol

import torch
from torch import Tensor
from torch.nn import functional as F

from bdlkit.core.value_range import nonnegative_problem, positive_problem
from bdlkit.l2e.features import (
    CHUNK,
    DECAYS,
    FEATURES,
    HIDDEN,
    NORM_EPS,
    NUM_FEATURES,
    FlatInputs,
    Leaves,
    MetaParams,
    chunked_mlp,
    concat_leaves,
    feature_scales,
    features,
    leaf_features,
    mlp,
    momentum_scales,
    split_like,
    update_moments,
)
from bdlkit.models.cnn import haiku_truncated_normal_

NOISE_MODES = ("code", "paper")
KINETIC_FORMS = ("free", "momentum")
#: ``grad_scale`` value that means "the problem's N" (resolved by :meth:`Constants.for_data`)
NUM_DATA = "num_data"
META_KEYS = ("w0", "b0", "w1", "b1", "w2", "b2")

@dataclass(frozen=True)
class Constants:
    """The fixed constants of the update (defaults: the released meta-training config,
    ``docs/l2e.md``, Constants). ``grad_scale`` multiplies g in the momentum update (the code's
    hard-coded N = 50 000; ``"num_data"``: the problem's own N, which with paper noise puts the
    SGHMC limit at temperature 1) and ``eps`` is the step ε = sqrt(step_mult/50 000),
    step_mult 0.5; ``docs/l2e.md`` (Implementation notes) keeps them separate. ``friction``
    is C; ``kinetic_form`` is ``"free"`` or ``"momentum"`` (module docstring)."""

    eps: float = math.sqrt(0.5 / 50_000)
    grad_scale: float | str = 50_000.0
    friction: float = 0.1
    exp_mult: float = 1e-3
    precond_mult: float = 1e-3
    noise_mode: str = "code"
    noise_mult: float = 1e-3
    kinetic_form: str = "free"
    #: constants that files written before them lack (they meant the default)
    ADDED_LATER: ClassVar[tuple[str, ...]] = ("kinetic_form",)

    def __post_init__(self) -> None:
        names = ("eps", "exp_mult", "precond_mult")
        if self.grad_scale != NUM_DATA:
            names += ("grad_scale",)
        for name in names:
            problem = positive_problem(getattr(self, name))
            if problem:
                raise ValueError(f"L2E {name} {problem}")
        for name, label in (("friction", "friction C"), ("noise_mult", "noise_mult")):
            problem = nonnegative_problem(getattr(self, name))
            if problem:
                raise ValueError(f"L2E {label} {problem}")
        if self.noise_mode not in NOISE_MODES:
            raise ValueError(f"L2E noise_mode must be one of {NOISE_MODES}, "
                             f"got {self.noise_mode!r}")
        if self.kinetic_form not in KINETIC_FORMS:
            raise ValueError(f"L2E kinetic_form must be one of {KINETIC_FORMS}, "
                             f"got {self.kinetic_form!r}")

    def for_data(self, num_data: int) -> Constants:
        """These constants with ``grad_scale = "num_data"`` resolved to ``num_data``."""
        if self.grad_scale != NUM_DATA:
            return self
        return dataclasses.replace(self, grad_scale=float(num_data))

    def noise_variance(self, temperature: float = 1.0) -> float:
        """Per-coordinate variance of the momentum noise: 2·C·noise_mult ("code") or
        2·C·ε ("paper"), times the problem's temperature."""
        scale = self.noise_mult if self.noise_mode == "code" else self.eps
        return 2.0 * self.friction * scale * float(temperature)

    def to_dict(self) -> dict[str, float | str]:
        return asdict(self)  # every field (files and digests: core.meta_files.constants_dict)


# --------------------------------------------------------------------------- the network
def init_meta_params(generator: torch.Generator, hidden: int = HIDDEN,
                     dtype: torch.dtype = torch.float32) -> MetaParams:
    """Haiku's default init (``docs/l2e.md``, Code form): weights ~ N(0, s²) truncated at
    ±2s with s = 1/sqrt(fan_in), no variance correction; biases 0. Layout (in, out), as
    Haiku."""
    sizes = [NUM_FEATURES, hidden, hidden, 2]
    meta: MetaParams = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = haiku_truncated_normal_(torch.empty(fan_in, fan_out, dtype=dtype), fan_in, generator)
        meta[f"w{i}"], meta[f"b{i}"] = w, torch.zeros(fan_out, dtype=dtype)
    return meta


def check_meta_params(meta: MetaParams) -> None:
    """A clear error for meta-parameters of the wrong layout (e.g. a corrupt file)."""
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise ValueError(f"L2E meta-parameters lack {missing}; expected keys {META_KEYS}")
    hidden = meta["w0"].shape[-1]
    want = {"w0": (NUM_FEATURES, hidden), "b0": (hidden,), "w1": (hidden, hidden),
            "b1": (hidden,), "w2": (hidden, 2), "b2": (2,)}
    for k, shape in want.items():
        if tuple(meta[k].shape) != shape:
            raise ValueError(f"L2E meta-parameter {k} has shape {tuple(meta[k].shape)}, "
                             f"expected {shape} (MLP 9 -> {hidden} -> {hidden} -> 2)")
        if not torch.isfinite(meta[k]).all():
            raise ValueError(f"L2E meta-parameter {k} is not finite")


def num_meta_params(meta: MetaParams) -> int:
    return sum(v.numel() for v in meta.values())


# --------------------------------------------------------------------------- kinetic energy
class Kinetic(Protocol):
    """(α, β): the learned gradients of the kinetic energy w.r.t. θ and r, on one flat
    vector (``flat``) or per leaf (``__call__``)."""

    #: whether ``flat`` reads the normalised features (else its ``scales`` are None)
    uses_features: ClassVar[bool]

    def flat(self, x: FlatInputs, scales: Tensor | None) -> tuple[Tensor, Tensor]: ...

    def __call__(self, grad: Leaves, params: Leaves, momentum: Leaves,
                 moments: Leaves) -> tuple[Leaves, Leaves]: ...


class _OnLeaves:
    """``__call__`` on lists of leaves: :meth:`flat` on their concatenation, split back."""

    uses_features: ClassVar[bool] = True

    def flat(self, x: FlatInputs, scales: Tensor | None) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def __call__(self, grad: Leaves, params: Leaves, momentum: Leaves,
                 moments: Leaves) -> tuple[Leaves, Leaves]:
        x = FlatInputs.of(grad, params, momentum, moments)
        alpha, beta = self.flat(x, feature_scales(x) if self.uses_features else None)
        return split_like(alpha, params), split_like(beta, params)


@dataclass(frozen=True)
class LearnedKinetic(_OnLeaves):
    """L2E's kinetic energy: the MLP on normalised features, scaled by the multipliers."""

    meta: MetaParams
    exp_mult: float = 1e-3
    precond_mult: float = 1e-3
    _moved: dict = field(default_factory=dict, compare=False, repr=False)

    def on(self, like: Tensor) -> MetaParams:
        """The meta-parameters in ``like``'s dtype and device, converted once and cached
        (no host-to-device copy every step)."""
        key = (like.dtype, like.device)
        if key not in self._moved:
            self._moved[key] = {k: v.to(like) for k, v in self.meta.items()}
        return self._moved[key]

    def flat(self, x: FlatInputs, scales: Tensor | None) -> tuple[Tensor, Tensor]:
        out = chunked_mlp(self.on(x.grad), x, scales)
        return self.exp_mult * out[:, 0], self.precond_mult * out[:, 1]


#: The only features the mass s of the "momentum" form sees, rolling means slower than the
#: oscillations of the chain. A mass that follows θ, r or g within an oscillation pumps
#: energy into it (parametric resonance, dH/dt = ½·r²·ds/dt without the ∇_θ K force). On a
#: 2-D Gaussian the chain's energy grew without bound with all features.
SLOW_FEATURES: tuple[str, ...] = ("m_0.999", "m_0.9999")


@functools.lru_cache(maxsize=16)
def _slow_mask(dtype: torch.dtype, device: torch.device) -> Tensor:
    return torch.tensor([f in SLOW_FEATURES for f in FEATURES], dtype=dtype, device=device)


@dataclass(frozen=True)
class MomentumKinetic(LearnedKinetic):
    """The constrained form: α = 0, β = s ⊙ r with s = precond_mult·softplus(out₁)/ln 2 from
    the slow features only (so s does not depend on r and β = ∇_r ½·Σ s r²)."""

    def flat_scale(self, x: FlatInputs, scales: Tensor) -> Tensor:
        """s > 0 per coordinate (1 for out₁ = 0, precond_mult = 1), from the slow features
        only (:data:`SLOW_FEATURES`; the others, r's among them, get a scale of 0)."""
        masked = scales * _slow_mask(scales.dtype, scales.device)
        out = chunked_mlp(self.on(x.grad), x, masked)
        return self.precond_mult / math.log(2.0) * F.softplus(out[:, 1])

    def scale(self, grad: Leaves, params: Leaves, moments: Leaves) -> Leaves:
        """:meth:`flat_scale` per leaf."""
        # any tensor can fill the r column: the mask zeroes it with every fast feature
        x = FlatInputs.of(grad, params, params, moments)
        return split_like(self.flat_scale(x, feature_scales(x)), params)

    def flat(self, x: FlatInputs, scales: Tensor | None) -> tuple[Tensor, Tensor]:
        return torch.zeros_like(x.params), self.flat_scale(x, scales) * x.momentum


def learned_kinetic(meta: MetaParams, constants: Constants) -> LearnedKinetic:
    """The kinetic energy of ``constants.kinetic_form`` with these meta-parameters."""
    cls = MomentumKinetic if constants.kinetic_form == "momentum" else LearnedKinetic
    return cls(meta, constants.exp_mult, constants.precond_mult)


class IdentityKinetic(_OnLeaves):
    """α = 0, β(θ, r) = r: the standard kinetic energy ½·rᵀr, which makes the update SGHMC."""

    uses_features: ClassVar[bool] = False

    def flat(self, x: FlatInputs, scales: Tensor | None) -> tuple[Tensor, Tensor]:
        return torch.zeros_like(x.params), x.momentum


# --------------------------------------------------------------------------- one step
def flat_update(kinetic: Kinetic, constants: Constants, params: Tensor, momentum: Tensor,
                moments: Tensor, grad: Tensor, noise: Tensor, sizes: tuple[int, ...],
                temperature: float = 1.0) -> tuple[Tensor, Tensor, Tensor]:
    """One L2E step (module docstring, items 1-5) on flat vectors: θ, r, g and ξ ~ N(0, I)
    of shape (d,), the rolling means (6, d), the parameter tensors' ``sizes`` (each
    normalised on its own). ``constants.grad_scale`` must be a number
    (:meth:`Constants.for_data`). The MLP runs by chunks (:func:`chunked_mlp`).
    Returns (θ_{t+1}, r_{t+1}, moments_{t+1})."""
    c = constants
    moments = update_moments([moments], [grad])[0]
    sd = math.sqrt(c.noise_variance(temperature))
    x = FlatInputs(grad, params, momentum, moments, sizes)
    scales = feature_scales(x) if kinetic.uses_features else None
    if isinstance(kinetic, MomentumKinetic):  # s does not depend on r: one MLP pass
        s = kinetic.flat_scale(x, scales)
        momentum = momentum - c.eps * (c.grad_scale * grad + c.friction * s * momentum) \
            + sd * noise
        beta_new = s * momentum
    else:
        alpha, beta = kinetic.flat(x, scales)
        momentum = momentum - c.eps * (c.grad_scale * grad + alpha + c.friction * beta) \
            + sd * noise
        x = x._replace(momentum=momentum)
        _, beta_new = kinetic.flat(x, None if scales is None else momentum_scales(x, scales))
    return params + c.eps * beta_new, momentum, moments


def l2e_update(kinetic: Kinetic, constants: Constants, params: Leaves, momentum: Leaves,
               moments: Leaves, grad: Leaves, noise: Leaves, temperature: float = 1.0
               ) -> tuple[Leaves, Leaves, Leaves]:
    """:func:`flat_update` on lists of leaves (each moment leaf ``(6, *shape)``): on their
    concatenation, split back. Returns (θ_{t+1}, r_{t+1}, moments_{t+1}) as leaves."""
    x = FlatInputs.of(grad, params, momentum, moments)
    theta, r, m = flat_update(kinetic, constants, x.params, x.momentum, x.moments, x.grad,
                              concat_leaves(noise), x.sizes, temperature)
    return (split_like(theta, params), split_like(r, params),
            [c.reshape(t.shape) for c, t in zip(m.split(x.sizes, dim=-1), moments)])


__all__ = ["CHUNK", "DECAYS", "FEATURES", "KINETIC_FORMS", "NORM_EPS", "NUM_DATA", "Constants",
           "FlatInputs", "IdentityKinetic", "Kinetic", "LearnedKinetic", "MetaParams",
           "MomentumKinetic", "check_meta_params", "chunked_mlp", "feature_scales", "features",
           "flat_update", "init_meta_params", "l2e_update", "learned_kinetic", "leaf_features",
           "mlp", "momentum_scales", "num_meta_params", "update_moments"]
