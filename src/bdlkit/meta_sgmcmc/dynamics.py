"""The NNSGHMC dynamics of Meta-SGMCMC (Gong, Li & Hernández-Lobato, ICLR 2019).

``docs/meta_sgmcmc.md`` derives what follows. With H(θ, p) = U(θ) + ½pᵀp, z = (θ, p) and the
complete recipe for SG-MCMC (Ma et al. 2015)::

    dz = −(D(z) + Q(z))·∇H dt + T·Γ(z) dt + sqrt(2T·D(z)) dW,   Γ_i = Σ_j ∂_j (D_ij + Q_ij)
    Q = [[0, −Q_f], [Q_f, 0]],   D = [[0, 0], [0, D_f]]        (diagonal blocks)

any Q_f and D_f ≥ 0 leave π_T ∝ exp(−U/T) invariant. The two are small per-coordinate
networks of the *mean* energy u = U/N, the momentum p_i and the mean gradient g_i = ∂_iU/N:

* ``Q_f = clamp(f_Q(u, p_i), ±q_clamp)``, f_Q an MLP 2 → 10 → 1 (ReLU);
* ``D_f = clamp(d_scale·|f_D(u, p_i, grad_mult·g_i)| + c_D·Q_f², 0, D_max)``, f_D an MLP
  3 → 10 → 1, c_D = d_q_mult/ε and D_max = min(d_max, 1/ε). The authors clamp at d_max
  alone; the explicit friction step p − ε·D_f·p diverges where ε·D_f > 2, which their
  ε = sqrt(0.007/60 000) never reaches (ε·d_max = 0.34) but a small data set does (N = 1:
  ε·d_max = 84). With ε·D_f ≤ 1 one step at most stops the momentum; wherever
  1/ε ≥ d_max (N ≥ 7 000 at the default constants) the clamp is the authors'.

Then ``Γ_θ,i = −∂Q_f/∂p_i`` and ``Γ_p,i = ∂Q_f/∂θ_i + ∂D_f/∂p_i`` (the total derivative
of D_f in p_i, through Q_f too). The discretisation, with ∇Ũ = N·g the minibatch gradient
of the untempered energy and ξ ~ N(0, I)::

    p' = p − ε·Q_f(u, p)·∇Ũ − ε·D_f·p + ε·T·Γ_p + sqrt(2ε·T·D_f)·ξ
    θ' = θ + ε·Q_f(u, p')·p' + ε·T·Γ_θ(u, p')

This is the authors' *sampling-mode* form (Q_f and Γ_θ recomputed at p'); their
training-mode code reuses Q_f(u, p) in the θ step. bdlkit uses the sampling form in both,
so the sampler that runs is the one that was meta-trained.

Γ is computed in one of two ways:

* **autograd** (:func:`momentum_terms`, :func:`position_terms`): exact derivatives of the
  networks by ``torch.autograd.grad``; with ``create_graph=True`` they stay differentiable in
  the meta-parameters (meta-training);
* **finite differences in time** (:func:`momentum_terms_fd`, :func:`position_terms_fd`),
  the authors' rule at sampling time: each derivative is a difference quotient of values the
  chain computed at consecutive steps, so no backward pass is needed. ∂Q_f/∂u uses
  Q_f(u_{t−1}, p_t) and Q_f(u_t, p_t), ∂Q_f/∂p uses Q_f(u_{t−1}, p_{t−1}) and
  Q_f(u_{t−1}, p_t) (Γ_p) or Q_f(u_t, p_t) and Q_f(u_t, p_{t+1}) (Γ_θ), and ∂f_D/∂p one
  extra pass of f_D at p_{t−1}. The ReLU networks are piecewise linear, so a quotient is
  exact when both points fall in one linear piece. The code adds 1e-7 (1e-10 for f_D) to
  each denominator; bdlkit adds it with the sign of the difference, so that a difference
  near −1e-7 cannot divide by zero.

Written here because no library implements Meta-SGMCMC; pure tensor functions, shared by the
sampler (:mod:`bdlkit.algorithms.sgmcmc.meta_sgmcmc`) and meta-training
(:mod:`bdlkit.meta_sgmcmc.meta_train`). Shapes: ``p`` and ``g`` any shape, ``u`` broadcastable
to it (a scalar, or ``(chains, 1)`` for a ``(chains, d)`` stack).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import NamedTuple

import torch
from torch import Tensor

from bdlkit.core.chunks import chunk_size, spans
from bdlkit.core.value_range import nonnegative_problem, positive_problem
from bdlkit.models.cnn import haiku_truncated_normal_

HIDDEN = 10
#: coordinates per evaluation of the networks (:func:`bdlkit.core.chunks.chunk_size`): 52 428
CHUNK = chunk_size(HIDDEN)
#: Q_f's network (inputs u, p) then D_f's (inputs u, p, grad_mult·g); layout (in, out)
META_SHAPES: dict[str, tuple[int, ...]] = {
    "q_w0": (2, HIDDEN), "q_b0": (HIDDEN,), "q_w1": (HIDDEN, 1), "q_b1": (1,),
    "d_w0": (3, HIDDEN), "d_b0": (HIDDEN,), "d_w1": (HIDDEN, 1), "d_b1": (1,),
}
META_KEYS = tuple(META_SHAPES)
Q_DIFF_TINY = 1e-7  # the code's additive guards of the difference quotients
D_DIFF_TINY = 1e-10
MetaParams = dict[str, Tensor]


class Scales(NamedTuple):
    """What the dynamics need of the step: ε, c_D = d_q_mult/ε, D_max = min(d_max, 1/ε)."""

    eps: float
    c_d: float
    d_max: float


@dataclass(frozen=True)
class Constants:
    """The fixed constants of the dynamics (defaults: the authors' MNIST configuration,
    ``docs/meta_sgmcmc.md``). ε = sqrt(step_mult/N) and c_D = d_q_mult/ε follow the problem's N."""

    step_mult: float = 0.007
    q_clamp: float = 5.0
    d_scale: float = 50.0
    grad_mult: float = 70.0
    d_max: float = 1000.0
    d_q_mult: float = 0.01

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            check = nonnegative_problem if f.name == "d_q_mult" else positive_problem
            problem = check(value)
            if problem:
                raise ValueError(f"Meta-SGMCMC constant {f.name} {problem}")

    def eps(self, num_data: int) -> float:
        """The step ε = sqrt(step_mult / N)."""
        return math.sqrt(self.step_mult / num_data)

    def scales(self, num_data: int, eps: float | None = None) -> Scales:
        """The step-dependent scales for N = ``num_data`` (ε = sqrt(step_mult/N) unless
        ``eps`` is given)."""
        eps = self.eps(num_data) if eps is None else float(eps)
        if not (math.isfinite(eps) and eps > 0):
            raise ValueError(f"Meta-SGMCMC's step eps must be a finite number > 0, got {eps!r}")
        return Scales(eps, self.d_q_mult / eps, min(self.d_max, 1.0 / eps))

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def init_meta_params(generator: torch.Generator, dtype: torch.dtype = torch.float32
                     ) -> MetaParams:
    """Weights truncated normal with std 1/sqrt(fan_in) (at ±2 std), biases 0."""
    out: MetaParams = {}
    for k, shape in META_SHAPES.items():
        if len(shape) == 2:
            w = torch.empty(shape, dtype=dtype)
            out[k] = haiku_truncated_normal_(w, shape[0], generator)
        else:
            out[k] = torch.zeros(shape, dtype=dtype)
    return out


