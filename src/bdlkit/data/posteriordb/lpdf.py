"""Full (normalised) log densities used by the posteriordb models, elementwise in torch."""

from __future__ import annotations

import math

import torch
from torch import Tensor

LOG_2PI = math.log(2 * math.pi)
LOG2 = math.log(2.0)


def normal_lpdf(x: Tensor, mu: Tensor | float, sigma: Tensor | float) -> Tensor:
    """Elementwise ``log N(x | mu, sigma^2) = -((x-mu)/sigma)^2/2 - log sigma - log(2 pi)/2``."""
    z = (x - mu) / sigma
    log_sigma = torch.log(sigma) if isinstance(sigma, Tensor) else math.log(sigma)
    return -0.5 * z * z - log_sigma - 0.5 * LOG_2PI


def cauchy_lpdf(x: Tensor, mu: float, scale: float) -> Tensor:
    """Elementwise ``log Cauchy(x | mu, s) = -log(pi s) - log1p(((x-mu)/s)^2)``."""
    z = (x - mu) / scale
    return -math.log(math.pi * scale) - torch.log1p(z * z)


def student_t_lpdf(x: Tensor, nu: float, mu: float, scale: float) -> Tensor:
    """Elementwise Student-t: ``lgG((nu+1)/2) - lgG(nu/2) - log(sqrt(nu pi) s)
    - (nu+1)/2 log1p(z^2/nu)`` with ``z = (x-mu)/s``."""
    z = (x - mu) / scale
    const = math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2) - 0.5 * math.log(nu * math.pi)
    return const - math.log(scale) - 0.5 * (nu + 1) * torch.log1p(z * z / nu)
