"""The outcome of :func:`bdlkit.infer`: samples or an approximation, and predictions.

``Result.sample(n)`` returns draws from what was inferred: the last ``n`` kept draws
of a sampler, ``n`` draws of a VI approximation, the first ``n`` members of a deep
ensemble, or the point estimate repeated for an optimiser. ``Result.predict(x)`` is the
Bayesian model average over draws::

    p(y | x, D) ≈ (1/S) Σ_s p(y | x, θ_s)

computed in log space and streamed over draws by :mod:`bdlkit.evaluation.predictive`, returned as
class probabilities, or for a Gaussian likelihood as the mixture's mean and variance
(``Var = mean_s σ_s² + mean_s (μ_s - μ̄)²``); ``Result.predictive`` gives the extras. ``save``/``load``
write JSON and safetensors only (no pickle), atomically.

Every method that takes inputs (``predict``, ``predictive``, ``intervals``, ``forecast``,
``to_arviz(x)``) checks them against the training inputs' per-example shape and dtype
(:mod:`bdlkit.engine.result_contract`) and refuses others with one line naming both.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bdlkit.core import rng
from bdlkit.core.draws import ApproximationDraws, Draws, KeptDraws, NoDraws
from bdlkit.core.errors import NonFiniteError
from bdlkit.core.protocol import Algorithm, Problem
from bdlkit.core.serialization import save_json, save_tensors, state_to_tensors
from bdlkit.core.tree import TensorTree, index, num_draws
from bdlkit.engine.collect import SampleStore
from bdlkit.engine.result_contract import ResultContract
from bdlkit.evaluation import arviz_export
from bdlkit.evaluation.draw_predictions import (
    PredictiveSamples,
    bma_with_samples,
    is_classification,
)
from bdlkit.evaluation.forecast import forecast_mixture
from bdlkit.evaluation.predictive import NONFINITE_FIX, ClassificationBMA, RegressionBMA, bma
from bdlkit.families import diag_gaussian
from bdlkit.families.diag_gaussian import DiagGaussian
from bdlkit.metrics.forecasting import GaussianMixture
from bdlkit.problems import BayesianModel, GaussianPredictive, Target

FORMAT_VERSION = 1
DRAWS_SALT = 0xD7A5  # VI draws: a stream of the run's seed of their own


class Result:
    """Samples, final state and history of one inference run.

    Args:
        problem, algorithm, state: what ran and where it ended (``None`` for a result
            loaded without its problem: then only kept samples and history are there).
        samples: a sampler's kept draws: a sample store or stacked tensors.
        history: the logged ``info`` of the run, one dict per logged step.
        config: the run's settings (method, seed, steps, hyperparameters, ...).
        kind: what the method returns (``bdlkit.core.protocol.KINDS``); taken from ``algorithm``
            when there is one.
        contract: what its inputs and problem must agree with when it is used again
            (:mod:`bdlkit.engine.result_contract`); default: the record of ``problem``,
            taken now (the training inputs' per-example shape and dtype, the problem).
    """

    def __init__(
        self,
        problem: Problem | None,
        algorithm: Algorithm | None,
        state: Any,
        samples: TensorTree | SampleStore | None,
        history: list[dict[str, float]],
        config: dict[str, Any],
        kind: str | None = None,
        contract: ResultContract | None = None,
    ) -> None:
        self.problem = problem
        self.algorithm = algorithm
        self.state = state
        self.store = samples if isinstance(samples, SampleStore) else None
        self._samples = None if self.store is not None else samples
        self.history = history
        self.config = config
        self.kind = algorithm.kind if algorithm is not None else kind
        self.contract = ResultContract.of(problem) if contract is None else contract
        self.source = "this session"  # or what bdlkit.load opened

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
    def seed(self) -> int:
        return int(self.config.get("seed", 0))

    @property
    def draws(self) -> Draws:
        """Where the draws come from — the algorithm says (:mod:`bdlkit.core.draws`)."""
        kept = (KeptDraws(self.store, load=lambda: self.samples) if self.store is not None
                else self._samples)  # a store is read from disk once, by self.samples
        if self.algorithm is not None and self.state is not None:
            return self.algorithm.draws(self.state, kept)
        if kept is not None:
            return kept if isinstance(kept, KeptDraws) else KeptDraws(kept)
        return NoDraws("this result was loaded without its problem and holds no kept "
                       "samples; pass problem= to load")

    @property
    def num_kept(self) -> int:
        """Number of kept sampler draws (counting each chain), or an ensemble's members."""
        return self.draws.count

    def __repr__(self) -> str:
        return (
            f"Result(method={self.method!r}, steps={self.config.get('steps')}, "
            f"kept={self.num_kept}, problem={self.problem!r})"
        )

    @property
    def params(self) -> TensorTree:
        """The final point — chain position, optimum, variational mean or ensemble member 0."""
        if self.algorithm is None or self.state is None:
            raise ValueError("this result was loaded without its problem; pass problem= to load")
        return self.algorithm.params(self.state)

    def chains_first(self, name: str | None = None) -> Tensor:
        """A sampler's kept draws as ``(chains, draws, *coords)``: the layout of
        :mod:`bdlkit.diagnostics`, whose functions also take the Result itself
        (``rhat_vehtari21(result)``). ``samples`` is ``(draws, chains, d)`` for a Target run
        with several chains (``(draws, d)`` for one); a network's draws are named tensors
        ``(draws, ...)`` of one chain: ``name`` picks one (``(1, draws, ...)``).

        Raises:
            ValueError: for a result that is not a sampler's, holds no draws, or a network
                result without a valid ``name``.
        """
        if self.kind != "sampler":
            raise ValueError(f"only a sampler's kept draws form chains; this is a {self.kind} "
                             "result: draw from it with result.sample(n)")
        samples = self.samples
        if samples is None:
            raise ValueError("this result holds no kept draws (none were kept, or it was "
                             "loaded without them)")
        if isinstance(samples, dict):
            if name not in samples:
                names = ", ".join(list(samples)[:6])
                raise ValueError(f"a network's draws are named tensors ({names}, ...): pick one "
                                 f"with result.chains_first(name), got {name!r}")
        elif name is not None:
            raise ValueError("a Target's draws are one tensor; call chains_first() without name")
        return arviz_export.chains_first(samples)["theta" if name is None else name]

    def sigma_summary(self) -> list[dict[str, float | str | int]] | None:
        """Per-tensor 10/50/90 % quantiles of a diagonal-Gaussian VI result's σ, then a row
        over all coordinates (:func:`bdlkit.families.diag_gaussian.sigma_summary`): how far
        the approximation is from a point estimate, layer by layer. ``None`` for results
        without an approximation and for non-diagonal ones (full-covariance GSM/BaM)."""
        draws = self.draws
        q = draws.approximation if isinstance(draws, ApproximationDraws) else None
        return diag_gaussian.sigma_summary(q.params) if isinstance(q, DiagGaussian) else None

    def _generator(self, generator: torch.Generator | int | None) -> torch.Generator:
        """``generator``, or one seeded from it, or from the run's seed (VI draws)."""
        if isinstance(generator, torch.Generator):
            return generator
        if generator is not None:
            return rng.generator(generator)
        return rng.generator(rng.fold_in(self.seed, DRAWS_SALT))

    # ------------------------------------------------------------------ draws
    def sample(self, n: int, generator: torch.Generator | int | None = None) -> TensorTree:
        """``n`` draws: a ``(n, d)`` tensor for a Target, a dict of ``(n, ...)`` for a model.

        The last ``n`` kept draws of a sampler, the first ``n`` members of an ensemble,
        ``n`` fresh draws of a VI approximation (from ``generator``: default the run's
        seed), or an optimiser's point repeated."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        return self.draws.take(n, self._generator(generator))

    # ------------------------------------------------------------------ prediction
    def iter_draws(self, num_samples: int = 32, chunk: int = 16,
                   generator: torch.Generator | int | None = None,
                   max_draws: int | None = None) -> Iterator[TensorTree]:
        """Single parameter draws to average over, streamed: a sampler's kept draws (a disk
        store shard by shard), ``num_samples`` draws of a VI approximation (``chunk`` at a
        time, seeded by the run's seed unless ``generator`` is given), every member of an
        ensemble, or an optimiser's point.

        Args:
            max_draws: at most this many draws (``None``: all): a sampler's kept draws thinned
                to ``max_draws`` evenly spaced ones ending at the last, an ensemble's first
                ``max_draws`` members, ``min(num_samples, max_draws)`` VI draws
                (:mod:`bdlkit.core.draws`).
        """
        return self.draws.stream(num_samples, self._generator(generator), chunk, max_draws)

    def num_streamed(self, num_samples: int = 32, max_draws: int | None = None) -> int:
        """How many draws :meth:`iter_draws` yields with these arguments (none is read)."""
        return self.draws.stream_count(num_samples, max_draws)

    def _check_model(self, num_samples: int, x: Tensor, where: str) -> None:
        """Refuse a prediction without a model, with no draws, or at inputs ``x`` that break
        the input contract (another per-example shape or dtype than the training inputs')."""
        if self.problem is None:
            raise ValueError("this result was loaded without its problem; pass problem= to load")
        if not isinstance(self.problem, BayesianModel):
            raise ValueError("predict() needs a BayesianModel result; for a Target use sample()")
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        if self.contract.inputs is not None:
            self.contract.inputs.check(x, f"Result.{where}")

    @torch.no_grad()
    def predictive(self, x: Tensor, y: Tensor | None = None, num_samples: int = 32,
                   chunk_size: int = 1024, max_draws: int | None = None,
                   progress: Callable[[int], None] | None = None,
                   ) -> ClassificationBMA | RegressionBMA:
        """The streaming BMA at ``x`` with its extras (:mod:`bdlkit.evaluation.predictive`): log
        probabilities, entropies and, with ``y``, per-draw metrics; or the Gaussian
        mixture's moments and its log density at ``y``.

        Args:
            max_draws: average over at most this many draws (see :meth:`iter_draws`).
            progress: called with ``len(x)`` after each draw's predictions (a progress bar's
                ``update``).
        """
        self._check_model(num_samples, x, "predictive")
        return bma(self.problem, self.iter_draws(num_samples, max_draws=max_draws), x, y,
                   chunk_size, progress=progress)

    def predict(self, x: Tensor, num_samples: int = 32, chunk_size: int = 1024,
                return_samples: bool = False) -> Any:
        """Bayesian model average at inputs ``x`` (see the module docstring).

        ``num_samples`` draws are used for VI (kept samples for samplers, all members
        for ensembles, the point for optimisers). Inputs are processed in chunks of ``chunk_size``; with
        ``buffers="batch_stats"`` normalisation uses each chunk's statistics, so keep
        chunks large. Returns class probabilities (for a Bernoulli likelihood p(y = 1)) or
        a GaussianPredictive, in the dtype of ``x`` (accumulated in float64).

        With ``return_samples=True`` returns a tuple ``(prediction, samples)``: the same
        prediction and a :class:`~bdlkit.evaluation.draw_predictions.PredictiveSamples` of
        the per-draw predictions stacked on a leading draw axis S, in the dtype of ``x``:
        ``samples.probs`` ``(S, n, K)`` (Bernoulli: ``(S, n)``) or ``samples.mean`` and
        ``samples.std`` ``(S, n, ...)``. Memory: S × n × K values (2 × S × n × ... for
        regression), unlike the streaming BMA, which holds one draw at a time.
        """
        self._check_model(num_samples, x, "predict")
        dtype = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
        if return_samples:
            out, samples = self._with_samples(x, num_samples, chunk_size, dtype)
        else:
            out, samples = self.predictive(x, num_samples=num_samples, chunk_size=chunk_size), None
        if isinstance(out, ClassificationBMA):
            bernoulli = getattr(self.problem.likelihood, "name", "") == "bernoulli"
            pred = (out.probs[:, 1] if bernoulli else out.probs).to(dtype)  # p(y = 1) for Bernoulli
        else:
            pred = GaussianPredictive(out.mean.to(dtype), out.var.to(dtype))
            if not bool(torch.isfinite(pred.var).all()):  # each draw's was finite (bma)
                raise NonFiniteError(
                    f"the predictive variance (up to {float(out.var.max()):.3g}) does not fit "
                    f"{dtype} (result.predictive(x).var holds it in float64). {NONFINITE_FIX}")
        return pred if samples is None else (pred, samples)

    def _with_samples(self, x: Tensor, num_samples: int, chunk_size: int,
                      dtype: torch.dtype, where: str = "predict") -> tuple[Any, PredictiveSamples]:
        self._check_model(num_samples, x, where)
        return bma_with_samples(self.problem, self.iter_draws(num_samples), x, chunk_size, dtype)

    def intervals(self, x: Tensor, level: float = 0.9, num_samples: int = 32,
                  chunk_size: int = 1024) -> tuple[Tensor, Tensor]:
        """The central ``level`` interval ``(lower, upper)`` of the regression predictive at
        ``x``: quantiles ``(1 ∓ level)/2`` of the BMA *mixture* (1/S) Σ_s N(μ_s, σ_s²)
        (:meth:`bdlkit.metrics.forecasting.GaussianMixture.interval`), not of a Gaussian with
        its moments. Tensors of the prediction's shape, in the dtype of ``x``. Holds the
        2 × S × n × ... per-draw means and stds."""
        if self.problem is not None and is_classification(self.problem):
            raise ValueError("intervals() is for regression (a Gaussian likelihood); for "
                             "class probabilities use predict()")
        if not 0 < level < 1:
            raise ValueError(f"level must be in (0, 1), got {level}")
        dtype = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
        _, s = self._with_samples(x, num_samples, chunk_size, torch.float64, "intervals")
        lower, upper = GaussianMixture(s.mean, s.std).interval(level)
        return lower.to(dtype), upper.to(dtype)

    def forecast(self, x: Tensor, num_samples: int = 32, chunk_size: int = 1024) -> Any:
        """The predictive of a forecaster at windows ``x (n, L, C)``: the mixture over draws
        of the per-draw Gaussians, a :class:`~bdlkit.metrics.forecasting.GaussianMixture`
        with ``mean``, ``var``, ``quantile(τ)``, ``interval(level)``, ``log_prob``, ``cdf``
        and ``crps`` (``docs/koopa_derivations.md`` §4)."""
        if self.problem is None:
            raise ValueError("this result was loaded without its problem; pass problem= to load")
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        if self.contract.inputs is not None:
            self.contract.inputs.check(x, "Result.forecast")
        return forecast_mixture(self.problem, self.iter_draws(num_samples), x, chunk_size)

    def to_arviz(self, x: Tensor | None = None, num_samples: int = 100,
                 chunk_size: int = 1024) -> Any:
        """The draws as an ``arviz.InferenceData`` (:mod:`bdlkit.evaluation.arviz_export`).

        ``posterior``: a sampler's kept draws ``(chain, draw, ...)`` (a Target's chains; a
        model's named tensors, one chain), an ensemble's members or ``num_samples`` draws
        of a VI approximation as one chain. ``sample_stats``: ``lp`` for a Target. With
        ``x``, ``posterior_predictive``: each draw's predictive at ``x`` (``probs``, or
        ``mean`` and ``std``). Needs ArviZ (``pip install 'bdlkit[diagnostics]'``)."""
        arviz_export.import_arviz()  # a clear ImportError before any work
        if x is not None:
            self._check_model(num_samples, x, "to_arviz")
        if self.kind == "optimizer":
            raise ValueError("an optimiser's result is one point, with no posterior draws; "
                             "use a sampler, VI or an ensemble")
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        draws = self.draws
        stacked = (draws.require() if isinstance(draws, KeptDraws)
                   else self.sample(num_samples if draws.count == 0 else draws.count))
        posterior = arviz_export.chains_first(stacked)
        stats = (arviz_export.target_log_density(self.problem, posterior)
                 if isinstance(self.problem, Target) else None)
        predictive = None
        if x is not None:
            singles = (index(stacked, s) for s in range(num_draws(stacked)))
            dtype = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
            _, predictive = bma_with_samples(self.problem, singles, x, chunk_size, dtype)
        return arviz_export.inference_data(posterior, stats, predictive,
                                           attrs={"method": self.method, "seed": self.seed})

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike) -> Path:
        """Write ``result.json``, ``state.safetensors`` and ``samples.safetensors`` under
        ``path``. ``result.json`` is written last and lists each tensor file with its
        SHA-256 (``files``), so :func:`bdlkit.load` refuses a damaged, swapped or missing
        file instead of reading other draws, or none."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        files: dict[str, str | None] = {}
        for name, content in (("state", self.state), ("samples", self.samples)):
            file = f"{name}.safetensors"
            if content is None:  # never leave a file of an earlier result behind
                (path / file).unlink(missing_ok=True)
                files[file] = None
            elif name == "state":
                files[file] = save_tensors(path / file, state_to_tensors(content))
            else:
                files[file] = save_tensors(path / file, content if isinstance(content, dict)
                                           else {"_": content})
        save_json(path / "result.json", {"format": FORMAT_VERSION, "config": self.config,
                                         "history": self.history, "files": files,
                                         "contract": self.contract.to_json()})
        return path
