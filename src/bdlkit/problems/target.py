"""Unnormalised log densities on R^d: the simplest inference problem.

A :class:`Target` wraps a batched log density ``log_prob: (n, d) -> (n,)``. Its
score comes from autograd (``torch.func`` inside transforms and compiled chunks), or
from ``score=`` when the user gives the gradient in closed form (no autograd at all: the
fast path for small targets). Algorithms see a
Target through the same oracle signature as a network posterior::

    value, score = target.value_and_score(theta, batch=None)

``theta`` may be one point ``(d,)`` or a stack of independent chains ``(c, d)``;
``value`` is then the sum over chains and ``score`` has the shape of ``theta``,
so one algorithm step advances every chain at once.

``log_prob``'s output is checked where it comes back (:meth:`Target.log_prob`, the first
evaluation refuses, before any step): it must be a floating tensor (an integer-valued
density, ``(...).long()``, is constant between integers) and, where a gradient is
taken and no ``score=`` is given, connected to ``theta`` by autograd (a ``.detach()``,
``.item()`` or numpy detour would give a zero score and a sampler would random-walk).
Autograd cannot tell such a detour from a density that is constant in θ by design, or
piecewise constant (a uniform box, ``torch.where(inside, 0.0, -inf)``: both branches are
constants): such a density declares its zero gradient with ``score=torch.zeros_like``,
which every path then accepts (plain autograd, ``torch.func`` transforms, compiled chunks,
and :meth:`Target.log_prob_for_autograd` for callers of ``torch.autograd``). The checks
read two attributes of the output: they cost nothing per step.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bdlkit.core.errors import InputError

LogProb = Callable[[Tensor], Tensor]
# torch's messages when one operation mixes float32 and float64 tensors
_DTYPE_MISMATCH = re.compile(
    r"same dtype|scalar type \w+ but found|found dtype|desired output type", re.IGNORECASE)


class _GivenScore(torch.autograd.Function):
    """The value ``value`` (per row of ``theta``) with the gradient ``score`` (``theta``'s
    shape) to autograd: :meth:`Target.log_prob_for_autograd`."""

    @staticmethod
    def forward(ctx: Any, theta: Tensor, value: Tensor, score: Tensor) -> Tensor:
        del theta
        ctx.save_for_backward(score)
        return value.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        (score,) = ctx.saved_tensors
        return grad.unsqueeze(-1) * score, None, None


@dataclass(frozen=True)
class Reference:
    """What is known exactly about a target, for evaluation.

    Attributes:
        mean: exact mean, shape ``(d,)``, or ``None``.
        cov: exact covariance, shape ``(d, d)``, or ``None``.
        draws: exact or gold-standard draws, shape ``(n, d)``, or ``None``.
    """

    mean: Tensor | None = None
    cov: Tensor | None = None
    draws: Tensor | None = None

    @property
    def std(self) -> Tensor | None:
        if self.cov is not None:
            return self.cov.diagonal().sqrt()
        if self.draws is not None:
            return self.draws.std(0)
        return None


class Target:
    """An unnormalised log density on R^d.

    Args:
        log_prob: maps a batch ``(n, d)`` to log densities ``(n,)``. It must be
            differentiable with ``torch.func`` (plain torch ops are).
        dim: the dimension d.
        name: a label used in reports.
        reference: exact moments or reference draws, if known.
        init_scale: scale of the default random initialisation ``N(0, init_scale^2 I)``.
        dtype: dtype of initial points (float32 by default, float64 for tight tests).
        score: optional analytic gradient of ``log_prob``, mapping ``(n, d)`` to
            ``(n, d)``; used instead of autograd by ``value_and_score``. It is trusted:
            check it once against autograd (``bdlkit.Target(log_prob, d).score``).
            ``score=torch.zeros_like`` declares a density that is constant or piecewise
            constant in θ by design (module docstring).
    """

    num_data: int = 1
    temperature: float = 1.0
    kld: float = 1.0  # no likelihood to discount: a Target is one log density

    @property
    def effective_num_data(self) -> float:
        """Always 1 (a Target's per-datum scale is the density itself)."""
        return float(self.num_data)

    def __init__(
        self,
        log_prob: LogProb,
        dim: int,
        name: str | None = None,
        *,
        reference: Reference | None = None,
        init_scale: float = 1.0,
        dtype: torch.dtype = torch.float32,
        score: LogProb | None = None,
    ) -> None:
        if not callable(log_prob):
            raise TypeError(f"log_prob must be callable, got {type(log_prob).__name__}")
        if score is not None and not callable(score):
            raise TypeError(f"score must be callable or None, got {type(score).__name__}")
        self.score_fn = score
        if int(dim) != dim or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        self.log_prob_fn = log_prob
        self.dim = int(dim)
        self.name = name or "target"
        self.reference = reference or Reference()
        self.init_scale = float(init_scale)
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"Target(name={self.name!r}, dim={self.dim})"

    def log_prob(self, theta: Tensor) -> Tensor:
        """Log density of ``theta`` of shape ``(d,)`` or ``(n, d)``; returns ``()`` or ``(n,)``."""
        self._check_theta(theta)
        return self._rows(theta.reshape(-1, self.dim)).reshape(theta.shape[:-1])

    def _rows(self, flat: Tensor) -> Tensor:
        """``log_prob_fn`` on rows ``flat`` ``(n, d)``, its output checked: ``(n,)``."""
        try:
            out = self.log_prob_fn(flat)
        except RuntimeError as err:
            if _DTYPE_MISMATCH.search(str(err)):
                raise InputError(self._dtype_advice(flat.dtype, err)) from err
            raise
        self._check_density(flat, out)
        if out.shape != (flat.shape[0],):
            raise ValueError(
                f"Target {self.name!r}: log_prob must map (n, {self.dim}) to (n,), "
                f"got output shape {tuple(out.shape)} for input {tuple(flat.shape)}"
            )
        return out

    def value_and_score(self, theta: Tensor, batch: object = None) -> tuple[Tensor, Tensor]:
        """Summed log density and its gradient (the score); ``batch`` is ignored."""
        del batch
        self._check_theta(theta)
        compiling = torch.compiler.is_compiling()  # a compiled chunk: bdlkit.engine.compiled
        composable = not compiling and (
            theta.requires_grad or torch._C._functorch.is_functorch_wrapped_tensor(theta))
        if self.score_fn is not None and not composable:  # a transform differentiates log_prob
            with torch.no_grad():
                return self.log_prob(theta).sum(), self._given_score(theta)
        if composable or compiling:
            # inside a torch.func transform, a graph of the caller's or a compiled graph
            # (which traces torch.func, not torch.autograd.grad): stay composable
            with torch.enable_grad():
                score, value = torch.func.grad_and_value(
                    lambda t: self.log_prob(t).sum())(theta)
            return value.detach(), score.detach()
        if torch.is_grad_enabled():  # (a step's usual case: no context to enter)
            return self._autograd(theta)
        with torch.enable_grad():
            return self._autograd(theta)

    def _autograd(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`value_and_score` by plain autograd (about 3x cheaper per call than
        torch.func): the leaf is the ``(n, d)`` rows ``log_prob_fn`` sees, and the rows'
        outputs seed autograd themselves (:func:`_gradient`: the gradient of their sum), so
        the graph holds ``log_prob`` alone, with no reshape and no sum."""
        if torch.is_inference_mode_enabled():
            raise InputError(f"Target {self.name!r}: its score needs autograd, which "
                             "torch.inference_mode() switches off: call it outside "
                             "inference_mode (torch.no_grad() is fine), or give the Target "
                             "its gradient with score=")
        rows = theta.ndim == 2  # (else one point (d,), seen as the row (1, d))
        leaf = (theta.detach() if rows else theta.detach()[None]).requires_grad_(True)
        out = self._rows(leaf)  # (its output is connected: _check_density)
        score = _gradient(out, leaf)
        value = out.detach()
        value = value.sum() if rows else value[0]  # (indexing: a cheaper view than .view())
        if score is None:
            return value, torch.zeros_like(theta)
        return value, score if rows else score[0]

    def score(self, theta: Tensor) -> Tensor:
        """Gradient of ``log_prob`` at each row of ``theta``."""
        return self.value_and_score(theta)[1]

    def log_prob_for_autograd(self, theta: Tensor) -> Tensor:
        """``log_prob(theta)`` for a caller that differentiates it with ``torch.autograd``
        (Pyro's NUTS, the L-BFGS mode search): where ``score=`` is given and a gradient is
        taken, the output's gradient is that score (a density constant in θ by design has
        no graph of its own); otherwise it is ``log_prob`` itself.

        Args:
            theta: one point ``(d,)`` or a stack ``(n, d)``.
        """
        if self.score_fn is None or not (theta.requires_grad and torch.is_grad_enabled()):
            return self.log_prob(theta)
        with torch.no_grad():
            value, score = self.log_prob(theta), self._given_score(theta)
        return _GivenScore.apply(theta, value, score)

    def _given_score(self, theta: Tensor) -> Tensor:
        """``score=`` at ``theta`` (``(d,)`` or ``(n, d)``), shaped like ``theta``."""
        flat = theta.reshape(-1, self.dim)
        score = self.score_fn(flat)  # type: ignore[misc]  # called only where given
        if score.shape != flat.shape:
            raise ValueError(f"Target {self.name!r}: score must map (n, {self.dim}) to "
                             f"(n, {self.dim}), got {tuple(score.shape)}")
        return score.reshape(theta.shape)

    def init_params(self, generator: torch.Generator, chains: int | None = None) -> Tensor:
        """Random starting point(s): ``(d,)``, or ``(chains, d)`` when ``chains`` is given."""
        shape = (self.dim,) if chains is None else (chains, self.dim)
        return self.init_scale * torch.randn(shape, generator=generator, dtype=self.dtype)

    def validate_data(self, data: object) -> None:
        """Targets take no data; passing some is a mistake worth reporting."""
        if data is not None:
            raise ValueError(
                f"Target {self.name!r} has no data; drop data=... (it is only for BayesianModel)"
            )

    def _dtype_advice(self, dtype: torch.dtype, err: RuntimeError) -> str:
        """The fix for a ``log_prob`` whose tensors (its data) have another dtype than theta."""
        other = torch.float32 if dtype == torch.float64 else torch.float64
        cast = ".double()" if dtype == torch.float64 else ".float()"
        reason = str(err).strip().splitlines()[0]
        return (f"Target {self.name!r}: log_prob mixes dtypes: theta is {dtype} but tensors "
                f"inside log_prob are not (torch: {reason}); build the Target with the "
                f"data's dtype, e.g. Target(log_prob, dim={self.dim}, dtype={other}), or cast "
                f"the data to theta's dtype (data{cast})")

    def _check_density(self, flat: Tensor, out: object) -> None:
        """Refuse a ``log_prob`` output that is no floating tensor, or that autograd does not
        connect to ``flat`` where a gradient is taken and no ``score=`` declares it (module
        docstring)."""
        if not isinstance(out, Tensor):
            raise InputError(f"Target {self.name!r}: log_prob must return a torch.Tensor of "
                             f"shape (n,), got {type(out).__name__}; compute it with torch "
                             "operations on theta")
        if not out.dtype.is_floating_point:
            raise InputError(f"Target {self.name!r}: log_prob returns {out.dtype} values; a "
                             "log density must be floating (an integer one is constant "
                             "between integers, so every gradient is 0): drop the integer "
                             "cast or rounding")
        if (self.score_fn is None and flat.requires_grad and torch.is_grad_enabled()
                and not out.requires_grad):  # a given score declares the gradient itself
            raise InputError(f"Target {self.name!r}: log_prob's output has no gradient path "
                             "to theta (a .detach(), .item(), numpy or torch.no_grad inside "
                             "it), so every score would be 0 and a sampler would "
                             "random-walk: compute it with torch operations on theta; if it "
                             "is constant or piecewise constant in theta by design (e.g. a "
                             "uniform box, torch.where(inside, 0.0, -inf) with constant "
                             "branches), pass score=torch.zeros_like to Target")

    def _check_theta(self, theta: Tensor) -> None:
        if not isinstance(theta, Tensor):
            raise TypeError(f"theta must be a torch.Tensor, got {type(theta).__name__}")
        if theta.ndim not in (1, 2) or theta.shape[-1] != self.dim:
            raise ValueError(
                f"Target {self.name!r} has dim={self.dim}: theta must have shape "
                f"({self.dim},) or (n, {self.dim}), got {tuple(theta.shape)}"
            )


#: autograd's engine, called directly by :func:`_gradient` (None: not where torch keeps it)
_ENGINE = getattr(getattr(torch.autograd, "Variable", None), "_execution_engine", None)


def _gradient(out: Tensor, leaf: Tensor) -> Tensor | None:
    """The gradient of ``out.sum()`` with respect to ``leaf`` (None where it does not reach
    ``leaf``), seeded with ``ones_like(out)``: what ``torch.autograd.grad(out, leaf,
    torch.ones_like(out), allow_unused=True)[0]`` returns, and ``torch.autograd.grad(
    out.sum(), leaf)``'s gradient, with no sum in the graph.

    For plain CPU tensors it calls autograd's engine directly. ``torch.autograd.grad`` is
    a Python wrapper around that call (argument normalisation, the seed checked against
    ``out``'s shape, logging hooks, tensor-subclass dispatch, a context stashed for device
    threads): on a 3-D standard normal it takes 53 us, the engine call 33 us, where a whole
    SGLD step of the README's example takes about 90 us. The same engine call, with the
    same seed, gives the same gradient bit for bit (tested). Elsewhere (another device, a
    tensor subclass, no engine where torch keeps it) the wrapper runs."""
    seed = torch.ones_like(out)
    if _ENGINE is None or type(out) is not Tensor or type(leaf) is not Tensor \
            or not leaf.is_cpu:
        return torch.autograd.grad(out, leaf, seed, allow_unused=True)[0]
    (score,) = _ENGINE.run_backward((out,), (seed,), False, False, (leaf,),
                                    allow_unreachable=True, accumulate_grad=False)
    return score
