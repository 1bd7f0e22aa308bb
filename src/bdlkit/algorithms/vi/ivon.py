"""IVON, the improved variational online Newton method (Shen et al., ICML 2024).

Y. Shen, N. Daheim, B. Cong, P. Nickl, G. M. Marconi, C. Bazan, R. Yokota, I. Gurevych,
D. Cremers, M. E. Khan, T. Möllenhoff, "Variational Learning is Effective for Large Deep
Networks" (arXiv 2402.17641), Algorithm 1; derivation and the relation to ``score_vi``'s
closed form in ``docs/ivon.md``. Written here from the paper's equations (the reference
``ivon-opt`` package is GPL and a peer in the benches and tests, never imported by the
library). A diagonal Gaussian q = N(m, diag σ²) over the per-datum loss ℓ̄ (the mean
negative log-likelihood) with precision λ(h + δ)::

    σ   = 1 / sqrt(λ (h + δ))
    θ_k = m + σ ⊙ ε_k,  ε_k ~ N(0, I),  k = 1..S              (S = mc_samples)
    ĝ   = mean_k ∇ℓ̄(θ_k),      ĥ = mean_k ∇ℓ̄(θ_k) ⊙ σ ε_k / σ²      (Price / Stein)
    g  ← β1 g + (1 − β1) ĝ
    h  ← β2 h + (1 − β2) ĥ + ½ (1 − β2)² (h − ĥ)² / (h + δ)        (h + δ stays > 0)
    m  ← m − α_t (h0 + δ) · clip((g / (1 − β1^t) + δ (m − m0)) / (h + δ), ±r)

ĥ uses the h the step sampled with; the mean step uses the new h. λ is ``ess``, the data
size q is fitted to, by default the problem's N_eff/T (N_eff = N/kld), so q approximates
the problem's own (tempered, discounted) posterior; another ``ess`` tempers it further, as
in ``ivon-opt``. δ = p0/N_eff and m0 are the problem's prior (precision p0 = 1/σ0², mean
m0), applied analytically as IVON's weight decay; the score of the prior is removed from ŝ
with it, ∇ℓ̄(θ) = −(T/N_eff)·(ŝ(θ) − ∇log p(θ)/T). On a Target (no prior apart from its
density) ĝ = −ŝ, λ = 1, δ = 0 (:mod:`bdlkit.algorithms.vi.prior_split`). α_t is ``lr`` times the cosine factor ½(1 + cos(π t/T_run))
with ``schedule="cosine"`` (the run length is bound by ``for_run``; a hand-written loop that
does not call it keeps the rate constant). The update is element-wise: it runs on flat
buffers (:mod:`bdlkit.algorithms.storage`). Cost: S forward/backward passes, memory m, h, g.

On flat storage a step is a fixed list of element-wise passes over one vector per field
(h + δ, λ(h + δ), σε in place, θ, L̂, ĝ, ĥ, g, h, m: one or two each; the prior's score
−P·m in one pass for a zero-mean Gaussian prior, without ``torch.func``);
denormals are not flushed (:mod:`bdlkit.core.denormals` says why). ``VERSION`` 2: the noise of a network of
more than 65 536 values is drawn in fixed chunks (:mod:`bdlkit.core.noise`) and the
passes round differently, so a checkpoint of version 1 is not resumed.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from bdlkit.algorithms.options import builder
from bdlkit.algorithms.storage import FlatStorage
from bdlkit.algorithms.vi.common import (
    DiagGaussianVI,
    minibatch_scores,
    positive_average,
    unzip,
)
from bdlkit.algorithms.vi.prior_split import likelihood_scores, prior_terms
from bdlkit.algorithms.vi.schedule import Annealing, RunningMean
from bdlkit.core import rng
from bdlkit.core.protocol import Batch, Info, Problem
from bdlkit.core.schedules import Schedule
from bdlkit.core.tree import (
    TensorTree,
    all_finite,
    device_of,
    pytree_dataclass,
    randn_like,
    tree_leaves,
    tree_map,
    zeros_like,
)
from bdlkit.families.diag_gaussian import (
    ENTROPY_CONST,
    DiagGaussian,
    DiagGaussianParams,
)
from bdlkit.problems import Target

KIND = "vi"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm


@pytree_dataclass
class IVONState:
    """The mean m, the curvature h (precision λ(h + δ)), the gradient momentum g, the noise
    generator and the step. ``MEAN_FIELDS`` and ``PRECISION_FIELDS`` tell a change of
    variables (:mod:`bdlkit.algorithms.vi.laplace`) how to map them."""

    MEAN_FIELDS: ClassVar[tuple[str, ...]] = ("mean",)
    PRECISION_FIELDS: ClassVar[tuple[str, ...]] = ("hess",)

    mean: TensorTree
    hess: TensorTree
    momentum: TensorTree
    rng_state: Tensor
    step: int
    average: RunningMean | None  # q's λ averaged over the run's last part


@dataclass(frozen=True)
class IVON(FlatStorage, Annealing, DiagGaussianVI):
    """IVON: natural-gradient diagonal-Gaussian VI with a Price curvature (module docstring).

    Args:
        lr: α, the step size of the mean (per datum, rescaled by h0 + δ as in the paper's
            code: a Newton step of size lr·(h0 + δ)/(h + δ)); a float or a schedule.
        ess: λ, the data size q is fitted to (default: the problem's N_eff/T, so q
            approximates its posterior; smaller widens q).
        hess_init: h0 > 0, the initial curvature, so σ₀ = 1/sqrt(λ(h0 + δ)); a Laplace
            start on a Target uses 1 (the standardised coordinates' curvature).
        beta1: the gradient momentum β1 in [0, 1).
        beta2: the curvature average β2 in [0, 1] (1: h stays h0).
        mc_samples: S draws per step (S forward/backward passes).
        clip_radius: r > 0, the bound on each coordinate of the preconditioned step
            (inf: no clipping).
    """

    problem: Problem
    lr: float | Schedule = 0.03
    ess: float | None = None
    hess_init: float = 3.0
    beta1: float = 0.9
    beta2: float = 0.99999
    mc_samples: int = 1
    clip_radius: float = float("inf")
    name: str = "ivon"
    VERSION: ClassVar[int] = 2  # the module docstring's last paragraph
    laplace_start: ClassVar[dict[str, float]] = {"hess_init": 1.0}

    def __post_init__(self) -> None:
        check_options(self.lr, self.ess, self.hess_init, self.beta1, self.beta2,
                      self.mc_samples, self.clip_radius)
        for name, kind in (("hess_init", float), ("beta1", float), ("beta2", float),
                           ("mc_samples", int), ("clip_radius", float)):
            object.__setattr__(self, name, kind(getattr(self, name)))
        self.check_annealing()

    # ------------------------------------------------------------------ scales
    @property
    def problem_size(self) -> float:
        """The data size λ0 = N_eff/T of the problem's own posterior (1 for a Target)."""
        return self.problem.effective_num_data / self.problem.temperature

    @property
    def data_size(self) -> float:
        """The data size λ that q is fitted to (``ess``, or λ0)."""
        return self.problem_size if self.ess is None else float(self.ess)

    @property
    def weight_decay(self) -> float:
        """The prior's precision per datum δ = P/λ0 = 1/(σ0² N_eff) (0 for a Target)."""
        return 0.0 if isinstance(self.problem, Target) else \
            1.0 / (self.problem.prior.scale ** 2 * self.problem.effective_num_data)

    def lam(self, state: IVONState) -> DiagGaussianParams:
        """q's λ = (m, log σ), σ = 1/sqrt(λ(h + δ))."""
        size, delta = self.data_size, self.weight_decay
        return DiagGaussianParams(
            mu=state.mean, rho=tree_map(lambda h: (size * (h + delta)).log().mul(-0.5),
                                        state.hess))

    def params(self, state: IVONState) -> TensorTree:
        """The mean m (of the average once it holds iterates)."""
        return self.settled(state.average, self.lam(state)).mu

    def approximation(self, state: IVONState) -> DiagGaussian:
        return DiagGaussian(self.settled(state.average, self.lam(state)))

    def is_finite(self, state: IVONState) -> bool:
        return all_finite((state.mean, state.hess,
                           None if state.average is None else state.average.lam))

    # ------------------------------------------------------------------ protocol
    def init(self, params: TensorTree | None = None, *,
             generator: torch.Generator) -> IVONState:
        mean = self.problem.init_params(generator) if params is None else params
        if isinstance(mean, DiagGaussianParams):
            raise ValueError("ivon starts from a point (its σ₀ is set by hess_init), not from "
                             "a Gaussian: pass init=lam.mu")
        mean = tree_map(lambda p: p.detach().clone(), mean)
        if isinstance(self.problem, Target) and mean.ndim != 1:
            raise ValueError(f"VI on a Target fits one approximation: the starting point must "
                             f"have shape ({self.problem.dim},), got {tuple(mean.shape)}")
        noise = rng.split(generator, device=device_of(mean))
        state = IVONState(mean=mean, hess=tree_map(lambda p: torch.full_like(p, self.hess_init),
                                                   mean),
                          momentum=zeros_like(mean), rng_state=rng.state_of(noise), step=0,
                          average=None)
        return dataclasses.replace(state, average=self.initial_average(self.lam(state)))

    def update(self, state: IVONState, batch: Batch) -> tuple[IVONState, Info]:
        size, delta = self.data_size, self.weight_decay
        gen = rng.from_state(state.rng_state, device=device_of(state.mean))
        eps = randn_like(state.mean, gen, self.mc_samples)  # (S, ...) standard normal
        shifted = tree_map(lambda h: torch.add(h, delta), state.hess)  # h + δ
        precision = tree_map(lambda h: torch.mul(h, size), shifted)  # λ(h + δ) = 1/σ²
        noise = tree_map(lambda e, p: e.mul_(p.rsqrt()), eps, precision)  # σ ε
        value, scores = minibatch_scores(self.problem, tree_map(torch.add, noise, state.mean),
                                         batch)
        prior = prior_terms(self.problem, state.mean)
        lik = likelihood_scores(scores, noise, prior)  # ∇ℓ̄ = −L̂/λ0, δ(m − m0) = −s_p/λ0
        t = state.step + 1
        b1, b2, radius = self.beta1, self.beta2, self.clip_radius
        per_datum = -1.0 / self.problem_size
        lr = self.rate(state.step) * (self.hess_init + delta)
        debias = 1.0 - b1 ** t

        def per_leaf(m, h, g_mom, h_d, prec, l_k, n_k, s_p):
            g_hat = torch.mul(l_k[0] if len(l_k) == 1 else l_k.mean(0), per_datum)  # ĝ
            h_hat = (torch.mul(g_hat, n_k[0]) if len(l_k) == 1  # ĥ = mean_k ĝ_k σε_k / σ²
                     else torch.mul(l_k, n_k).mean(0).mul_(per_datum)).mul_(prec)
            g_mom = torch.lerp(g_mom, g_hat, 1 - b1)
            h_new = positive_average(h, h_hat, b2, h_d)
            num = torch.div(g_mom, debias).add_(s_p, alpha=per_datum)  # g/debias + δ(m − m0)
            den = torch.add(h_new, delta) if delta else h_new
            if radius == math.inf and isinstance(lr, float) \
                    and abs(lr) <= torch.finfo(m.dtype).max:
                return torch.addcdiv(m, num, den, value=-lr), h_new, g_mom
            # a clip; or lr a tensor (a compiled chunk's schedule) or beyond the dtype (inf)
            step = num.div_(den).clamp_(-radius, radius)
            return step.mul_(-lr).add_(m), h_new, g_mom

        mean, hess, momentum = unzip(tree_map(per_leaf, state.mean, state.hess,
                                              state.momentum, shifted, precision, lik, noise,
                                              prior.score), 3)
        new = IVONState(mean=mean, hess=hess, momentum=momentum,
                        rng_state=rng.state_of(gen), step=t, average=state.average)
        # the draws came from q_t: value + H(q_t) estimates its ELBO (the objective plotted),
        # H = Σ log σ + const with log σ = −½ log λ(h + δ)
        entropy = sum(p.log().sum() * -0.5 + ENTROPY_CONST * p.numel()
                      for p in tree_leaves(precision))
        info = {"log_prob": value, "elbo": value + entropy, "lr": lr}
        if state.average is None:  # this run does not average (a network's default)
            return new, info
        average = self.averaged(state.average, self.lam(new), t)
        return dataclasses.replace(new, average=average), info


def check_options(lr, ess, hess_init, beta1, beta2, mc_samples, clip_radius) -> None:
    """Refuse options outside their ranges, naming the option and the range."""
    def number(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x)

    if not callable(lr) and not (number(lr) and 0 < lr < math.inf):
        raise ValueError(f"lr must be a finite number > 0 (or a schedule), got {lr!r}")
    if ess is not None and not (number(ess) and 0 < ess < math.inf):
        raise ValueError(f"ess must be a finite number > 0 (the data size q is fitted to; "
                         f"None: the problem's N_eff/T), got {ess!r}")
    if not (number(hess_init) and 0 < hess_init < math.inf):
        raise ValueError(f"hess_init must be a finite number > 0 (the initial curvature h0), "
                         f"got {hess_init!r}")
    if not (number(beta1) and 0 <= beta1 < 1):
        raise ValueError(f"beta1 must be in [0, 1), got {beta1!r}")
    if not (number(beta2) and 0 <= beta2 <= 1):
        raise ValueError(f"beta2 must be in [0, 1], got {beta2!r}")
    if isinstance(mc_samples, bool) or int(mc_samples) != mc_samples or mc_samples < 1:
        raise ValueError(f"mc_samples must be an integer >= 1, got {mc_samples!r}")
    if not (number(clip_radius) and clip_radius > 0):
        raise ValueError(f"clip_radius must be > 0 (inf: no clipping), got {clip_radius!r}")


build = builder(IVON)

__all__ = ["IVON", "IVONState", "build", "positive_average"]


ALGORITHM = IVON
