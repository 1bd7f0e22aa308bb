"""MC dropout (Gal & Ghahramani, ICML 2016): dropout training, dropout kept on to predict.

Y. Gal, Z. Ghahramani, "Dropout as a Bayesian Approximation: Representing Model
Uncertainty in Deep Learning"; derivation in ``docs/methods/mc_dropout.md``. The family
q(W) (:mod:`bdlkit.families.dropout`) drops the input columns of chosen ``Linear``
weights M at rate p (:mod:`.dropout_sites`: the network's dropout layers, or every
``Linear`` at ``rate``): W = M·diag(z)/(1 − p), z_j ~ Bernoulli(1 − p). Each step takes
MAP's step on a stochastic gradient of Gal's objective E_z[−log p(D | W)] + KL::

    g_t = −∇_M [ value(W(z_t), B_t) ] / N_eff,        M_{t+1} = M_t + optimizer_update(g_t)

Each example of the minibatch gets its own mask, as in ordinary dropout training: the
network's dropout layers switched to train mode for this call only, or, where the network
has none, forward pre-hooks dropping the inputs of its ``Linear`` layers
(:func:`.dropout_sites.masks_active`); they draw from torch's RNG forked and seeded with
``fold_in(mask_seed, t)``, folded once more with the rank on a data-parallel shard (so every
row of the global batch has its own mask, whatever the number of ranks). The prior's part is
taken in expectation over the masks, E_z[log p(W)] = log p(M) − P·p/(2(1 − p))·‖M‖² for
N(m0, σ0²) with P = 1/(σ0² T) (exact: E[W²] = M²/(1 − p)), so the masked weights' score
gains −P·p/(1 − p)·M.

In expectation ‖M‖²/(2σ0²(1 − p)) is Gal's weight decay l²(1 − p)/2·‖M′‖² in the
inverted-dropout scaling M′ = M/(1 − p) with prior length-scale l = 1/σ0: the weight decay
comes from the prior (``prior=σ0``), nothing else. Regression noise: the likelihood says it,
as for every method (``gaussian`` learns σ with the weights, ``gaussian:<σ>`` fixes it;
Gal's τ = 1/σ² chosen on validation is a sweep over fixed σ). Prediction: each draw of the
result is one mask of every site applied to the weights (one forward pass per draw; each
point's predictive mixture is the one per-example masks give);
``Result.predict(x, num_samples=T)`` averages T. Masks come from ``fold_in(mask_seed,
step)`` (:func:`bdlkit.core.rng.fold_in`), so a resumed run draws the same masks.

At rate 0 no unit is dropped and the step is MAP's, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch

from bdlkit.algorithms.options import builder
from bdlkit.algorithms.vi.dropout_sites import find_sites, masks_active
from bdlkit.core import rng
from bdlkit.core.errors import InputError
from bdlkit.core.optim import AdamState, SGDState, make_optimizer
from bdlkit.core.protocol import LOG_PROB, Batch, Info, Problem, Variational
from bdlkit.core.schedules import Schedule, resolve
from bdlkit.core.tree import TensorTree, detach_clone, pytree_dataclass
from bdlkit.families.dropout import BernoulliDropout, Site
from bdlkit.problems import BayesianModel
from bdlkit.problems.priors import IsotropicGaussian

KIND = "vi"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm


@pytree_dataclass
class MCDropoutState:
    params: TensorTree  # M, the weights before masking
    opt_state: AdamState | SGDState
    mask_seed: int  # step t's masks come from rng.fold_in(mask_seed, t) (and the shard's rank)
    step: int


@dataclass(frozen=True)
class MCDropout(Variational):
    """MAP steps on dropout-masked weights; the masks are the draws (module docstring).

    Args:
        rate: the dropout rate p in [0, 1) of every site; None (default): each dropout
            layer's own p (a network without dropout layers needs a rate > 0, dropping the
            inputs of every Linear layer).
        lr: per-datum learning rate, a float or a schedule of the step.
        optimizer: "adam" or "sgd".
        momentum: SGD's momentum (unused by Adam).
    """

    problem: Problem
    rate: float | None = None
    lr: float | Schedule = 1e-3
    optimizer: Literal["adam", "sgd"] = "adam"
    momentum: float = 0.9
    name: str = "mc_dropout"
    objective: ClassVar[str] = LOG_PROB  # a dropout q has no ELBO estimate of its own
    laplace_start: ClassVar[dict[str, Any]] = {}  # no σ₀: it starts from a point
    guessed_init_std: ClassVar[bool] = False
    _opt: Any = field(init=False, repr=False, compare=False)
    _sites: tuple[Site, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.problem, BayesianModel):
            raise InputError("mc_dropout drops units of a network: it needs a BayesianModel "
                             f"(a module with Linear layers), not a {type(self.problem).__name__}")
        if not callable(self.lr) and not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        kwargs: dict[str, Any] = {"momentum": self.momentum} if self.optimizer == "sgd" else {}
        object.__setattr__(self, "_opt", make_optimizer(self.optimizer, **kwargs))
        object.__setattr__(self, "_sites", find_sites(
            self.problem.module, self.problem.bayesian_names, self.rate))
        if type(self.problem.prior) is not IsotropicGaussian:
            raise InputError("mc_dropout takes the prior in expectation over the masks, which "
                             "it does for an isotropic Gaussian prior only; got "
                             f"{type(self.problem.prior).__name__}")
        if any(site.layer for site in self._sites) and self.problem.buffers == "batch_stats":
            raise InputError("mc_dropout: with buffers='batch_stats' the network runs in train "
                             "mode, so its dropout layers would also drop, unseeded, at every "
                             "prediction; use buffers='frozen' (the default)")

    @property
    def sites(self) -> tuple[Site, ...]:
        """The masked weights and their rates."""
        return self._sites

    def init(self, params: TensorTree | None = None, *,
             generator: torch.Generator) -> MCDropoutState:
        params = detach_clone(self.problem.init_params(generator) if params is None else params)
        seed = int(torch.randint(0, 2 ** 62, (), generator=generator))
        return MCDropoutState(params=params, opt_state=self._opt.init(params), mask_seed=seed,
                              step=0)

    def step(self, state: MCDropoutState, batch: Batch) -> tuple[MCDropoutState, Info]:
        problem = self.problem
        seed = rng.fold_in(state.mask_seed, state.step)
        if problem.reducer is not None:  # data parallel: each shard its own masks
            seed = rng.fold_in(seed, problem.reducer.topology.data_rank)
        with masks_active(problem.module, self._sites, seed):
            value, score = problem.value_and_score(state.params, batch)
        precision = 1.0 / (problem.prior.scale ** 2 * problem.temperature)
        shrink = {site.weight: precision * site.rate / (1.0 - site.rate)
                  for site in self._sites}  # E_z of the prior at W, beyond log p(M)
        per_datum = -1.0 / problem.effective_num_data
        grads = {k: (s - shrink[k] * state.params[k]) * per_datum if k in shrink
                 else s * per_datum for k, s in score.items()}
        params, opt_state = self._opt.apply(grads, state.opt_state, state.params,
                                            resolve(self.lr, state.step))
        new = MCDropoutState(params=params, opt_state=opt_state, mask_seed=state.mask_seed,
                             step=state.step + 1)
        return new, {LOG_PROB: value}

    def params(self, state: MCDropoutState) -> TensorTree:
        """M, the unmasked weights (the dropout network's mean)."""
        return state.params

    def approximation(self, state: MCDropoutState) -> BernoulliDropout:
        return BernoulliDropout(params=state.params, sites=self._sites)


build = builder(MCDropout)

__all__ = ["MCDropout", "MCDropoutState", "build"]


ALGORITHM = MCDropout
