"""The two score oracles: ``value, score = oracle(params, batch)``.

- :func:`functional_value_and_score` (default): ``torch.func.grad_and_value`` over
  a pure function of the parameters (``functional_call``); nothing is mutated.
- :func:`module_value_and_score`: writes θ into the module's parameters, runs the
  ordinary forward and ``backward()``, and reads ``.grad``. This is the path that
  composes with DDP/FSDP, activation checkpointing, AMP and models that
  ``torch.func`` cannot trace. It overwrites the module's parameter values.

Both return the same numbers (``tests/problems/test_oracles.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from bdlkit.problems.precision import autocast_call

if TYPE_CHECKING:
    from bdlkit.problems.bayesian_model import BayesianModel

Params = dict[str, Tensor]


def functional_value_and_score(
    log_density: Callable[[Params, Any], Tensor], params: Params, batch: Any
) -> tuple[Tensor, Params]:
    """Value and gradient of ``log_density(params, batch)`` by ``torch.func``."""
    score, value = torch.func.grad_and_value(log_density)(params, batch)
    return value.detach(), score


def module_value_and_score(
    model: BayesianModel, params: Params, batch: tuple[Tensor, Tensor]
) -> tuple[Tensor, Params]:
    """Value and gradient by writing θ into ``model.module`` and calling ``backward()``."""
    x, y = batch
    module = model.module
    net, lik = model.split(params)
    named = dict(module.named_parameters())
    saved_flags = {n: p.requires_grad for n, p in named.items()}
    saved_buffers = (
        {n: b.detach().clone() for n, b in module.named_buffers()}
        if model.buffers == "batch_stats"
        else None
    )
    try:
        with torch.no_grad():
            for name, p in named.items():
                if name in net:
                    p.copy_(net[name])
                p.requires_grad_(name in net)
                p.grad = None
        lik_leaves = {k: v.detach().clone().requires_grad_(True) for k, v in lik.items()}
        with torch.enable_grad():
            outputs = autocast_call(lambda: module(x), model.precision, x.device.type,
                                    model.param_dtype)
            loglik = model.likelihood.log_prob(outputs, y, lik_leaves)
            current = {n: named[n] for n in net} | lik_leaves
            value = model.combine(loglik.sum(), loglik.shape[0], model.log_prior(current))
            value.backward()
        score = {n: named[n].grad.detach().clone() for n in net}
        score.update({k: v.grad.detach() for k, v in lik_leaves.items()})
        return value.detach(), {k: score[k] for k in params}
    finally:
        for name, p in named.items():
            p.grad = None
            p.requires_grad_(saved_flags[name])
        if saved_buffers is not None:
            with torch.no_grad():
                for n, b in module.named_buffers():
                    b.copy_(saved_buffers[n])


class FlatModuleOracle:
    """The module oracle on one flat θ, for flat storage (:mod:`bdlkit.core.flat`).

    ``value, score = oracle(theta (d,), batch)`` with ``score`` one vector (d,):

    * the module's own forward and ``torch.autograd.grad`` of the summed log likelihood
      with respect to its parameters, which for the call *are* views of θ (``p.data``
      swapped in, as ``torch.nn.utils.vector_to_parameters`` does, and swapped back after,
      so the module is left as it was and nothing is copied);
    * the isotropic Gaussian prior in closed form on the flat vector,
      ``∇log p(θ) = −(θ − m)/σ0²``: one fused operation instead of a graph per tensor.

    Same numbers as :func:`functional_value_and_score` to float rounding (tested). Built
    by :meth:`bdlkit.BayesianModel.flat_oracle` only where it applies: every random tensor a
    parameter of the module that requires grad (no likelihood parameters), frozen
    buffers (no batch statistics to restore) and an isotropic Gaussian prior.
    """

    def __init__(self, model: BayesianModel, names: tuple[str, ...], sizes: tuple[int, ...],
                 shapes: tuple[tuple[int, ...], ...]) -> None:
        named = dict(model.module.named_parameters())
        self.model = model
        self.params = [named[n] for n in names]
        self.sizes, self.shapes = list(sizes), shapes
        means = model.prior.means
        first = self.params[0]
        self.mean = None if not means else torch.cat([
            (means[n] if n in means else torch.zeros(s, dtype=first.dtype, device=first.device))
            .reshape(-1) for n, s in zip(names, shapes, strict=True)])

    def __call__(self, theta: Tensor, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        x, y = batch
        model = self.model
        if model.reducer is not None and y.shape[0] == 0:  # an empty shard weighs nothing
            return model.reducer(theta.new_zeros(()), torch.zeros_like(theta), 0)
        originals = [p.data for p in self.params]
        try:
            for p, part, shape in zip(self.params, theta.split(self.sizes), self.shapes,
                                      strict=True):
                p.data = part.view(shape)
            with torch.enable_grad():
                outputs = autocast_call(lambda: model.module(x), model.precision,
                                        x.device.type, model.param_dtype)
                loglik = model.likelihood.log_prob(outputs, y, {}).sum()
                grads = torch.autograd.grad(loglik, self.params, allow_unused=True,
                                            materialize_grads=True)  # unused: zeros
        finally:
            for p, original in zip(self.params, originals, strict=True):
                p.data = original
        n, t, batch_size = model.effective_num_data, model.temperature, y.shape[0]
        log_prior, prior_score = model.prior.flat_log_prob_and_score(theta, self.mean)
        score = torch.cat([g.reshape(-1) for g in grads]).mul_(n / batch_size / t)
        score.add_(prior_score, alpha=1.0 / t)
        value = model.combine(loglik.detach(), batch_size, log_prior)
        if model.reducer is not None:  # data parallel: this shard -> the whole minibatch
            return model.reducer(value, score, batch_size)
        return value, score
