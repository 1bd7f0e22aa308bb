"""The outcome of :func:`bdlkit.infer`: samples or an approximation, and predictions.

``Result.sample(n)`` returns draws from what was inferred: the last ``n`` kept draws
of a sampler, ``n`` draws of a VI approximation, the first ``n`` members of a deep
ensemble, or the point estimate repeated for an optimiser. ``Result.predict(x)`` is the
Bayesian model average over draws::

    p(y | x, D) ≈ (1/S) Σ_s p(y | x, θ_s)

computed in log space and streamed over draws by :mod:`bdlkit.predictive`, returned as
class probabilities, or for a Gaussian likelihood as the mixture's mean and variance
(``Var = mean_s σ_s² + mean_s (μ_s - μ̄)²``); ``Result.predictive`` gives the extras. ``save``/``load``
write JSON and safetensors only (no pickle), atomically.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from . import rng
from .algorithms import get_method
from .collect import SampleStore
from .families import diag_gaussian
from .families.diag_gaussian import DiagGaussianParams
from .predictive import ClassificationBMA, RegressionBMA, bma
from .problems import BayesianModel, GaussianPredictive
from .serialization import (
    load_json,
    load_tensors,
    save_json,
    save_tensors,
    state_from_tensors,
    state_to_tensors,
)
from .tree import TensorTree, index, tree_map
from .types import Algorithm, Problem

FORMAT_VERSION = 1


class Result:
    """Samples, final state and history of one inference run."""

    def __init__(
        self,
        problem: Problem | None,
        algorithm: Algorithm | None,
        state: Any,
        samples: TensorTree | SampleStore | None,
        history: list[dict[str, float]],
        config: dict[str, Any],
    ) -> None:
        self.problem = problem
        self.algorithm = algorithm
        self.state = state
        self.store = samples if isinstance(samples, SampleStore) else None
        self._samples = None if self.store is not None else samples
        self.history = history
        self.config = config

    @property
    def samples(self) -> TensorTree | None:
        """All kept draws stacked along dim 0 (read from the store on first use)."""
        if self._samples is None and self.store is not None and len(self.store):
            self._samples = self.store.load()
        return self._samples

    @property
    def method(self) -> str:
        return self.config["method"]

    @property
    def kind(self) -> str:
        return self.config["kind"]

    @property
    def num_kept(self) -> int:
        """Number of kept sampler draws (counting each chain), or an ensemble's members."""
        if self.kind == "ensemble":
            return 0 if self.state is None else _leading(self._members())
        if self.store is not None:
            if self.store.structure == "tensor":  # Target draws: (chains, d) each
                shape = next(iter(self.store.shapes.values()))
                return len(self.store) * (shape[0] if len(shape) == 2 else 1)
            return len(self.store)
        if self.samples is None:
            return 0
        if isinstance(self.samples, dict):
            return next(iter(self.samples.values())).shape[0]
        return self.samples.shape[0] * (self.samples.shape[1] if self.samples.ndim == 3 else 1)

    def __repr__(self) -> str:
        return (
            f"Result(method={self.method!r}, steps={self.config.get('steps')}, "
            f"kept={self.num_kept}, problem={self.problem!r})"
        )

    @property
    def params(self) -> TensorTree:
        """The final point: chain position, optimum, variational mean or ensemble member 0."""
        if self.algorithm is None or self.state is None:
            raise ValueError("this result was loaded without its problem; pass problem= to load")
        return self.algorithm.params(self.state)

    def sigma_summary(self) -> list[dict[str, float | str | int]] | None:
        """Per-tensor 10/50/90 % quantiles of a diagonal-Gaussian VI result's σ, then a row
        over all coordinates (:func:`bdlkit.families.diag_gaussian.sigma_summary`): how far
        the approximation is from a point estimate, layer by layer. ``None`` for other kinds
        of result and for non-diagonal approximations (full-covariance GSM/BaM)."""
        lam = getattr(self.state, "lam", None) if self.kind == "vi" else None
        return diag_gaussian.sigma_summary(lam) if isinstance(lam, DiagGaussianParams) else None

    # ------------------------------------------------------------------ draws
    def sample(self, n: int, generator: torch.Generator | int | None = None) -> TensorTree:
        """``n`` draws: a ``(n, d)`` tensor for a Target, a dict of ``(n, ...)`` for a model."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if self.kind == "sampler":
            return self._last_kept(n)
        if self.kind == "ensemble":
            members = self._members()
            if n > _leading(members):
                raise ValueError(f"asked for {n} samples but the ensemble has "
                                 f"M={_leading(members)} members; train more (members=)")
            return index(members, slice(0, n))
        if self.kind == "vi":
            if not isinstance(generator, torch.Generator):
                generator = rng.generator(generator or 0)
            return self.algorithm.approximation(self.state).sample(n, generator)
        point = self.params
        if isinstance(point, Tensor) and point.ndim == 2:  # a Target optimised in chains
            return point.repeat((n + len(point) - 1) // len(point), 1)[:n]
        return tree_map(lambda t: t.unsqueeze(0).expand(n, *t.shape), point)

    def _members(self) -> TensorTree:
        if self.algorithm is None or self.state is None:
            raise ValueError("this result was loaded without its problem; pass problem= to load")
        return self.algorithm.members(self.state)

    def _last_kept(self, n: int) -> TensorTree:
        if self.samples is None:
            raise ValueError("no samples were kept: increase steps or lower burnin/thin")
        have = self.num_kept
        if n > have:
            raise ValueError(
                f"asked for {n} samples but only {have} were kept; run more steps, lower "
                "thin or burnin, or use more chains"
            )
        if isinstance(self.samples, Tensor):  # Target: (K, [c,] d) -> (K*c, d), draw-major
            return self.samples.reshape(-1, self.samples.shape[-1])[-n:]
        return index(self.samples, slice(-n, None))

    # ------------------------------------------------------------------ prediction
    def iter_draws(self, num_samples: int = 32, chunk: int = 16) -> Iterator[TensorTree]:
        """Single parameter draws to average over, streamed: a sampler's kept draws (a disk
        store shard by shard), ``num_samples`` draws of a VI approximation (``chunk`` at a
        time, seeded), every member of an ensemble, or an optimiser's point."""
        if self.kind == "sampler":
            if self.store is not None:
                chunks = self.store.iter_chunks()
            elif self.samples is not None:
                chunks = iter([self._last_kept(self.num_kept)])
            else:
                chunks = iter(())
            for draws in chunks:
                yield from (index(draws, s) for s in range(_leading(draws)))
        elif self.kind == "vi":
            q = self.algorithm.approximation(self.state)
            gen = rng.generator(0)
            for start in range(0, num_samples, chunk):
                draws = q.sample(min(chunk, num_samples - start), gen)
                yield from (index(draws, s) for s in range(_leading(draws)))
        elif self.kind == "ensemble":
            members = self._members()
            yield from (index(members, s) for s in range(_leading(members)))
        else:
            yield self.params

    @torch.no_grad()
    def predictive(self, x: Tensor, y: Tensor | None = None, num_samples: int = 32,
                   chunk_size: int = 1024) -> ClassificationBMA | RegressionBMA:
        """The streaming BMA at ``x`` with its extras (:mod:`bdlkit.predictive`): log
        probabilities, entropies and, with ``y``, per-draw metrics; or the Gaussian
        mixture's moments and its log density at ``y``."""
        if self.problem is None:
            raise ValueError("this result was loaded without its problem; pass problem= to load")
        if not isinstance(self.problem, BayesianModel):
            raise ValueError("predict() needs a BayesianModel result; for a Target use sample()")
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        if self.kind == "sampler" and self.num_kept == 0:
            raise ValueError("no samples were kept: increase steps or lower burnin/thin")
        return bma(self.problem, self.iter_draws(num_samples), x, y, chunk_size)

    def predict(self, x: Tensor, num_samples: int = 32, chunk_size: int = 1024) -> Any:
        """Bayesian model average at inputs ``x`` (see the module docstring).

        ``num_samples`` draws are used for VI (kept samples for samplers, all members
        for ensembles, the point for optimisers). Inputs are processed in chunks of ``chunk_size``; with
        ``buffers="batch_stats"`` normalisation uses each chunk's statistics, so keep
        chunks large. Returns class probabilities (for a Bernoulli likelihood p(y = 1)) or
        a GaussianPredictive, in the dtype of ``x`` (accumulated in float64).
        """
        out = self.predictive(x, num_samples=num_samples, chunk_size=chunk_size)
        dtype = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
        if isinstance(out, ClassificationBMA):
            if getattr(self.problem.likelihood, "name", "") == "bernoulli":
                return out.probs[:, 1].to(dtype)  # p(y = 1), as the likelihood's predictive
            return out.probs.to(dtype)
        return GaussianPredictive(out.mean.to(dtype), out.var.to(dtype))

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike) -> Path:
        """Write ``result.json``, ``state.safetensors`` and ``samples.safetensors`` under ``path``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for name, content in (("state", self.state), ("samples", self.samples)):
            if content is None:  # never leave a file of an earlier result behind
                (path / f"{name}.safetensors").unlink(missing_ok=True)
        if self.state is not None:
            save_tensors(path / "state.safetensors", state_to_tensors(self.state))
        if self.samples is not None:
            samples = self.samples if isinstance(self.samples, dict) else {"_": self.samples}
            save_tensors(path / "samples.safetensors", samples)
        save_json(
            path / "result.json",
            {"format": FORMAT_VERSION, "config": self.config, "history": self.history},
        )
        return path


def load(path: str | os.PathLike, problem: Problem | None = None) -> Result:
    """Read a :meth:`Result.save` folder without unpickling anything.

    Without ``problem`` the result holds samples and history only; pass the same
    problem (e.g. the same ``BayesianModel``) to restore the algorithm state and use
    ``predict``.
    """
    path = Path(path)
    meta = load_json(path / "result.json")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_VERSION or "config" not in meta:
        raise ValueError(f"{path / 'result.json'} is not a bdlkit result (format {FORMAT_VERSION})")
    config = meta["config"]
    samples = None
    if (path / "samples.safetensors").exists():
        tensors = load_tensors(path / "samples.safetensors")
        samples = tensors["_"] if set(tensors) == {"_"} else tensors
    algorithm = state = None
    if problem is not None:
        if not config.get("hyper_serializable", True):
            raise ValueError(
                f"{path} was run with non-serialisable hyperparameters ({config['hyper']}); "
                "rebuild the algorithm yourself and load state.safetensors with "
                "bdlkit.serialization.state_from_tensors"
            )
        algorithm = get_method(config["method"]).build(problem, **config["hyper"])
        gen = rng.generator(0)
        chains = config.get("chains")
        init = problem.init_params(gen, chains) if chains else problem.init_params(gen)
        template = algorithm.init(init, generator=gen)
        state = state_from_tensors(template, load_tensors(path / "state.safetensors"))
    return Result(problem, algorithm, state, samples, meta.get("history", []), config)


def _leading(draws: TensorTree) -> int:
    return next(iter(draws.values())).shape[0] if isinstance(draws, dict) else draws.shape[0]
