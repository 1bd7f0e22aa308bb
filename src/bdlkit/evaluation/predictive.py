"""Streaming Bayesian model averaging: the posterior predictive over draws θ_1..θ_S.

Classification, in log space (``docs/metrics.md``)::

    log p̄(y | x) = logsumexp_s log p(y | x, θ_s) − log S

accumulated draw by draw with ``logaddexp``, together with the mean entropy of the
individual predictives ``E_s H[p(·|x, θ_s)]`` (for the mutual information
I = H[p̄] − E_s H[p_s], an OOD score) and, when labels are given, each draw's own
accuracy and NLL (L2E reports them). Regression, for Gaussian predictives
N(μ_s, σ_s²): the mixture's mean and variance (Welford updates, no E[μ²] − E[μ]²
cancellation) and, when targets are given, the mixture log density
log (1/S) Σ_s N(y; μ_s, σ_s²) and CDF F(y) = (1/S) Σ_s Φ((y − μ_s)/σ_s) (for interval
coverage: y lies in the mixture's central interval of mass l iff (1−l)/2 ≤ F(y) ≤ (1+l)/2).

Memory is O(n·K) for the accumulators plus one draw and one input chunk at a time: the
draws come from any iterable (a list, a disk-backed :class:`~bdlkit.engine.collect.SampleStore`
streamed shard by shard, or a VI approximation sampled on the fly), so S × n × K is
never held.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bdlkit.core.errors import NonFiniteError
from bdlkit.core.protocol import Problem
from bdlkit.core.tree import tree_map
from bdlkit.metrics.classification import entropy_from_log_probs
from bdlkit.problems.likelihoods import GaussianPredictive, cat_predictives


@dataclass(frozen=True)
class ClassificationBMA:
    """BMA class probabilities (in log space) and per-draw statistics."""

    log_probs: Tensor  # (n, K): log p̄(y | x)
    expected_entropy: Tensor  # (n,): mean over draws of H[p(·|x, θ_s)]
    num_samples: int
    sample_accuracy: list[float] | None = None  # per draw, when labels were given
    sample_nll: list[float] | None = None

    @property
    def probs(self) -> Tensor:
        return self.log_probs.exp()

    @property
    def entropy(self) -> Tensor:
        """``H[p̄(·|x)] = −Σ_k p̄_k log p̄_k``."""
        return entropy_from_log_probs(self.log_probs)

    @property
    def mutual_information(self) -> Tensor:
        """Epistemic part of the entropy — H[p̄] − E_s H[p_s] (≥ 0 up to rounding)."""
        return (self.entropy - self.expected_entropy).clamp_min(0.0)


@dataclass(frozen=True)
class RegressionBMA:
    """The Gaussian mixture's moments and, with targets, its log density at them."""

    mean: Tensor
    var: Tensor
    num_samples: int
    log_density: Tensor | None = None  # (n,): log (1/S) Σ_s N(y; μ_s, σ_s²)
    cdf: Tensor | None = None  #: like y — the mixture CDF at y, (1/S) Σ_s Φ((y − μ_s)/σ_s)

    @property
    def std(self) -> Tensor:
        """The mixture's standard deviation, ``sqrt(var)``."""
        return self.var.sqrt()

    @property
    def predictive(self) -> GaussianPredictive:
        return GaussianPredictive(self.mean, self.var)


@torch.no_grad()
def bma(
    problem: Problem,
    draws: Iterable[Any],
    x: Tensor,
    y: Tensor | None = None,
    chunk_size: int = 1024,
    progress: Callable[[int], None] | None = None,
) -> ClassificationBMA | RegressionBMA:
    """Average the predictive of ``problem`` over ``draws`` (single parameter draws) at ``x``.

    ``y`` (optional) adds per-draw accuracy/NLL (classification) or the mixture log
    density (regression). Inputs are processed ``chunk_size`` rows at a time; ``progress``
    (optional) is called with ``len(x)`` after each draw.
    """
    return bma_over_inputs(problem, draws, [x], [y], chunk_size, progress)[0]