def check_meta_params(meta: MetaParams) -> None:
    """A clear ``ValueError`` for missing keys, wrong shapes or non-finite weights."""
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise ValueError(f"Meta-SGMCMC meta-parameters lack {missing}; expected keys "
                         f"{list(META_KEYS)}")
    for k, shape in META_SHAPES.items():
        if tuple(meta[k].shape) != shape:
            raise ValueError(f"Meta-SGMCMC meta-parameter {k} has shape "
                             f"{tuple(meta[k].shape)}, expected {shape} (Q_f: MLP 2 -> "
                             f"{HIDDEN} -> 1, D_f: MLP 3 -> {HIDDEN} -> 1)")
        if not torch.isfinite(meta[k]).all():
            raise ValueError(f"Meta-SGMCMC meta-parameter {k} is not finite")


def _mlp(meta: MetaParams, net: str, inputs: list[Tensor]) -> Tensor:
    """``Linear – ReLU – Linear`` on the stacked per-coordinate inputs; output of p's shape."""
    x = torch.stack(inputs, dim=-1)
    w0, b0 = meta[f"{net}_w0"].to(x), meta[f"{net}_b0"].to(x)
    w1, b1 = meta[f"{net}_w1"].to(x), meta[f"{net}_b1"].to(x)
    return (torch.relu(x @ w0 + b0) @ w1 + b1)[..., 0]


def q_value(meta: MetaParams, c: Constants, u: Tensor, p: Tensor) -> Tensor:
    """``Q_f = clamp(f_Q(u, p), ±q_clamp)``."""
    return _mlp(meta, "q", [u.expand_as(p), p]).clamp(-c.q_clamp, c.q_clamp)


