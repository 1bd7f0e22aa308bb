"""Priors over the Bayesian parameters of a network.

:class:`IsotropicGaussian` is ``p(θ) = N(θ; μ0, σ0² I)`` (normalised), with
``μ0 = 0``, the network's initial values (``mean="init"``, e.g. pretrained weights
as in BayesDLL) or any given dict of tensors. Parameters missing from a given mean
dict (a new head, the likelihood's noise) get mean 0.
"""

from __future__ import annotations

import copy
import math

from torch import Tensor

from bdlkit.core.serialization import tensor_digest
from bdlkit.core.value_range import positive_problem


class IsotropicGaussian:
    """``log p(θ) = Σ_j [ -(θ_j - μ0_j)² / (2σ0²) - log σ0 - ½ log 2π ]``."""

    def __init__(self, scale: float = 1.0, mean: str | dict[str, Tensor] | None = None) -> None:
        if problem := positive_problem(scale):
            raise ValueError(f"prior scale {problem}")
        if isinstance(mean, str) and mean != "init":
            raise ValueError(f"prior mean must be None, 'init' or a dict of tensors, got {mean!r}")
        self.scale = float(scale)
        self.mean_spec = mean
        self.means: dict[str, Tensor] = {}
        self._digest = tensor_digest(mean)[:12] if isinstance(mean, dict) else None

    def __repr__(self) -> str:
        """The scale and the mean: ``0``, ``init`` or ``given:<digest>`` (the first 12 hex
        digits of the given tensors' SHA-256, so a run's fingerprint sees new weights)."""
        mean = ("0" if self.mean_spec is None else "init" if self.mean_spec == "init"
                else f"given:{self._digest}")
        return f"IsotropicGaussian(scale={self.scale}, mean={mean})"

    def bind(self, initial: dict[str, Tensor]) -> None:
        """Fix the prior means for the parameters named in ``initial``."""
        if self.mean_spec is None:
            self.means = {}
        elif self.mean_spec == "init":
            self.means = {
                k: v.detach().clone() for k, v in initial.items() if not k.startswith("likelihood.")
            }
        else:
            unknown = set(self.mean_spec) - set(initial)
            if unknown:
                raise ValueError(f"prior mean given for unknown parameters: {sorted(unknown)[:5]}")
            for k, v in self.mean_spec.items():
                if v.shape != initial[k].shape:
                    raise ValueError(
                        f"prior mean for {k!r} has shape {tuple(v.shape)}, "
                        f"the parameter has {tuple(initial[k].shape)}"
                    )
            self.means = {k: v.detach().to(initial[k]) for k, v in self.mean_spec.items()}

    def log_prob(self, params: dict[str, Tensor]) -> Tensor:
        total = 0.0
        count = 0
        for name, theta in params.items():
            diff = theta - self.means[name] if name in self.means else theta
            total = total + (diff**2).sum()
            count += theta.numel()
        return -0.5 * total / self.scale**2 - self._const(count)

    def _const(self, count: int) -> float:
        return count * (math.log(self.scale) + 0.5 * math.log(2 * math.pi))

    def flat_log_prob_and_score(self, theta: Tensor, mean: Tensor | None
                                ) -> tuple[Tensor, Tensor]:
        """``log_prob`` and its gradient ``−(θ − m)/σ0²`` on one flat vector ``theta``
        (``mean``: the means in the same layout, None for zero)."""
        diff = theta if mean is None else theta - mean
        return (-0.5 * diff.dot(diff) / self.scale**2 - self._const(theta.numel()),
                diff * (-1.0 / self.scale**2))


def make_prior(spec: float | IsotropicGaussian) -> IsotropicGaussian:
    """A prior from a scale σ0 (``float``) or an instance."""
    if isinstance(spec, IsotropicGaussian):
        return copy.copy(spec)  # bind() sets per-model means: never share them
    if isinstance(spec, (int, float)):
        return IsotropicGaussian(scale=float(spec))
    raise TypeError(
        f"prior must be a float scale or an IsotropicGaussian, got {type(spec).__name__}"
    )
