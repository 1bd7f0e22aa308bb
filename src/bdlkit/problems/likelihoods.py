"""Observation models p(y | f(x; θ)) for network posteriors.

Each likelihood turns network outputs into per-example log likelihoods, checks
labels before training, and gives the per-draw predictive used by Bayesian model
averaging. A likelihood may own extra parameters (the learned Gaussian noise); they
are inferred with the network weights under the names ``likelihood.<name>``.

Supported: :class:`Categorical` (logits ``(B, C)``), :class:`Bernoulli` (logits
``(B,)`` or ``(B, 1)``), :class:`Gaussian` with fixed, learned or heteroscedastic
noise. Their names (:data:`NAMES`, :func:`make_likelihood`) are the one vocabulary of the
Python API, the command line and ``config.yaml``: ``gaussian`` is a learned σ everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from bdlkit.core.value_range import SPAN, WHY, positive_problem

PREFIX = "likelihood."


class GaussianPredictive(NamedTuple):
    """Predictive mean and variance (aleatoric + epistemic after BMA); ``std`` is the square
    root of ``var`` (the names every Gaussian predictive in bdlkit shares)."""

    mean: Tensor
    var: Tensor

    @property
    def std(self) -> Tensor:
        return self.var.sqrt()


def cat_predictives(preds: list) -> Tensor | GaussianPredictive:
    """Concatenate per-chunk predictives (probability tensors or GaussianPredictives)."""
    if isinstance(preds[0], GaussianPredictive):
        return GaussianPredictive(torch.cat([p.mean for p in preds]),
                                  torch.cat([p.var for p in preds]))
    return torch.cat(preds)


class Likelihood:
    """Base class: ``log_prob(outputs, y, lik_params) -> (B,)``."""

    name = "likelihood"
    task = "regression"

    def init_params(self, dtype: torch.dtype) -> dict[str, Tensor]:
        """Initial values of the likelihood's own parameters (none by default)."""
        return {}

    def log_prob(self, outputs: Tensor, y: Tensor, lik_params: dict[str, Tensor]) -> Tensor:
        raise NotImplementedError

    def predictive(self, outputs: Tensor, lik_params: dict[str, Tensor]):
        """Predictive distribution of one parameter draw."""
        raise NotImplementedError

    def log_predictive(self, outputs: Tensor, lik_params: dict[str, Tensor]) -> Tensor:
        """Log class probabilities ``(n, K)`` of one draw (classification likelihoods)."""
        raise NotImplementedError(f"{type(self).__name__} has no class probabilities")

    def check_targets(self, y: Tensor, outputs: Tensor) -> None:
        """Raise ``ValueError`` if ``y`` cannot be scored against ``outputs``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Categorical(Likelihood):
    """``log p(y | f) = log_softmax(f)_y`` for integer labels ``y`` in ``[0, C)``."""

    name = "categorical"
    task = "classification"

    def log_prob(self, outputs: Tensor, y: Tensor, lik_params: dict[str, Tensor]) -> Tensor:
        return -F.cross_entropy(outputs, y, reduction="none")

    def predictive(self, outputs: Tensor, lik_params: dict[str, Tensor]) -> Tensor:
        return outputs.softmax(-1)

    def log_predictive(self, outputs: Tensor, lik_params: dict[str, Tensor]) -> Tensor:
        return outputs.log_softmax(-1)

    def check_targets(self, y: Tensor, outputs: Tensor) -> None:
        if y.dtype.is_floating_point or y.dtype == torch.bool:
            raise ValueError(
                f"categorical likelihood needs integer class labels, got dtype {y.dtype}; "
                "convert with y.long()"
            )
        if y.ndim != 1:
            raise ValueError(f"class labels must have shape (n,), got {tuple(y.shape)}")
        if outputs.ndim != 2:
            raise ValueError(
                f"categorical likelihood needs logits of shape (n, num_classes), "
                f"the network returned {tuple(outputs.shape)}"
            )
        num_classes = outputs.shape[-1]
        bad = (y < 0) | (y >= num_classes)
        if bad.any():
            raise ValueError(
                f"labels must be in [0, {num_classes}) (the network has {num_classes} outputs); "
                f"found {int(bad.sum())} out of range, e.g. {y[bad][:5].tolist()}. "
                "Fix the labels or the network's output size"
            )


class Bernoulli(Likelihood):
    """``log p(y | f) = y log σ(f) + (1 - y) log σ(-f)`` for labels in {0, 1}."""

    name = "bernoulli"
    task = "classification"

    def log_prob(self, outputs: Tensor, y: Tensor, lik_params: dict[str, Tensor]) -> Tensor:
        logits = outputs.reshape(y.shape)
        return -F.binary_cross_entropy_with_logits(logits, y.to(logits.dtype), reduction="none")

    def predictive(self, outputs: Tensor, lik_params: dict[str, Tensor]) -> Tensor:
        return torch.sigmoid(outputs.reshape(outputs.shape[0]))

    def log_predictive(self, outputs: Tensor, lik_params: dict[str, Tensor]) -> Tensor:
        """``(n, 2)``: log p(y = 0) and log p(y = 1)."""
        f = outputs.reshape(outputs.shape[0])
        return torch.stack([F.logsigmoid(-f), F.logsigmoid(f)], dim=-1)

    def check_targets(self, y: Tensor, outputs: Tensor) -> None:
        if y.ndim != 1 or outputs.numel() != y.numel():
            raise ValueError(
                f"bernoulli likelihood needs labels (n,) and one logit per example; got labels "
                f"{tuple(y.shape)} and outputs {tuple(outputs.shape)}"
            )
        bad = (y != 0) & (y != 1)
        if bad.any():
            raise ValueError(
                f"bernoulli labels must be 0 or 1; found {int(bad.sum())} other values, "
                f"e.g. {y[bad][:5].tolist()}"
            )


class Gaussian(Likelihood):
    """``y ~ N(f(x), σ²)``, summed over output dimensions.

    Args:
        noise: the noise std σ (fixed), or its initial value when ``learn_noise`` (with
            ``channels``, one value or one per channel).
        learn_noise: infer ``log σ`` as the parameter ``likelihood.log_noise``.
        heteroscedastic: the network outputs ``2k`` values along its last dimension,
            mean ``f[..., :k]`` and ``σ = softplus(f[..., k:]) + min_noise`` (a forecaster
            returning ``(B, H, 2C)`` gives a σ per window, step and channel).
        channels: with ``learn_noise``, one σ per channel (the outputs' last dimension,
            e.g. the C series of a ``(B, H, C)`` forecast) instead of one shared σ.
    """

    name = "gaussian"
    task = "regression"

    def __init__(
        self,
        noise: float | Sequence[float] = 1.0,
        *,
        learn_noise: bool = False,
        heteroscedastic: bool = False,
        min_noise: float = 1e-6,
        channels: int | None = None,
    ) -> None:
        values = [float(v) for v in noise] if isinstance(noise, Sequence) else [float(noise)]
        if not all(v > 0 and math.isfinite(v) for v in values):
            raise ValueError(f"noise must be > 0 and finite, got {noise}")
        if len(values) > 1 and (channels is None or len(values) != channels):
            raise ValueError(f"one initial σ per channel needs channels={len(values)} (and "
                             f"learn_noise=True), got channels={channels!r}")
        if learn_noise and heteroscedastic:
            raise ValueError("choose learn_noise or heteroscedastic, not both")
        if channels is not None and (not learn_noise or int(channels) != channels
                                     or channels < 1):
            raise ValueError(f"channels (a learned σ per channel) needs learn_noise=True and a "
                             f"positive integer, got channels={channels!r}")
        self.channels = None if channels is None else int(channels)
        self.noise = values[0] if len(values) == 1 else tuple(values)
        self.learn_noise = learn_noise
        self.heteroscedastic = heteroscedastic
        self.min_noise = min_noise

    def __repr__(self) -> str:
        mode = (
            "heteroscedastic"
            if self.heteroscedastic
            else "learned"
            if self.learn_noise
            else "fixed"
        )
        per = f", channels={self.channels}" if self.channels else ""
        return f"Gaussian(noise={self.noise}, mode={mode}{per})"

    def init_params(self, dtype: torch.dtype) -> dict[str, Tensor]:
        if self.learn_noise:
            shape = (self.channels,) if self.channels else ()
            start = torch.as_tensor(self.noise, dtype=dtype).log()
            return {PREFIX + "log_noise": start.expand(shape).clone()}
        return {}

    def _mean_std(self, outputs: Tensor, lik_params: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        if self.heteroscedastic:
            k = outputs.shape[-1] // 2
            mean, raw = outputs[..., :k], outputs[..., k:]
            return mean, F.softplus(raw) + self.min_noise
        if self.learn_noise:
            return outputs, lik_params[PREFIX + "log_noise"].exp().expand_as(outputs)
        return outputs, torch.full_like(outputs, self.noise)

    def log_prob(self, outputs: Tensor, y: Tensor, lik_params: dict[str, Tensor]) -> Tensor:
        mean, std = self._mean_std(outputs, lik_params)
        mean, std = mean.reshape(y.shape), std.reshape(y.shape)
        z = (y - mean) / std
        lp = -0.5 * z**2 - std.log() - 0.5 * math.log(2 * math.pi)
        return lp.reshape(y.shape[0], -1).sum(-1)

    def predictive(self, outputs: Tensor, lik_params: dict[str, Tensor]) -> GaussianPredictive:
        """Mean and variance shaped like the network's mean output; ``(n, 1)`` becomes ``(n,)``."""
        mean, std = self._mean_std(outputs, lik_params)
        if mean.ndim == 2 and mean.shape[1] == 1:
            mean, std = mean[:, 0], std[:, 0]
        return GaussianPredictive(mean, std**2)

    def check_targets(self, y: Tensor, outputs: Tensor) -> None:
        if not y.dtype.is_floating_point:
            raise ValueError(f"gaussian likelihood needs float targets, got dtype {y.dtype}")
        if self.channels and (outputs.ndim < 2 or outputs.shape[-1] != self.channels):
            raise ValueError(f"a σ per channel needs outputs whose last dimension is the "
                             f"{self.channels} channels, got {tuple(outputs.shape)}")
        per_target = 2 if self.heteroscedastic else 1
        if outputs.shape[0] != y.shape[0] or outputs[0].numel() != per_target * y[0].numel():
            raise ValueError(
                f"targets of shape {tuple(y.shape)} do not match network outputs "
                f"{tuple(outputs.shape)}"
                + (" (heteroscedastic: 2 outputs per target)" if self.heteroscedastic else "")
            )