def d_part(meta: MetaParams, c: Constants, u: Tensor, p: Tensor, g: Tensor) -> Tensor:
    """``d_scale·|f_D(u, p, grad_mult·g)|``: D_f before its Q_f term and clamp."""
    return c.d_scale * _mlp(meta, "d", [u.expand_as(p), p, c.grad_mult * g]).abs()


def diffusion(part: Tensor, q: Tensor, s: Scales) -> Tensor:
    """``D_f = clamp(part + c_D·Q_f², 0, D_max)``."""
    return (part + s.c_d * q.square()).clamp(0.0, s.d_max)


class MomentumTerms(NamedTuple):
    q: Tensor  # Q_f(u_t, p_t)
    d: Tensor  # D_f
    gamma_p: Tensor  # Γ_p
    part: Tensor  # d_scale·|f_D| at p_t (the finite-difference memory)


class PositionTerms(NamedTuple):
    q: Tensor  # Q_f(u_t, p_{t+1})
    gamma_theta: Tensor  # Γ_θ = −∂Q_f/∂p at p_{t+1}


def _grad_input(x: Tensor) -> Tensor:
    return x if x.requires_grad else x.detach().requires_grad_()


def momentum_terms(meta: MetaParams, c: Constants, s: Scales, u: Tensor, p: Tensor,
                   g: Tensor, create_graph: bool = False) -> MomentumTerms:
    """Q_f, D_f and Γ_p at (u, p, g) with Γ by autograd. ``create_graph=True`` keeps them
    differentiable in ``meta`` and ``p`` (meta-training); otherwise they are detached."""
    with torch.enable_grad():
        u_in = u.detach().expand_as(p).clone().requires_grad_()
        p_in = _grad_input(p)
        q = q_value(meta, c, u_in, p_in)
        part = d_part(meta, c, u.detach(), p_in, g)
        d = diffusion(part, q, s)
        dq_du, = torch.autograd.grad(q.sum(), u_in, create_graph=create_graph,
                                     retain_graph=True)
        dd_dp, = torch.autograd.grad(d.sum(), p_in, create_graph=create_graph)
    terms = MomentumTerms(q, d, dq_du * g + dd_dp, part)
    return terms if create_graph else MomentumTerms(*(t.detach() for t in terms))


def position_terms(meta: MetaParams, c: Constants, u: Tensor, p_new: Tensor,
                   create_graph: bool = False) -> PositionTerms:
    """Q_f(u, p') and Γ_θ = −∂Q_f/∂p at p' by autograd."""
    with torch.enable_grad():
        p_in = _grad_input(p_new)
        q = q_value(meta, c, u.detach(), p_in)
        dq_dp, = torch.autograd.grad(q.sum(), p_in, create_graph=create_graph)
    terms = PositionTerms(q, -dq_dp)
    return terms if create_graph else PositionTerms(*(t.detach() for t in terms))


class Memory(NamedTuple):
    """What the finite differences need from the step before: u_{t−1}, p_{t−1},
    Q_f(u_{t−1}, p_{t−1}) and Q_f(u_{t−1}, p_t)."""

    u: Tensor
    p: Tensor
    q: Tensor
    q_next: Tensor


def _quotient(num: Tensor, den: Tensor, tiny: float) -> Tensor:
    """``num / (den ± tiny)``, the guard taking the sign of ``den`` (+ at 0)."""
    return num / (den + torch.where(den < 0, -tiny, tiny))


def momentum_terms_fd(meta: MetaParams, c: Constants, s: Scales, u: Tensor, p: Tensor,
                      g: Tensor, memory: Memory) -> MomentumTerms:
    """Q_f, D_f and Γ_p with Γ by finite differences in time (module docstring)."""
    q = q_value(meta, c, u, p)
    dq_dtheta = _quotient(q - memory.q_next, u - memory.u, Q_DIFF_TINY) * g
    dp = p - memory.p
    dq_dp = _quotient(memory.q_next - memory.q, dp, Q_DIFF_TINY)
    part = d_part(meta, c, u, p, g)
    dpart_dp = _quotient(part - d_part(meta, c, u, memory.p, g), dp, D_DIFF_TINY)
    raw = part + s.c_d * q.square()
    d = raw.clamp(0.0, s.d_max)
    # where the clamp holds D_f constant its derivative is 0 (as autograd has it)
    dd_dp = torch.where((raw > 0) & (raw < s.d_max), dpart_dp + 2.0 * s.c_d * q * dq_dp, 0.0)
    return MomentumTerms(q, d, dq_dtheta + dd_dp, part)