@torch.no_grad()
def bma_over_inputs(
    problem: Problem,
    draws: Iterable[Any],
    inputs: Sequence[Tensor],
    labels: Sequence[Tensor | None] | None = None,
    chunk_size: int = 1024,
    progress: Callable[[int], None] | None = None,
) -> list[ClassificationBMA | RegressionBMA]:
    """One BMA per input set in one pass over ``draws``: each draw is read (and moved to the
    inputs' device) once and predicts every set, ``chunk_size`` rows at a time. Each result
    equals :func:`bma` of its set alone, bit for bit (same chunks, same accumulation order);
    what a batch of corrupted copies of a test split needs (:mod:`bdlkit.evaluation.shift`).

    Args:
        inputs: the input sets, on one device.
        labels: per set, its labels or targets or ``None`` (default: none for any set).
        progress: called after each draw with the rows it predicted (all sets together).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    labels = [None] * len(inputs) if labels is None else list(labels)
    if not inputs or len(labels) != len(inputs):
        raise ValueError(f"need one or more input sets and one label entry per set, got "
                         f"{len(inputs)} sets and {len(labels)} label entries")
    for x, y in zip(inputs, labels, strict=True):
        if y is not None and len(y) != len(x):
            raise ValueError(f"x has {len(x)} rows but y has {len(y)}")
    classification = getattr(getattr(problem, "likelihood", None), "task", "") == "classification"
    accumulators = [_ClassAccumulator(y) if classification else _GaussianAccumulator(y)
                    for y in labels]
    rows = sum(len(x) for x in inputs)
    device = inputs[0].device
    for theta in draws:
        theta = tree_map(lambda t: t.to(device), theta)  # stores keep draws on the CPU
        for x, acc in zip(inputs, accumulators, strict=True):
            chunks = [x[i:i + chunk_size] for i in range(0, len(x), chunk_size)]
            if classification:
                acc.add([problem.log_predictive(theta, c) for c in chunks])
            else:
                acc.add(cat_predictives([problem.predictive(theta, c) for c in chunks]))
        if progress is not None:
            progress(rows)
    if accumulators[0].count == 0:
        raise ValueError("no draws to average over (no samples kept?)")
    return [acc.result() for acc in accumulators]


class _ClassAccumulator:
    def __init__(self, labels: Tensor | None) -> None:
        self.labels = labels
        self.count = 0
        self.log_sum: Tensor | None = None
        self.entropy_sum: Tensor | None = None
        self.acc: list[float] = []
        self.nll: list[float] = []

    def add(self, log_probs: list[Tensor]) -> None:
        lp = torch.cat(log_probs).double()
        if bool(lp.isnan().any()):  # would make the BMA NaN (logaddexp) without a word
            raise NonFiniteError(
                f"draw {self.count + 1}: its class probabilities are NaN: the network's "
                "outputs overflow at these weights (the fit diverged; a run of a few steps "
                "at a large step size ends there). Fix: a smaller lr (or step size)")
        entropy = entropy_from_log_probs(lp)
        if self.log_sum is None:
            self.log_sum, self.entropy_sum = lp.clone(), entropy
        else:
            torch.logaddexp(self.log_sum, lp, out=self.log_sum)
            self.entropy_sum += entropy
        if self.labels is not None:
            y = self.labels.to(lp.device)
            self.acc.append(float((lp.argmax(-1) == y).double().mean()))
            self.nll.append(float(-lp.gather(-1, y[:, None]).mean()))
        self.count += 1

    def result(self) -> ClassificationBMA:
        labels = self.labels is not None
        return ClassificationBMA(
            log_probs=self.log_sum - math.log(self.count),
            expected_entropy=self.entropy_sum / self.count,
            num_samples=self.count,
            sample_accuracy=self.acc if labels else None,
            sample_nll=self.nll if labels else None,
        )


#: The fix for a predictive that does not fit its dtype (:func:`check_finite`, and
#: ``Result.predict``'s cast of the float64 average to the inputs' dtype).
NONFINITE_FIX = ("Fix: a smaller lr, or a fixed σ (likelihood 'gaussian:0.1', --likelihood "
                 "gaussian:0.1) so that the sampled σ stay moderate; to keep these draws, "
                 "infer and predict in float64 (net.double() before bdlkit.infer, and "
                 "x.double())")


def check_finite(mean: Tensor, var: Tensor, draw: int, dtype: torch.dtype) -> None:
    """Refuse a draw whose predictive mean or variance is NaN or infinite (``draw``: its
    1-based number; ``dtype``: the one the variance was computed in) instead of averaging
    it into a NaN BMA variance (inf − inf in the running mean)."""
    if bool(torch.isfinite(mean).all()) and bool(torch.isfinite(var).all()):
        return
    what = "variance" if bool(torch.isfinite(mean).all()) else "mean"
    big = torch.finfo(dtype).max if dtype.is_floating_point else float("inf")
    raise NonFiniteError(
        f"draw {draw}: its predictive {what} is NaN or infinite, so the BMA would be NaN. "
        + (f"A sampled noise σ overflowed: σ² exceeds the largest {dtype} ({big:.3g}), i.e. "
           f"log σ above {0.5 * math.log(big):.0f} (a learned σ = exp(log σ) moves like any "
           "weight). " if what == "variance" else "The network diverged at this draw. ")
        + NONFINITE_FIX)


class _GaussianAccumulator:
    def __init__(self, targets: Tensor | None) -> None:
        self.targets = targets
        self.count = 0
        self.mean = self.m2 = self.noise = self.log_density = self.cdf = None

    def add(self, pred: GaussianPredictive) -> None:
        if not isinstance(pred, GaussianPredictive):
            raise TypeError("regression BMA needs GaussianPredictive draws")
        mean, var = pred.mean.double(), pred.var.double()
        check_finite(mean, var, self.count + 1, pred.var.dtype)
        self.count += 1
        if self.mean is None:
            self.mean, self.m2, self.noise = mean.clone(), torch.zeros_like(mean), var.clone()
        else:
            delta = mean - self.mean
            self.mean += delta / self.count
            self.m2 += delta * (mean - self.mean)
            self.noise += (var - self.noise) / self.count
        if self.targets is not None:
            y = self.targets.to(mean.device, torch.float64).reshape(mean.shape)
            lp = -0.5 * (math.log(2 * math.pi) + var.log() + (y - mean) ** 2 / var)
            lp = lp.reshape(len(lp), -1).sum(-1)  # independent outputs
            self.log_density = lp if self.log_density is None else torch.logaddexp(
                self.log_density, lp)
            cdf = torch.special.ndtr((y - mean) / var.sqrt())
            self.cdf = cdf if self.cdf is None else self.cdf + cdf

    def result(self) -> RegressionBMA:
        log_density = cdf = None
        if self.log_density is not None:
            log_density = self.log_density - math.log(self.count)
            cdf = self.cdf / self.count
        return RegressionBMA(self.mean, self.noise + self.m2 / self.count, self.count,
                             log_density, cdf)
