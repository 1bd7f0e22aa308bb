"""What the SG-MCMC samplers share: one convention for step size, temperature and N.

bdlkit's convention (``docs/conventions.md``; ``docs/sgmcmc.md``): every SG-MCMC
sampler is written in terms of the minibatch gradient of the *per-datum, untempered* loss

    g(θ) = −T · ŝ_T(θ) / N  =  ∇[ −mean_{i∈B} log p(y_i | x_i, θ) − log p(θ)/N ]

(ŝ_T = the problem's tempered score, T its temperature, N = ``num_data``; a Target has
N = T = 1) and injects Gaussian noise of variance ``2 · lr · friction · T / N``. So ``lr``
is the step size of plain SGD on the mean training loss, whatever N and T are, and a
cold posterior (T < 1) only shrinks the noise: the step that is stable for SGD is stable
for the sampler. In the potential U_T = −log π_T this is Euler–Maruyama with step
η = lr · T / N. The limit T → 0 is SGD (with momentum for SGHMC).

The temperature lives in the problem only (``BayesianModel(temperature=...)``,
``bdlkit fit --temperature``): samplers read it from there and never take their own.
"""

from __future__ import annotations

import functools
import math
import numbers

import torch
from torch import Tensor

from bdlkit.core import rng
from bdlkit.core.protocol import Problem
from bdlkit.core.tree import TensorTree, detach_clone, device_of, randn_like, tree_map

#: The default step on the mean loss of the SG-MCMC samplers on a regression model (a
#: Gaussian likelihood): sgld's ``lr``, the cyclical samplers' peak ``lr`` and sghmc's
#: ``lr/α`` (``lr`` 0.002 at α = 0.1), against 0.1 (0.05 for csgld) on classification.
#: The per-datum loss has curvature 1/σ² in the mean output, which grows without bound as a
#: learned or heteroscedastic σ shrinks towards the data's noise (classification's is at
#: most 1/2 in the logits); at 0.1 sgld and csghmc diverged and sghmc's chain jumped to
#: RMSEs above the mean predictor's on a 300-point regression, and on UCI yacht at 300
#: epochs sghmc's test RMSE was 2.11 against 1.01 at 0.02 (``docs/methods/index.md``).
REGRESSION_LR = 0.02
#: dtypes whose product with a 0-d tensor of their own dtype is that with a Python float
_EXACT_DTYPES = (torch.float32, torch.float64)


class LearnedVersion:
    """Mixin of the samplers with meta-learned networks (L2E, Meta-SGMCMC): their update
    rule's ``VERSION`` carries the meta-parameters' digest (the ``meta_digest`` field)."""

    meta_digest: str

    @property
    def VERSION(self) -> str:  # noqa: N802 - the runner's name for the update rule's version
        """Version 2 of the update (a network's noise drawn in chunks, bdlkit.core.noise),
        with the meta-parameters' digest — a checkpoint written with other meta-parameters
        (a re-trained file, another path) or by version 1 is not resumed."""
        return f"2+{self.meta_digest}"


def chain_start(problem: Problem, params: TensorTree | None,
                generator: torch.Generator) -> tuple[TensorTree, torch.Generator]:
    """A chain's start: its own copy of ``params`` (default ``problem.init_params``) and the
    generator of its noise, split from ``generator`` on the parameters' device."""
    params = detach_clone(problem.init_params(generator) if params is None else params)
    return params, rng.split(generator, device=device_of(params))


def loss_gradient(problem: Problem, score: TensorTree) -> TensorTree:
    """``g = −T·ŝ/N``: the per-datum untempered loss gradient from the problem's score."""
    scale = -float(problem.temperature) / problem.effective_num_data
    return tree_map(lambda s: scale * s, score)


def noise_variance(lr: float, friction: float, temperature: float, num_data: int) -> float:
    """``2 · lr · friction · T / N``: the injected noise variance per coordinate and step."""
    return 2.0 * lr * friction * temperature / num_data


def add_noise(tree: TensorTree, variance: float | TensorTree,
              generator: torch.Generator) -> TensorTree:
    """``tree + sqrt(variance) · ξ`` with ξ ~ N(0, I) drawn from ``generator`` (always drawn,
    so the noise stream does not depend on the variance; a zero variance adds exact zeros).
    The sum is written into the fresh noise buffer: one allocation, ``tree`` untouched."""
    noise = randn_like(tree, generator)
    if isinstance(variance, float):
        sd = math.sqrt(variance)
        return tree_map(lambda t, z: z.mul_(factor(sd, z)).add_(t), tree, noise)
    return tree_map(lambda t, v, z: z.mul_(v.clamp_min(0).sqrt()).add_(t), tree, variance,
                    noise)


@functools.lru_cache(maxsize=64)
def _scalar_tensor(value: float, dtype: torch.dtype) -> Tensor:
    return torch.scalar_tensor(value, dtype=dtype)


def factor(value: float, like: Tensor) -> float | Tensor:
    """``value`` as the factor of an in-place product with ``like``: on a CPU float32 or
    float64 tensor a 0-d tensor of its dtype (cached; the same product bit for bit,
    without the cast of a Python float that costs a small tensor's ``mul_`` twice its
    time); else the float itself (a 0-d half would round ``value`` first).

    Args:
        value: the factor, e.g. the noise's standard deviation.
        like: the tensor it multiplies.
    """
    if like.is_cpu and like.dtype in _EXACT_DTYPES:
        return _scalar_tensor(value, like.dtype)
    return value


def descend(params: TensorTree, score: TensorTree, lr: float, problem: Problem) -> TensorTree:
    """``θ − lr · g`` with ``g = −T·ŝ/N`` (:func:`loss_gradient`) in one fused operation."""
    scale = lr * float(problem.temperature) / problem.effective_num_data
    return tree_map(lambda p, s: torch.add(p, s, alpha=scale), params, score)


def check_rate(name: str, value: object) -> None:
    """A constant rate must be a real number > 0 (a schedule is checked when called)."""
    if callable(value):
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(f"{name} must be > 0 or a schedule, got {value!r}")


__all__ = ["REGRESSION_LR", "LearnedVersion", "add_noise", "check_rate", "descend",
           "loss_gradient", "noise_variance"]
