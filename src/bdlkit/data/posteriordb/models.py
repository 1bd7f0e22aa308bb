"""The posteriordb log densities, re-implemented in torch from the Stan programs.

Every model maps a batch of unconstrained parameters ``theta`` ``(n, d)``, laid out in
the order of the Stan ``parameters`` block, to::

    log p(theta) = log p(y | c(theta)) + log p(c(theta)) + log |det J_c(theta)|,

where ``c`` constrains each block (see :mod:`.transforms`). Constants: **all kept**.
Every density term is the full normalised lpdf (Stan's ``y ~ dist`` drops them), and
half-line priors on ``<lower=0>`` scales carry the truncation term ``log 2`` (the
``- student_t_lccdf(0 | ...)`` of diamonds), as does the ordered prior of
low_dim_gauss_mix (``log 2!``). With a proper prior, ``exp(log_prob)`` is the exact
joint density ``p(y, theta)`` on R^d, so ``log_prob - log p(y)`` is the normalised
log posterior. kidiq's ``beta`` and wells' ``beta`` have Stan's implicit flat prior.

Data are stored as float64 tensors and cast to ``theta.dtype`` on each call;
everything is vectorised over the batch and the data (no Python loop over points).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from bdlkit.data.posteriordb.lpdf import LOG2, LOG_2PI, cauchy_lpdf, normal_lpdf, student_t_lpdf
from bdlkit.data.posteriordb.transforms import (
    Block,
    Identity,
    Ordered,
    ParamLayout,
    Positive,
    UnitInterval,
)


def _tensor(value: Any) -> Tensor:
    return torch.as_tensor(value, dtype=torch.float64)


class PosteriorModel:
    """Base class: a :class:`ParamLayout` plus a log density on the constrained space.

    Subclasses set ``posterior`` (the posteriordb name) and ``layout``, store their data
    in ``__init__`` and implement :meth:`log_density`. By default the reported
    (constrained) quantities are the layout blocks in order; override
    :meth:`constrain`, :meth:`unconstrain` and :attr:`param_names` when they differ.
    """

    posterior: str = ""
    layout: ParamLayout

    @property
    def dim(self) -> int:
        """Number of unconstrained coordinates d."""
        return self.layout.dim

    @property
    def param_names(self) -> list[str]:
        """Names of the reported constrained quantities, as in the reference draws."""
        return self.layout.names

    def log_density(self, p: dict[str, Tensor], theta: Tensor) -> Tensor:
        """``log p(y | p) + log p(p)`` on the constrained blocks ``p``; ``(n,)``."""
        raise NotImplementedError

    def log_prob(self, theta: Tensor, jacobian: bool = True) -> Tensor:
        """``log_density(c(theta)) + log|det J_c(theta)|`` (omit the last if not ``jacobian``)."""
        params, logdet = self.layout.forward(theta)
        out = self.log_density(params, theta)
        return out + logdet if jacobian else out

    def constrain(self, theta: Tensor) -> Tensor:
        """Unconstrained ``(n, d)`` -> reported constrained draws ``(n, k)``."""
        params, _ = self.layout.forward(theta)
        return torch.cat([params[b.name] for b in self.layout.blocks], dim=1)

    def unconstrain(self, draws: Tensor) -> Tensor:
        """Reported constrained draws ``(n, k)`` -> unconstrained ``(n, d)``."""
        parts = torch.split(draws, [b.size for b in self.layout.blocks], dim=1)
        return self.layout.inverse({b.name: x for b, x in zip(self.layout.blocks, parts)})


class EightSchoolsNoncentered(PosteriorModel):
    """``theta_trans ~ N(0, 1)``, ``y_j ~ N(theta_trans_j tau + mu, sigma_j)``,
    ``mu ~ N(0, 5)``, ``tau ~ half-Cauchy(0, 5)``.

    Unconstrained: ``(theta_trans[8], mu, log tau)``. Reported (posterior JSON order):
    ``(theta[8], mu, tau)`` with ``theta = theta_trans tau + mu``.
    """

    posterior = "eight_schools-eight_schools_noncentered"

    def __init__(self, data: dict[str, Any]) -> None:
        self.J = int(data["J"])
        self.y, self.sigma = _tensor(data["y"]), _tensor(data["sigma"])
        self.layout = ParamLayout(
            [
                Block("theta_trans", self.J, Identity(), True),
                Block("mu", 1, Identity()),
                Block("tau", 1, Positive()),
            ]
        )

    @property
    def param_names(self) -> list[str]:
        return [f"theta[{j + 1}]" for j in range(self.J)] + ["mu", "tau"]

    def log_density(self, p: dict[str, Tensor], theta: Tensor) -> Tensor:
        y, sigma = self.y.to(theta.dtype), self.sigma.to(theta.dtype)
        tt, mu, tau = p["theta_trans"], p["mu"], p["tau"]
        out = normal_lpdf(tt, 0.0, 1.0).sum(1) + normal_lpdf(y, tt * tau + mu, sigma).sum(1)
        return out + normal_lpdf(mu[:, 0], 0.0, 5.0) + LOG2 + cauchy_lpdf(tau[:, 0], 0.0, 5.0)

    def constrain(self, theta: Tensor) -> Tensor:
        p, _ = self.layout.forward(theta)
        return torch.cat([p["theta_trans"] * p["tau"] + p["mu"], p["mu"], p["tau"]], dim=1)

    def unconstrain(self, draws: Tensor) -> Tensor:
        th, mu, tau = draws[:, : self.J], draws[:, self.J : self.J + 1], draws[:, self.J + 1 :]
        return self.layout.inverse({"theta_trans": (th - mu) / tau, "mu": mu, "tau": tau})


class BLR(PosteriorModel):
    """sblrc-blr: ``beta ~ N(0, 10)``, ``sigma ~ half-N(0, 10)``, ``y ~ N(X beta, sigma)``."""

    posterior = "sblrc-blr"

    def __init__(self, data: dict[str, Any]) -> None:
        self.X, self.y = _tensor(data["X"]), _tensor(data["y"])
        d = int(data["D"])
        self.layout = ParamLayout(
            [Block("beta", d, Identity(), True), Block("sigma", 1, Positive())]
        )

    def log_density(self, p: dict[str, Tensor], theta: Tensor) -> Tensor:
        X, y = self.X.to(theta.dtype), self.y.to(theta.dtype)
        beta, sigma = p["beta"], p["sigma"]
        prior = normal_lpdf(beta, 0.0, 10.0).sum(1) + normal_lpdf(sigma[:, 0], 0.0, 10.0) + LOG2
        return prior + normal_lpdf(y, beta @ X.T, sigma).sum(1)


class KidscoreMomiq(PosteriorModel):
    """kidiq: flat ``beta``, ``sigma ~ half-Cauchy(0, 2.5)``,
    ``kid_score ~ N(beta_1 + beta_2 mom_iq, sigma)``."""

    posterior = "kidiq-kidscore_momiq"

    def __init__(self, data: dict[str, Any]) -> None:
        self.kid, self.iq = _tensor(data["kid_score"]), _tensor(data["mom_iq"])
        self.layout = ParamLayout(
            [Block("beta", 2, Identity(), True), Block("sigma", 1, Positive())]
        )

    def log_density(self, p: dict[str, Tensor], theta: Tensor) -> Tensor:
        kid, iq = self.kid.to(theta.dtype), self.iq.to(theta.dtype)
        beta, sigma = p["beta"], p["sigma"]
        mean = beta[:, :1] + beta[:, 1:] * iq
        return LOG2 + cauchy_lpdf(sigma[:, 0], 0.0, 2.5) + normal_lpdf(kid, mean, sigma).sum(1)


class Diamonds(PosteriorModel):
    """brms diamonds: ``b ~ N(0, 1)``, ``Intercept ~ t_3(8, 10)``, ``sigma ~ half-t_3(0, 10)``,
    ``Y ~ N(Intercept + Xc b, sigma)`` with ``Xc`` = ``X[:, 1:]`` column-centred.

    The Gaussian likelihood uses exact sufficient statistics (float64, once):
    ``sum_i (Y_i - a - Xc_i b)^2 = RSS_0 + (b - b_ols)' Xc'Xc (b - b_ols) + N (a - mean(Y))^2``,
    valid because the columns of ``Xc`` sum to 0 and ``Xc'(Yc - Xc b_ols) = 0``. This is
    O(K^2) per draw instead of O(N K) and has no cancellation.
    """

    posterior = "diamonds-diamonds"

    def __init__(self, data: dict[str, Any]) -> None:
        X, Y = _tensor(data["X"]), _tensor(data["Y"])
        self.Xc = X[:, 1:] - X[:, 1:].mean(0)
        self.Y, self.N = Y, Y.shape[0]
        self.y_mean = Y.mean()
        yc = Y - self.y_mean
        self.b_ols = torch.linalg.lstsq(self.Xc, yc[:, None]).solution[:, 0]
        self.rss0 = ((yc - self.Xc @ self.b_ols) ** 2).sum()
        self.gram = self.Xc.T @ self.Xc
        kc = self.Xc.shape[1]
        self.layout = ParamLayout(
            [
                Block("b", kc, Identity(), True),
                Block("Intercept", 1, Identity()),
                Block("sigma", 1, Positive()),
            ]
        )

    def sum_of_squares(self, b: Tensor, intercept: Tensor) -> Tensor:
        """``sum_i (Y_i - intercept - Xc_i b)^2`` via the sufficient statistics; ``(n,)``."""
        dt = b.dtype
        delta = b - self.b_ols.to(dt)
        quad = ((delta @ self.gram.to(dt)) * delta).sum(1)
        return self.rss0.to(dt) + quad + self.N * (intercept - self.y_mean.to(dt)) ** 2

    def log_density(self, p: dict[str, Tensor], theta: Tensor) -> Tensor:
        b, a, sigma = p["b"], p["Intercept"][:, 0], p["sigma"][:, 0]
        prior = normal_lpdf(b, 0.0, 1.0).sum(1) + student_t_lpdf(a, 3.0, 8.0, 10.0)
        prior = prior + student_t_lpdf(sigma, 3.0, 0.0, 10.0) + LOG2  # - lccdf(0) = log 2
        ss = self.sum_of_squares(b, a)
        loglik = -0.5 * ss / sigma**2 - self.N * (torch.log(sigma) + 0.5 * LOG_2PI)
        return prior + loglik

    def log_likelihood_direct(self, theta: Tensor) -> Tensor:
        """The likelihood as Stan writes it, ``sum_i log N(Y_i | a + Xc_i b, sigma)`` (for tests)."""
        p, _ = self.layout.forward(theta)
        mean = p["Intercept"] + p["b"] @ self.Xc.to(theta.dtype).T
        return normal_lpdf(self.Y.to(theta.dtype), mean, p["sigma"]).sum(1)


class ArK(PosteriorModel):
    """AR(K): ``alpha, beta_k ~ N(0, 10)``, ``sigma ~ half-Cauchy(0, 2.5)``,
    ``y_t ~ N(alpha + sum_k beta_k y_{t-k}, sigma)`` for ``t = K+1..T``."""

    posterior = "arK-arK"

    def __init__(self, data: dict[str, Any]) -> None:
        y = _tensor(data["y"])
        k, t = int(data["K"]), int(data["T"])
        # lags[i, j] = y[t_i - (j+1)] for t_i = K..T-1 (0-based): column j is lag j+1
        self.lags = torch.stack([y[k - j - 1 : t - j - 1] for j in range(k)], dim=1)
        self.target = y[k:]
        self.layout = ParamLayout(
            [
                Block("alpha", 1, Identity()),
                Block("beta", k, Identity(), True),
                Block("sigma", 1, Positive()),
            ]
        )

    def log_density(self, p: dict[str, Tensor], theta: Tensor) -> Tensor:
        lags, target = self.lags.to(theta.dtype), self.target.to(theta.dtype)
        alpha, beta, sigma = p["alpha"], p["beta"], p["sigma"]
        prior = normal_lpdf(alpha[:, 0], 0.0, 10.0) + normal_lpdf(beta, 0.0, 10.0).sum(1)
        prior = prior + LOG2 + cauchy_lpdf(sigma[:, 0], 0.0, 2.5)
        return prior + normal_lpdf(target, alpha + beta @ lags.T, sigma).sum(1)


class LowDimGaussMix(PosteriorModel):
    """Two-component mixture: ``mu`` ordered ``~ N(0, 2)``, ``sigma_k ~ half-N(0, 2)``,
    ``theta ~ Beta(5, 5)``, ``y_n ~ theta N(mu_1, sigma_1) + (1 - theta) N(mu_2, sigma_2)``.

    ``log_mix`` is the two-term logsumexp ``logaddexp`` over the components, for all
    draws and data points at once; ``log theta = -softplus(-x)`` and
    ``log(1 - theta) = -softplus(x)`` are taken from the unconstrained ``x`` (stable).
    """

    posterior = "low_dim_gauss_mix-low_dim_gauss_mix"

    def __init__(self, data: dict[str, Any]) -> None:
        self.y = _tensor(data["y"])
        self.layout = ParamLayout(
            [
                Block("mu", 2, Ordered(), True),
                Block("sigma", 2, Positive(), True),
                Block("theta", 1, UnitInterval()),
            ]
        )
        self.log_beta_55 = math.lgamma(5) * 2 - math.lgamma(10)

    def log_density(self, p: dict[str, Tensor], theta: Tensor) -> Tensor:
        y = self.y.to(theta.dtype)
        mu, sigma = p["mu"], p["sigma"]
        x = self.layout.split(theta)["theta"][:, 0]
        log_w = torch.stack([-F.softplus(-x), -F.softplus(x)], dim=1)  # (n, 2)
        prior = normal_lpdf(mu, 0.0, 2.0).sum(1) + math.log(2.0)  # ordered: 2! orderings
        prior = prior + (normal_lpdf(sigma, 0.0, 2.0) + LOG2).sum(1)
        prior = prior + 4.0 * (log_w[:, 0] + log_w[:, 1]) - self.log_beta_55
        # log w_k + log N(y_n | mu_k, sigma_k), with the per-(draw, k) terms folded first
        offset = log_w - torch.log(sigma) - 0.5 * LOG_2PI  # (n, 2)
        z = (y[None, :] - mu[:, :1]) / sigma[:, :1], (y[None, :] - mu[:, 1:]) / sigma[:, 1:]
        a = offset[:, :1] - 0.5 * z[0] * z[0]  # (n, N)
        b = offset[:, 1:] - 0.5 * z[1] * z[1]
        return prior + torch.logaddexp(a, b).sum(1)


class WellsDist(PosteriorModel):
    """wells: flat ``beta``, ``switched_i ~ Bernoulli(logit^-1(beta_1 + beta_2 dist_i))``;
    ``log p = sum_i s_i eta_i - softplus(eta_i)``."""

    posterior = "wells_data-wells_dist"

    def __init__(self, data: dict[str, Any]) -> None:
        self.switched, self.dist = _tensor(data["switched"]), _tensor(data["dist"])
        self.layout = ParamLayout([Block("beta", 2, Identity(), True)])

    def log_density(self, p: dict[str, Tensor], theta: Tensor) -> Tensor:
        s, dist = self.switched.to(theta.dtype), self.dist.to(theta.dtype)
        eta = p["beta"][:, :1] + p["beta"][:, 1:] * dist
        return (s * eta - F.softplus(eta)).sum(1)


MODELS: dict[str, type[PosteriorModel]] = {
    m.posterior: m
    for m in (EightSchoolsNoncentered, BLR, KidscoreMomiq, Diamonds, ArK, LowDimGaussMix, WellsDist)
}
