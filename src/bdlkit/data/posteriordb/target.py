"""A posteriordb posterior as a :class:`~bdlkit.problems.target.Target` on R^d."""

from __future__ import annotations

import torch
from torch import Tensor

from bdlkit.data.posteriordb.models import PosteriorModel
from bdlkit.problems.target import Reference, Target


class PosteriorDBTarget(Target):
    """The unconstrained log density of a posteriordb posterior (with log-Jacobian).

    ``log_prob(theta)`` is ``log p(y, c(theta)) + log|det J_c(theta)|`` for
    ``theta`` in R^d (see :mod:`bdlkit.data.posteriordb.models` for the constants).

    Attributes:
        model: the :class:`PosteriorModel` (data, layout, constrained log density).
        param_names: reported constrained names, e.g. ``["theta[1]", ..., "mu", "tau"]``.
        reference_draws: constrained reference draws ``(10000, k)`` float64, or ``None``.
        reference_mean: reference mean ``(k,)`` from posteriordb's mean file, or ``None``.
        reference_mcse: its Monte Carlo standard error ``(k,)``, or ``None``.
        reference: ``Reference(draws=unconstrain(reference_draws))`` (unconstrained, so
            generic evaluation code compares against what a sampler on R^d produces).
    """

    def __init__(
        self,
        model: PosteriorModel,
        *,
        reference_draws: Tensor | None = None,
        reference_mean: Tensor | None = None,
        reference_mcse: Tensor | None = None,
        init_scale: float = 1.0,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        self.model = model
        self.param_names = list(model.param_names)
        self.reference_draws = reference_draws
        self.reference_mean = reference_mean
        self.reference_mcse = reference_mcse
        unc = None if reference_draws is None else self.unconstrain(reference_draws).to(dtype)
        super().__init__(
            model.log_prob,
            model.dim,
            model.posterior,
            reference=Reference(draws=unc),
            init_scale=init_scale,
            dtype=dtype,
        )

    def __repr__(self) -> str:
        return f"PosteriorDBTarget(name={self.name!r}, dim={self.dim}, k={len(self.param_names)})"

    def constrain(self, theta: Tensor) -> Tensor:
        """Unconstrained ``(n, d)`` (or ``(d,)``) -> constrained ``(n, k)`` in ``param_names`` order."""
        flat = theta.reshape(-1, self.model.dim)
        return self.model.constrain(flat).reshape(*theta.shape[:-1], len(self.param_names))

    def unconstrain(self, draws: Tensor) -> Tensor:
        """Constrained ``(n, k)`` (or ``(k,)``) in ``param_names`` order -> unconstrained ``(n, d)``."""
        flat = draws.reshape(-1, len(self.param_names))
        return self.model.unconstrain(flat).reshape(*draws.shape[:-1], self.model.dim)

    def log_prob_without_jacobian(self, theta: Tensor) -> Tensor:
        """``log p(y, c(theta))`` without ``log|det J_c|``: *not* a density on R^d (for checks)."""
        flat = theta.reshape(-1, self.model.dim)
        return self.model.log_prob(flat, jacobian=False).reshape(theta.shape[:-1])