def position_terms_fd(meta: MetaParams, c: Constants, u: Tensor, p: Tensor, p_new: Tensor,
                      q: Tensor) -> PositionTerms:
    """Q_f(u, p') and Γ_θ = −(Q_f(u, p') − Q_f(u, p))/(p' − p)."""
    q_new = q_value(meta, c, u, p_new)
    return PositionTerms(q_new, -_quotient(q_new - q, p_new - p, Q_DIFF_TINY))


def momentum_update(p: Tensor, energy_grad: Tensor, terms: MomentumTerms, eps: float,
                    temperature: float, noise: Tensor) -> Tensor:
    """``p' = p − ε·Q_f·∇Ũ − ε·D_f·p + ε·T·Γ_p + sqrt(2ε·T·D_f)·ξ``."""
    var = 2.0 * eps * temperature * terms.d
    # a floor only on a graph (meta-training): sqrt has an infinite derivative at 0
    sd = (var.clamp_min(1e-30) if var.requires_grad else var.clamp_min(0.0)).sqrt()
    return (p - eps * terms.q * energy_grad - eps * terms.d * p
            + (eps * temperature) * terms.gamma_p + sd * noise)


def position_update(theta: Tensor, p_new: Tensor, terms: PositionTerms, eps: float,
                    temperature: float) -> Tensor:
    """``θ' = θ + ε·Q_f(u, p')·p' + ε·T·Γ_θ``."""
    return theta + eps * terms.q * p_new + (eps * temperature) * terms.gamma_theta


class Step(NamedTuple):
    """One step of one parameter tensor (:func:`step`)."""

    theta: Tensor  # θ_{t+1}
    p: Tensor  # p_{t+1}
    q: Tensor  # Q_f(u_t, p_t)
    q_next: Tensor  # Q_f(u_t, p_{t+1})
    finite: Tensor  # whether D_f, Γ_p and Γ_θ were finite everywhere (a bool scalar)


def step(meta: MetaParams, c: Constants, s: Scales, u: Tensor, theta: Tensor, p: Tensor,
         g: Tensor, noise: Tensor, num_data: int, temperature: float,
         memory: Memory | None, chunk: int = CHUNK) -> Step:
    """One step of θ and p (module docstring), :data:`CHUNK` coordinates at a time: the
    networks' transient memory (inputs, hidden activations, autograd's graph, the
    element-wise terms) is a chunk's, whatever θ's size.

    Args:
        meta, c, s: the meta-parameters, constants and step scales.
        u: the mean energy, a scalar, or (chains, 1) for a (chains, d) stack of chains.
        theta, p, g, noise: θ_t, p_t, the mean gradient g and ξ ~ N(0, I), one shape.
        num_data: N (∇Ũ = N·g).
        temperature: T.
        memory: the previous step's values for finite differences (sliced per chunk),
            or None for Γ by autograd (and the first step of finite differences).
        chunk: coordinates per evaluation of the networks.
    """
    stack = u.dim() > 0  # a chain stack: chunks along the last dimension, u per chain
    lay = (lambda t: t) if stack else (lambda t: t.reshape(-1))
    flat = [lay(t) for t in (theta, p, g, noise)]
    prev = None if memory is None else [lay(t) for t in memory[1:]]
    parts = []
    for a, b in spans(flat[0].shape[-1], chunk):
        th, pp, gg, z = (t[..., a:b] for t in flat)
        fd = None if prev is None else Memory(memory.u, *(t[..., a:b] for t in prev))
        if fd is None:
            mom = momentum_terms(meta, c, s, u, pp, gg)
        else:
            mom = momentum_terms_fd(meta, c, s, u, pp, gg, fd)
        p_new = momentum_update(pp, num_data * gg, mom, s.eps, temperature, z)
        if fd is None:
            pos = position_terms(meta, c, u, p_new)
        else:
            pos = position_terms_fd(meta, c, u, pp, p_new, mom.q)
        finite = (torch.isfinite(mom.d).all() & torch.isfinite(mom.gamma_p).all()
                  & torch.isfinite(pos.gamma_theta).all())
        parts.append((position_update(th, p_new, pos, s.eps, temperature), p_new, mom.q,
                      pos.q, finite))
    cols = [torch.cat(col, dim=-1).reshape(theta.shape) for col in list(zip(*parts))[:4]]
    return Step(*cols, torch.stack([part[-1] for part in parts]).all())


__all__ = ["META_KEYS", "META_SHAPES", "Constants", "Memory", "MetaParams", "MomentumTerms",
           "PositionTerms", "Scales", "Step", "check_meta_params", "d_part", "diffusion",
           "init_meta_params",
           "momentum_terms", "momentum_terms_fd", "momentum_update", "position_terms",
           "position_terms_fd", "position_update", "q_value", "step"]
