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
