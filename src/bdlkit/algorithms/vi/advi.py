"""Mean-field ADVI (Kucukelbir et al., JMLR 2017) on the diagonal Gaussian family.

Maximises the ELBO of q_λ = N(μ, diag σ²), λ = (μ, ρ = log σ) (``docs/vi.md``, ADVI)::

    ELBO(λ) = E_ε[ log π(μ + σ⊙ε) ] + H(q_λ),     H = Σ_i ρ_i + const

with S = ``num_samples`` reparameterised draws θ_k = μ + σ ε_k per step and ŝ_k the
unbiased minibatch score of the (tempered) log posterior at θ_k (``problem.value_and_score``:
one ordinary forward + backward of the network per draw, no graph kept). The chain rule
is applied by hand, element-wise (∂θ/∂μ = 1, ∂θ/∂ρ = σε)::

    ∇_μ ELBO ≈ mean_k ŝ_k
    ∇_ρ ELBO ≈ mean_k ŝ_k ⊙ σ ⊙ ε_k + 1                (the 1 is ∇_ρ H, analytic)

**Sticking the landing** (``stl=True``, Roeder et al., NeurIPS 2017). With the Monte Carlo
entropy −log q_λ(θ(λ, ε)), the total derivative is a path term, through θ, plus the score
term −∂_λ log q_λ(θ)|_θ fixed, whose expectation is zero; STL drops the score term. For the
diagonal Gaussian, with ∇_θ log q(θ_k) = −ε_k/σ::

    path term of −log q:    ∂_μ = ε_k/σ,   ∂_ρ = ε_k²
    score term:             ∂_μ = −ε_k/σ,  ∂_ρ = 1 − ε_k²

Their sum, (0, 1), is exactly the analytic entropy gradient above, draw by draw. So what
changes with ``stl=True`` is that the entropy gradient (0, 1) is replaced by (ε_k/σ, ε_k²)::

    ∇_μ ELBO ≈ mean_k (ŝ_k + ε_k/σ)
    ∇_ρ ELBO ≈ mean_k (ŝ_k + ε_k/σ) ⊙ σ ⊙ ε_k

It is still unbiased, since E[ε] = 0 and E[ε²] = 1. Far from the optimum it has more
variance than the analytic entropy. But ŝ_k + ε_k/σ = ŝ_k − ∇_θ log q(θ_k) vanishes for
every draw when q = π, so for a target inside the family the gradient variance goes to
zero at the optimum and a constant step size converges exactly. In practice the extra
ε/σ term is large while σ is far below the posterior std (as at a small ``init_std``).
Under Adam it inflates the second-moment estimate, which remembers it for about
1/(1−β₂) = 1000 steps, and stalls μ; on Gaussian test targets μ was then still off by
about one posterior std. Start STL from σ near the posterior scale, or warm-start it
(``init(DiagGaussianParams)``) from a run with ``stl=False``.

Scale: the optimiser minimises −ELBO/N (N = ``num_data``; 1 for a Target), as MAP minimises
−value/N (``docs/conventions.md``), so ``lr`` is per datum. The entropy gradient is scaled
by 1/N like the rest. Cost (docs/vi.md, cost per iteration): S network forward + backward passes plus O(Sd), and
memory for λ (2d) plus the optimiser's moments. On flat storage the O(Sd) is a fixed list
of element-wise passes over one vector per field (:mod:`bdlkit.algorithms.vi.common`);
denormals are not flushed (:mod:`bdlkit.core.denormals` says why). ``VERSION`` 2:
the noise of a network of more than 65 536 values is drawn in fixed chunks
(:mod:`bdlkit.core.noise`) and Adam is torch's fused kernel, so a checkpoint of version 1
is not resumed.

``init_std`` and ``lr`` (defaults 1e-2 and 1e-2): under Adam log σ moves by about ``lr`` per
step, so σ needs about ln(σ*/σ₀)/lr steps to reach its optimum σ*. With the former 1e-3 and
1e-3 that was ~7 000 steps for σ* ≈ 1 (a prior-dominated weight), and a 1 000-step run
ended with every σ near 2.7e-3: a point estimate. With 1e-2 and 1e-2 the digits MLP's median
σ after 1 000 steps is 0.67, against 0.86 after 10 000 (``score_vi``'s gradient solver,
which has the same iterates). q still starts narrow enough that the first steps train the
network instead of drowning it in weight noise. For a Target of unit scale, pass
``init_std=1``. ``init(params)`` takes a point μ₀, or a full :class:`DiagGaussianParams` to
warm-start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from bdlkit.algorithms.options import builder
from bdlkit.algorithms.storage import FlatStorage
from bdlkit.algorithms.vi import common as vi
from bdlkit.algorithms.vi import flow_vi
from bdlkit.algorithms.vi.flow_vi import FlowOptions
from bdlkit.algorithms.vi.schedule import Annealing
from bdlkit.core import rng
from bdlkit.core.protocol import Batch, Info, Problem
from bdlkit.core.schedules import Schedule
from bdlkit.core.tree import TensorTree, device_of, tree_map
from bdlkit.families.diag_gaussian import DiagGaussianParams

KIND = "vi"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm

ADVIState = vi.VIState


@dataclass(frozen=True)
class ADVI(FlatStorage, FlowOptions, Annealing, vi.DiagGaussianVI):
    """Mean-field ADVI: ``λ ← λ + optimizer_update(−∇_λ ELBO / N)`` (module docstring).

    Args:
        lr: per-datum learning rate on λ = (μ, log σ), a float or a schedule of the step.
        optimizer: "adam" or "sgd".
        momentum: SGD's momentum in [0, 1) (unused by Adam).
        num_samples: S reparameterised draws per step.
        init_std: σ of q₀ around the initial parameters (1 for a Target of unit scale).
        stl: sticking-the-landing gradients (Roeder et al. 2017): zero variance at the
            optimum for a target in the family, but start them from σ near the posterior
            scale.
    """

    problem: Problem
    lr: float | Schedule = 1e-2
    optimizer: Literal["adam", "sgd"] = "adam"
    momentum: float = 0.9
    num_samples: int = 1
    init_std: float = 1e-2
    stl: bool = False
    name: str = "advi"
    VERSION: ClassVar[int] = 2  # the module docstring's last paragraph
    _opt: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        vi.setup(self)
        self.check_annealing()
        if not isinstance(self.stl, bool):
            raise ValueError(f"stl must be True or False, got {self.stl!r}")
        self.setup_family(self.problem)

    def init(
        self, params: TensorTree | DiagGaussianParams | None = None, *,
        generator: torch.Generator,
    ) -> ADVIState:
        if self._flow is not None:
            return self.flow_init(params, generator)
        return vi.init_state(self, params, generator)

    def elbo_grad(
        self, lam: DiagGaussianParams, eps: TensorTree, batch: Batch
    ) -> tuple[DiagGaussianParams, Tensor]:
        """The Monte Carlo estimate of ∇_λ ELBO from the stacked draws ``eps`` (S, ...),
        unscaled (not divided by N), and the mean log density of the draws."""
        return self.scaled_elbo_grad(lam, eps, batch, 1.0, own_eps=False)

    def scaled_elbo_grad(
        self, lam: DiagGaussianParams, eps: TensorTree, batch: Batch, scale: float,
        own_eps: bool,
    ) -> tuple[DiagGaussianParams, Tensor]:
        """``scale`` · :meth:`elbo_grad` in fresh tensors, one element-wise pass per line of
        the module docstring's formulas (``own_eps``: ``eps`` is this step's own draw, and
        becomes σε in place where STL does not need ε itself)."""
        sigma = tree_map(torch.exp, lam.rho)  # once: exp is the costliest element-wise op
        scale_eps = torch.Tensor.mul_ if own_eps and not self.stl else torch.mul
        noise = tree_map(scale_eps, eps, sigma)  # σ ε
        value, scores = vi.minibatch_scores(self.problem, tree_map(torch.add, noise, lam.mu),
                                            batch)  # at θ = μ + σ ε
        if self.stl:  # ŝ + ε/σ replaces ŝ, and the entropy's (0, 1) goes
            scores = tree_map(torch.addcdiv, scores, eps, sigma)
        return vi.elbo_gradients(scores, noise, scale, entropy=not self.stl), value

    @property
    def flat_storage(self) -> bool:
        """Flat on the diagonal Gaussian; a flow family keeps its own layout."""
        return self.storage == "flat" and self._flow is None

    def update(self, state: ADVIState, batch: Batch) -> tuple[ADVIState, Info]:
        if self._flow is not None:  # flow_vi's module docstring
            return flow_vi.elbo_step(self._flow, self._layout, self._opt,
                                     self.rate(state.step), self.problem, state, batch,
                                     num_samples=self.num_samples, stl=self.stl)
        gen = rng.from_state(state.rng_state, device=device_of(state.lam.mu))
        eps = vi.draw_eps(state.lam, self.num_samples, gen)
        grads, value = self.scaled_elbo_grad(  # of −ELBO/N, the loss minimised
            state.lam, eps, batch, -1.0 / self.problem.effective_num_data, own_eps=True)
        new = vi.apply_grads(self._opt, state, grads, self.rate(state.step), gen)
        return self.advance_average(new), {"log_prob": value, "elbo": value + vi.entropy(state.lam)}


build = builder(ADVI)

__all__ = ["ADVI", "ADVIState", "build"]


ALGORITHM = ADVI