#: The likelihood names, one vocabulary for ``BayesianModel(likelihood=...)``,
#: ``bdlkit fit --likelihood`` and ``config.yaml`` (``docs/concepts.md``, "Likelihoods"):
#: ``gaussian:<sigma>`` stands for any fixed σ > 0, e.g. ``gaussian:0.1``.
NAMES = ("categorical", "bernoulli", "gaussian", "gaussian:<sigma>", "heteroscedastic")
FIXED_PREFIX = "gaussian:"
_MEANINGS = ("categorical (softmax over classes), bernoulli (two classes, one logit), "
             "gaussian (σ learned with the weights), gaussian:<sigma> (σ fixed, e.g. "
             "gaussian:0.1) or heteroscedastic (the network outputs a mean and a σ per "
             "target)")


def likelihood_name(spec: str) -> str:
    """``spec`` checked against :data:`NAMES` and written the one way ``config.yaml`` keeps
    it (lower case, ``gaussian:0.5``).

    Args:
        spec: a likelihood name, any case, surrounding spaces allowed.

    Raises:
        ValueError: not a string, not a name, or ``gaussian:<sigma>`` without a σ > 0.
    """
    if not isinstance(spec, str):
        raise ValueError(f"must be a string, one of {', '.join(NAMES)}; got {spec!r}")
    name = spec.strip().lower()
    if name.startswith(FIXED_PREFIX):
        return FIXED_PREFIX + repr(fixed_sigma(name))
    if name not in NAMES:
        raise ValueError(f"must be one of {', '.join(NAMES)}, got {spec!r}: {_MEANINGS}")
    return name


