"""MC dropout's approximate posterior: Bernoulli-masked weights (Gal & Ghahramani 2016).

Dropout at rate p on the input of a ``Linear`` layer with weight M (out × in) is the
layer with the random weight

    W = M · diag(z) / (1 − p),      z_j ~ Bernoulli(1 − p)  independently per input j

(inverted dropout: the kept columns are scaled so E[W] = M). Gal & Ghahramani read this
as a variational family q(W) over the weights; its draws are weight matrices with zeroed
columns, and every other parameter (biases, σ of a learned Gaussian noise, layers no
dropout feeds) is a point mass at its value. A draw is therefore an ordinary parameter
dict, and the library's predictive, intervals and ArviZ export use it as they use any
method's draws. One draw drops the same columns for every input row of a batch (a
weight-space draw); the per-point predictive, the mixture over masks, is the one
per-example masks give.

Where the dropout sits: :class:`Site` names a Linear weight and its rate; which weights
those are is found by :func:`bdlkit.algorithms.vi.dropout_sites.find_sites`.

q has no density in weight space (it is a mixture of point masses on subspaces), so
``log_prob`` refuses; what needs it (an ELBO estimate, a KL) is not defined for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import torch
from torch import Tensor

from bdlkit.core import rng
from bdlkit.core.tree import TensorTree, stack


@dataclass(frozen=True)
class Site:
    """The input columns of the weight ``weight`` (a ``Linear``'s, out × in) are dropped
    at rate ``rate`` in [0, 1); ``layer`` is the ``nn.Dropout`` that feeds it (None where
    the network has no dropout layers: training then drops the inputs by a pre-hook)."""

    weight: str
    rate: float
    layer: str | None = None


def keep_threshold(rate: float) -> float:
    """c with P(ε > c) = 1 − ``rate`` for ε ~ N(0, 1): a column is kept when its normal
    exceeds c (−∞ at rate 0: every column kept)."""
    return -math.inf if rate == 0 else NormalDist().inv_cdf(rate)


def column_scales(params: dict[str, Tensor], sites: tuple[Site, ...],
                  generator: torch.Generator | rng.NoiseTape) -> dict[str, Tensor]:
    """One draw of z/(1 − p) per site: ``{weight name: (in,) tensor}`` of 0 and 1/(1 − p)."""
    out = {}
    for site in sites:
        w = params[site.weight]
        eps = rng.normal((w.shape[-1],), generator, w.dtype, w.device)
        keep = (eps > keep_threshold(site.rate)).to(w.dtype)
        out[site.weight] = keep * (1.0 / (1.0 - site.rate))
    return out


def apply_scales(params: dict[str, Tensor], scales: dict[str, Tensor]) -> dict[str, Tensor]:
    """``params`` with each masked weight's columns multiplied by its scales."""
    return {k: v * scales[k] if k in scales else v for k, v in params.items()}


@dataclass(frozen=True)
class BernoulliDropout:
    """q(θ): the masked weights of ``sites`` around ``params`` (module docstring).

    Args:
        params: M, the trained parameters (a dict of named tensors).
        sites: the weights whose input columns are dropped, with their rates.
    """

    params: dict[str, Tensor]
    sites: tuple[Site, ...]

    def sample(self, n: int, generator: torch.Generator) -> TensorTree:
        """``n`` draws, stacked along a new leading dimension."""
        return stack([apply_scales(self.params, column_scales(self.params, self.sites,
                                                                generator))
                      for _ in range(n)])

    @property
    def mean(self) -> dict[str, Tensor]:
        """E_q[θ] = M (inverted dropout keeps the mean)."""
        return self.params

    def log_prob(self, theta: TensorTree) -> Tensor:
        raise NotImplementedError(
            "MC dropout's q (Bernoulli-masked weights) has no density in weight space; "
            "use its draws (sample) for predictions, intervals and ArviZ")


__all__ = ["BernoulliDropout", "Site", "apply_scales", "column_scales", "keep_threshold"]
