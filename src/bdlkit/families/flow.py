"""A normalizing-flow family on R^d: a neural spline flow behind an affine output.

    θ = loc + exp(log_scale) ⊙ f⁻¹(z),   z ~ N(0, I)
    log q(θ) = log p_f(x) − Σ_i log_scale_i,   x = (θ − loc) / exp(log_scale)
    score:     ∇_θ log q(θ), by autograd through the flow only

With ``flowed = m < d`` the spline flow f acts on the first m coordinates only and the
other d − m are the identity: q is a flow on θ[:m] times a diagonal Gaussian on θ[m:]
(a flow on a network's last layer, a diagonal Gaussian on the rest; the network's
parameters are put in that order by :class:`bdlkit.families.layout.Layout`).

f is zuko's neural spline flow (Durkan et al. 2019: monotone rational-quadratic splines)
with coupling masks, so sampling and density are both one pass. Up to ``block`` (64)
flowed values it is one ``zuko.flows.NSF`` (a MAF with ``passes=2``) on all of them;
beyond, the values are cut into blocks of at most 64 and f is block-diagonal: the same
spline couplings for every block, conditioned on a learned embedding of the block, so
that its cost, parameters and memory grow linearly with m
(:mod:`bdlkit.families.flow_modules`; a single NSF's masks grow with m²). Every
hypernetwork's output layer starts at zero, which makes f the identity: q₀ is exactly
N(loc, diag exp(2 log_scale)), the diagonal Gaussian start of the other VI methods
(``init(point, init_std)``), and the flow grows from there.

For a flow block times a Gaussian block, :meth:`FlowFamily.head` draws the flowed
coordinates and their log q in one pass (block flows) and :meth:`FlowFamily.head_score`
differentiates the flowed factor only, so a step's autograd work is the flowed block's
(``bdlkit.algorithms.vi.flow_vi`` takes the Gaussian block's gradients in closed form).

The parameters λ are a flat ``dict[str, Tensor]`` (``"loc"``, ``"log_scale"`` and
``"flow.<name>"``, a block flow's embeddings ``"flow.embedding"``), a pytree like every
other VI state, so optimisers over pytrees,
checkpoints and resume work unchanged. Base noise comes from the caller's generator
(zuko's own ``sample`` would use torch's global one), so draws are a pure function of
the generator state. zuko is an optional dependency (``bdlkit[flows]``); this module
only wraps it to evaluate the flow at given parameters (``torch.func.functional_call``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bdlkit.families import flow_modules
from bdlkit.families.flow_modules import (
    BLOCK,
    stable_spline,  # noqa: F401 (its name before)
    zuko_module,
)
from bdlkit.families.layout import Layout

FlowParams = dict[str, Tensor]
PREFIX = "flow."
MOMENT_DRAWS = 4096  # draws behind FlowApproximation.mean/std (fixed seed)
MOMENT_CHUNK = 256  # drawn at a time, at most
MOMENT_VALUES = 2**20  # values drawn at a time, at most (a chunk of 256 up to 4096 flowed)


class _FlowOps(nn.Module):
    """Everything evaluated inside one ``functional_call``: zuko builds its transforms
    lazily, so a density or an inverse must run while the given parameters are bound."""

    def __init__(self, flow: nn.Module) -> None:
        super().__init__()
        self.flow = flow

    def forward(self, op: str, tensor: Tensor) -> Any:
        dist = self.flow()
        if op == "log_prob":
            return dist.log_prob(tensor)
        if op == "inverse":
            return dist.transform.inv(tensor)
        # "inverse_ladj", block flows: f⁻¹(z) and log |det ∂f⁻¹/∂z| in one pass per coupling
        x, ladj = tensor, 0
        for coupling in reversed(dist.transform.transforms):
            x, step = flow_modules.coupling_inverse_and_ladj(coupling, x)
            ladj = ladj + step
        return x, ladj


@dataclass(frozen=True)
class FlowFamily:
    """Neural spline flows on R^``features`` (module docstring).

    Args:
        features: the dimension d of θ (>= 1).
        transforms: spline coupling layers (>= 1).
        bins: spline bins per coordinate (>= 2).
        hidden: width of the two hidden layers of each layer's hypernetwork (>= 1).
        dtype: the parameters' and draws' dtype.
        device: where the parameters, draws and the flow's buffers live.
        flowed: the leading coordinates the spline flow acts on (default: all); the rest
            are a diagonal Gaussian.
        block: the most flowed values one flow acts on (>= 2): more are cut into blocks,
            each its own flow (block-diagonal; :mod:`bdlkit.families.flow_modules`).
    """

    features: int
    transforms: int = 3
    bins: int = 8
    hidden: int = 32
    dtype: torch.dtype = torch.float32
    device: str | torch.device = "cpu"
    flowed: int | None = None
    block: int = BLOCK
    _ops: _FlowOps = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, low in (("features", 1), ("transforms", 1), ("bins", 2), ("hidden", 1),
                          ("block", 2)):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < low:
                raise ValueError(f"flow {name} must be an integer >= {low}, got {value!r}")
        if self.flowed is None:
            object.__setattr__(self, "flowed", int(self.features))
        if not 1 <= self.flowed <= self.features:
            raise ValueError(f"the flow acts on 1 to {self.features} coordinates, got "
                             f"flowed={self.flowed}")
        # zuko initialises the modules from the CPU RNG; their values are never used (init()
        # draws λ), so the RNG is forked and left as it was
        with torch.random.fork_rng(devices=[]):
            flow = flow_modules.build(int(self.flowed), self.block, self.transforms,
                                      self.bins, self.hidden)
        ops = _FlowOps(flow).to(dtype=self.dtype, device=self.device).requires_grad_(False)
        object.__setattr__(self, "_ops", ops)

    @property
    def blocks(self) -> int:
        """How many blocks the flowed values are cut into; 1 is one flow on all of them."""
        return flow_modules.layout(self.flowed, self.block)[0] if self.flowed > self.block \
            else 1

    # ------------------------------------------------------------------ λ
    def init(self, point: Tensor, init_std: float, generator: torch.Generator) -> FlowParams:
        """λ with f the identity: q₀ = N(point, init_std² I); hidden weights drawn from
        ``generator`` (PyTorch's default uniform fan-in scheme), blocks' embeddings too
        (standard normal)."""
        if not init_std > 0:
            raise ValueError(f"init_std must be > 0, got {init_std}")
        if not isinstance(point, Tensor):
            raise ValueError(f"a flow starts at a point (a tensor of {self.features} values), "
                             f"got {type(point).__name__}: pass init= as a tensor")
        point = point.detach().to(dtype=self.dtype, device=self.device).reshape(-1)
        if point.numel() != self.features:
            raise ValueError(f"the flow has {self.features} features but the point has "
                             f"{point.numel()} values")
        params: FlowParams = {"loc": point.clone(),
                              "log_scale": torch.full_like(point, math.log(init_std))}
        for name, p in self._ops.flow.named_parameters():
            if ".hyper." in f".{name}" and _is_output_layer(self._ops.flow, name):
                value = torch.zeros_like(p)  # f = identity at the start
            elif name == "embedding":
                draw = torch.randn(p.shape, generator=generator, dtype=p.dtype,
                                   device=generator.device)
                value = draw.to(p.device)
            elif p.ndim == 2:
                bound = 1.0 / math.sqrt(p.shape[1])
                draw = torch.rand(p.shape, generator=generator, dtype=p.dtype,
                                  device=generator.device)
                value = (draw.to(p.device) * 2 - 1) * bound
            else:
                value = torch.zeros_like(p)
            params[PREFIX + name] = value
        return params

    # ------------------------------------------------------------------ q
    def _call(self, params: FlowParams, op: str, tensor: Tensor) -> Tensor:
        flow = {k: v for k, v in params.items() if k.startswith(PREFIX)}
        return torch.func.functional_call(self._ops, flow, (op, tensor), tie_weights=False)

    def sample(self, params: FlowParams, n: int, generator: torch.Generator) -> Tensor:
        """``n`` draws, ``(n, d)``; differentiable in λ (reparameterised) unless λ is not."""
        loc = params["loc"]
        z = torch.randn((n, self.features), generator=generator, dtype=loc.dtype,
                        device=loc.device)
        return self.sample_from(params, z)

    def sample_from(self, params: FlowParams, z: Tensor) -> Tensor:
        """The draws of base noise ``z`` ``(n, d)``: loc + e^ℓ ⊙ (f⁻¹(z[:, :m]), z[:, m:])."""
        m = self.flowed
        x = self._flowed(self._call(params, "inverse", self._blocked(z[:, :m])))
        if m < self.features:
            x = torch.cat([x, z[:, m:]], dim=-1)
        return params["loc"] + params["log_scale"].exp() * x

    def log_prob(self, params: FlowParams, theta: Tensor) -> Tensor:
        """log q_λ(θ) for θ of shape ``(..., d)``."""
        x = (theta - params["loc"]) / params["log_scale"].exp()
        shape, m = x.shape[:-1], self.flowed
        value = self._call(params, "log_prob", self._blocked(x[..., :m].reshape(-1, m)))
        if self.blocks > 1:  # the padding, held at 0, adds log N(0; 0, 1) each
            value = value.sum(-1) + self._padding * 0.5 * math.log(2 * math.pi)
        value = value.reshape(shape)
        if m < self.features:  # the diagonal Gaussian coordinates: N(0, 1) after the affine
            rest = x[..., m:]
            value = value - 0.5 * (rest**2).sum(-1) - 0.5 * rest.shape[-1] * math.log(2 * math.pi)
        return value - params["log_scale"].sum()

    def head(self, params: FlowParams, z: Tensor, log_prob: bool
             ) -> tuple[Tensor, Tensor | None]:
        """The flowed coordinates θ[:m] = loc + e^ℓ ⊙ f⁻¹(z[:, :m]) of base draws ``z``
        ``(n, d)`` and, with ``log_prob``, the flowed factor's log q at them, from the
        same pass for block flows (log N(z) minus the log-determinant of ∂θ/∂z)."""
        m = self.flowed
        loc, scale = params["loc"][:m], params["log_scale"][:m]
        if not log_prob or self.blocks == 1:
            x = self._flowed(self._call(params, "inverse", self._blocked(z[:, :m])))
            theta = loc + scale.exp() * x
            return theta, self.head_log_prob(params, theta) if log_prob else None
        x, ladj = self._call(params, "inverse_ladj", self._blocked(z[:, :m]))
        theta = loc + scale.exp() * self._flowed(x)
        normal = -0.5 * (z[:, :m] ** 2).sum(-1) - 0.5 * m * math.log(2 * math.pi)
        return theta, normal - ladj.sum(-1) - scale.sum()

    def head_log_prob(self, params: FlowParams, theta: Tensor) -> Tensor:
        """log q of the flowed factor at its coordinates ``theta`` ``(n, m)``."""
        m = self.flowed
        scale = params["log_scale"][:m]
        x = self._blocked((theta - params["loc"][:m]) / scale.exp())
        value = self._call(params, "log_prob", x)
        if self.blocks > 1:
            value = value.sum(-1) + self._padding * 0.5 * math.log(2 * math.pi)
        return value - scale.sum()

    def head_score(self, params: FlowParams, theta: Tensor, create_graph: bool = False
                   ) -> Tensor:
        """∇ log q of the flowed factor at ``theta`` ``(n, m)`` (the first m coordinates of
        :meth:`score`, without the Gaussian ones)."""
        return score_of(self.head_log_prob, params, theta, create_graph)

    @property
    def _padding(self) -> int:
        return self.blocks * self._ops.flow.size - self.flowed

    def _blocked(self, x: Tensor) -> Tensor:
        """Flowed values ``(n, m)`` as the flow's input: ``(n, blocks, size)`` with the
        last block padded by zeros, or as they are for one block."""
        if self.blocks == 1:
            return x
        return F.pad(x, (0, self._padding)).unflatten(-1, (self.blocks, -1))

    def _flowed(self, x: Tensor) -> Tensor:
        """The inverse of :meth:`_blocked`."""
        return x if self.blocks == 1 else x.flatten(-2)[..., : self.flowed]

    def score(self, params: FlowParams, theta: Tensor, create_graph: bool = False) -> Tensor:
        """∇_θ log q_λ(θ), by autograd through the flow only (the problem is not called);
        ``create_graph=True`` keeps it differentiable in λ (score-based VI)."""
        return score_of(self.log_prob, params, theta, create_graph)

    def moments(self, params: FlowParams) -> tuple[Tensor, Tensor]:
        """Mean and std of q: exact on the diagonal Gaussian coordinates (loc and e^ℓ), by
        Monte Carlo (4096 draws of a fixed seed, in chunks of at most 256 draws and
        ``MOMENT_VALUES`` values, so memory stays bounded) on the flowed ones."""
        m, loc, scale = self.flowed, params["loc"], params["log_scale"].exp()
        chunk = min(MOMENT_CHUNK, 2 ** max(0, (MOMENT_VALUES // m).bit_length() - 1))
        gen = torch.Generator(device=loc.device).manual_seed(0)
        total = torch.zeros(m, dtype=torch.float64, device=loc.device)
        squares = torch.zeros_like(total)
        with torch.no_grad():
            for _ in range(MOMENT_DRAWS // chunk):
                z = torch.randn((chunk, m), generator=gen, dtype=loc.dtype,
                                device=loc.device)
                x = self._flowed(self._call(params, "inverse", self._blocked(z))).double()
                total += x.sum(0)
                squares += (x**2).sum(0)
        mean = total / MOMENT_DRAWS
        var = ((squares - MOMENT_DRAWS * mean**2) / (MOMENT_DRAWS - 1)).clamp_min(0)
        flowed_mean = loc[:m] + scale[:m] * mean.to(loc.dtype)
        flowed_std = scale[:m] * var.sqrt().to(loc.dtype)
        return torch.cat([flowed_mean, loc[m:]]), torch.cat([flowed_std, scale[m:]])


def score_of(log_prob: Any, params: FlowParams, theta: Tensor, create_graph: bool) -> Tensor:
    """∇_θ log_prob(params, θ) by autograd; ``create_graph`` keeps it differentiable in λ."""
    theta = theta.detach().requires_grad_(True)
    with torch.enable_grad():
        value = log_prob(params, theta).sum()
        (grad,) = torch.autograd.grad(value, theta, create_graph=create_graph)
    return grad


def _is_output_layer(flow: nn.Module, name: str) -> bool:
    """Whether ``name`` belongs to the last linear layer of its hypernetwork."""
    prefix, _, _ = name.rpartition(".")  # e.g. transform.transforms.0.hyper.4
    hyper_name, _, index = prefix.rpartition(".")
    hyper = flow.get_submodule(hyper_name)
    linear = (nn.Linear, zuko_module().nn.Linear)  # zuko's masked layers are torch's
    last = max(i for i, m in enumerate(hyper) if isinstance(m, linear))
    return int(index) == last


@dataclass(frozen=True)
class FlowApproximation:
    """A fitted flow q as an object (:class:`bdlkit.core.protocol.Approximation`); with a
    ``layout`` its draws, score, mean and std are a network's named tensors. ``family`` is
    a :class:`FlowFamily` or a :class:`~bdlkit.families.spline.SplineFamily`."""

    family: Any
    params: FlowParams
    layout: Layout | None = None

    def _out(self, vector: Tensor) -> Any:
        return vector if self.layout is None else self.layout.unflatten(vector)

    def sample(self, n: int, generator: torch.Generator) -> Any:
        with torch.no_grad():
            return self._out(self.family.sample(self.params, n, generator))

    def _vector(self, theta: Any) -> Tensor:
        return theta if self.layout is None else self.layout.flatten(theta)

    def log_prob(self, theta: Any) -> Tensor:
        """log q(θ) of stacked draws (a network's: named tensors with a leading draw axis)."""
        with torch.no_grad():
            return self.family.log_prob(self.params, self._vector(theta))

    def score(self, theta: Any) -> Any:
        return self._out(self.family.score(self.params, self._vector(theta)))

    @cached_property
    def _moments(self) -> tuple[Tensor, Tensor]:
        """Mean and std, made once per approximation (:meth:`FlowFamily.moments`)."""
        return self.family.moments(self.params)

    @property
    def mean(self) -> Any:
        """E_q[θ] — Monte Carlo over 4096 draws of a fixed seed on the flowed coordinates."""
        return self._out(self._moments[0])

    @property
    def std(self) -> Any:
        """The marginal standard deviations, by the same Monte Carlo."""
        return self._out(self._moments[1])