def fixed_sigma(name: str) -> float:
    """σ of ``gaussian:<sigma>``.

    Args:
        name: ``gaussian:`` followed by a number.

    Raises:
        ValueError: unless the number is in [1e-15, 1e15] (bdlkit's range of float
            values, :mod:`bdlkit.core.value_range`).
    """
    text = name[len(FIXED_PREFIX):]
    try:
        sigma = float(text)
    except ValueError:
        sigma = math.nan
    if positive_problem(sigma):
        raise ValueError(f"gaussian:<sigma> needs a finite number > 0 in {SPAN} after the "
                         f"colon (the fixed noise σ in the units of the targets trained on, "
                         f"e.g. gaussian:0.1; {WHY}), got {name!r}")
    return sigma


def make_likelihood(spec: str | Likelihood,
                    start_noise: float | Sequence[float] = 1.0) -> Likelihood:
    """A likelihood from its name (:data:`NAMES`; ``docs/concepts.md``) or an instance.

    ``categorical`` → :class:`Categorical`; ``bernoulli`` → :class:`Bernoulli`;
    ``gaussian`` → ``Gaussian(start_noise, learn_noise=True)`` (σ learned with the weights);
    ``gaussian:<sigma>`` → ``Gaussian(sigma)`` (σ fixed); ``heteroscedastic`` →
    ``Gaussian(heteroscedastic=True)`` (the network outputs a mean and a σ per target).

    Args:
        spec: a name or a :class:`Likelihood` (returned as it is).
        start_noise: where a learned σ starts: one value, or one per channel (the
            outputs' last dimension; a forecast's channels).

    Raises:
        ValueError: an unknown name; the message lists the names and what each means.
    """
    if isinstance(spec, Likelihood):
        return spec
    try:
        name = likelihood_name(spec)
    except ValueError as err:
        raise ValueError(f"unknown likelihood {spec!r} ({err}); or pass a Likelihood "
                         "instance") from None
    if name == "categorical":
        return Categorical()
    if name == "bernoulli":
        return Bernoulli()
    if name == "heteroscedastic":
        return Gaussian(heteroscedastic=True)
    if name.startswith(FIXED_PREFIX):
        return Gaussian(fixed_sigma(name))
    several = isinstance(start_noise, Sequence)
    return Gaussian(start_noise, learn_noise=True,
                    channels=len(start_noise) if several else None)


def name_of(likelihood: Likelihood) -> str:
    """The name :func:`make_likelihood` makes ``likelihood`` from (what ``config.yaml``
    records).

    Args:
        likelihood: a :class:`Likelihood`.
    """
    if isinstance(likelihood, Gaussian):
        if likelihood.heteroscedastic:
            return "heteroscedastic"
        if not likelihood.learn_noise:
            return FIXED_PREFIX + repr(float(likelihood.noise))
    return likelihood.name
