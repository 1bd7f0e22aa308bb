"""MC dropout (Gal & Ghahramani, ICML 2016): dropout training, dropout kept on to predict.

Y. Gal, Z. Ghahramani, "Dropout as a Bayesian Approximation: Representing Model
Uncertainty in Deep Learning"; derivation in ``docs/methods/mc_dropout.md``. The family
q(W) (:mod:`bdlkit.families.dropout`) drops the input columns of chosen ``Linear``
weights M at rate p (:mod:`.dropout_sites`: the network's dropout layers, or every
``Linear`` at ``rate``). Each step draws one mask z per site and takes MAP's step on the
per-datum loss at the masked weights (chain rule through W = M·diag(z)/(1 − p))::

    W_t = M_t · diag(z_t)/(1 − p),                 z_tj ~ Bernoulli(1 − p)
    g_t = −∇_M value(W_t, B_t) / N_eff  =  −(∇_W value(W_t, B_t) / N_eff) · z_t/(1 − p)
    M_{t+1} = M_t + optimizer_update(g_t)

an unbiased gradient of Gal's objective E_z[−log p(D | W)] + KL: the problem's Gaussian
prior N(0, σ0²) evaluated at W is, in expectation, ‖M‖²/(2σ0²(1 − p)), Gal's weight decay
l²(1 − p)/2·‖M'‖² in the inverted-dropout scaling M' = M/(1 − p) with prior length-scale
l = 1/σ0. So the weight decay comes from the prior (``prior=σ0``), nothing else.

Regression noise: the likelihood says it, as for every method (``gaussian`` learns σ with
the weights, ``gaussian:<σ>`` fixes it; Gal's τ = 1/σ² chosen on validation is a sweep over
fixed σ: ``bdlkit bench uci`` does it). Prediction: each draw of the result is one mask of
every site (one forward pass per draw); ``Result.predict(x, num_samples=T)`` averages T.

At rate 0 every mask keeps everything and the step is MAP's, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch

from bdlkit.algorithms.options import builder
from bdlkit.algorithms.vi.dropout_sites import check_rate, find_sites
from bdlkit.core import rng
from bdlkit.core.errors import InputError
from bdlkit.core.optim import AdamState, SGDState, make_optimizer
from bdlkit.core.protocol import LOG_PROB, Batch, Info, Problem, Variational
from bdlkit.core.schedules import Schedule, resolve
from bdlkit.core.tree import TensorTree, detach_clone, device_of, pytree_dataclass, tree_map
from bdlkit.families.dropout import BernoulliDropout, Site, apply_scales, column_scales
from bdlkit.problems import BayesianModel

KIND = "vi"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm


@pytree_dataclass
class MCDropoutState:
    params: TensorTree  # M, the weights before masking
    opt_state: AdamState | SGDState
    rng_state: Any  # the mask generator's state
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
        check_rate(self.rate)
        if not callable(self.lr) and not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        kwargs: dict[str, Any] = {"momentum": self.momentum} if self.optimizer == "sgd" else {}
        object.__setattr__(self, "_opt", make_optimizer(self.optimizer, **kwargs))
        object.__setattr__(self, "_sites", find_sites(
            self.problem.module, self.problem.bayesian_names, self.rate))

    @property
    def sites(self) -> tuple[Site, ...]:
        """The masked weights and their rates."""
        return self._sites

    def init(self, params: TensorTree | None = None, *,
             generator: torch.Generator) -> MCDropoutState:
        params = detach_clone(self.problem.init_params(generator) if params is None else params)
        masks = rng.split(generator, device=device_of(params))
        return MCDropoutState(params=params, opt_state=self._opt.init(params),
                              rng_state=rng.state_of(masks), step=0)

    def step(self, state: MCDropoutState, batch: Batch) -> tuple[MCDropoutState, Info]:
        gen = rng.from_state(state.rng_state, device=device_of(state.params))
        scales = column_scales(state.params, self._sites, gen)
        value, score = self.problem.value_and_score(apply_scales(state.params, scales), batch)
        per_datum = -1.0 / self.problem.effective_num_data
        grads = {k: s * per_datum * scales[k] if k in scales else s * per_datum
                 for k, s in score.items()}
        params, opt_state = self._opt.apply(grads, state.opt_state, state.params,
                                            resolve(self.lr, state.step))
        new = MCDropoutState(params=params, opt_state=opt_state, rng_state=rng.state_of(gen),
                             step=state.step + 1)
        return new, {LOG_PROB: value}

    def params(self, state: MCDropoutState) -> TensorTree:
        """M, the unmasked weights (the dropout network's mean)."""
        return state.params

    def approximation(self, state: MCDropoutState) -> BernoulliDropout:
        return BernoulliDropout(params=tree_map(lambda p: p, state.params), sites=self._sites)


build = builder(MCDropout)

__all__ = ["MCDropout", "MCDropoutState", "build"]


ALGORITHM = MCDropout
