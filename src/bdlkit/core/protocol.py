"""The protocols every inference problem and algorithm follows.

An *inference problem* (:class:`Problem`) is anything with a minibatch score oracle
``value_and_score(params, batch) -> (value, score)``: a :class:`bdlkit.Target` or a
:class:`bdlkit.BayesianModel`. ``value`` is an unbiased estimate of the log density
of the (tempered) posterior up to a constant, and ``score`` its gradient, with the
same pytree structure as ``params`` (see ``docs/conventions.md``).

An *algorithm* is built from a problem and hyperparameters by a module-level
``build(problem, **hyper)`` and exposes ``init`` and ``step``: a pure function of an
immutable state and a batch. :class:`Algorithm` declares everything the runner and the
result ask of it; :class:`AlgorithmBase` and its four kinds (:class:`Sampler`,
:class:`Optimizer`, :class:`Variational`, :class:`EnsembleBase`) give the defaults, and
``bdlkit.algorithms.register`` checks a method against them once (``docs/architecture.md``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
from torch import Tensor

from bdlkit.core.draws import ApproximationDraws, KeptDraws, MemberDraws, PointDraws
from bdlkit.core.tree import TensorTree, all_finite

Batch = Any  # a tuple (x, y) of tensors for models, None for targets
Info = dict[str, Any]  # what step returns beside the state: LOG_PROB and scalars to log
LOG_PROB = "log_prob"  # the one key every Info has: the step's (minibatch) log density,
# or None for a step that evaluated none it could report (e.g. a rejected update)
NONFINITE = "nonfinite"  # optional: what became NaN when a step sets LOG_PROB to NaN for a
# reason of its own (e.g. a flow's loss); the runner's message names it


@runtime_checkable
class ScoreOracle(Protocol):
    """``value, score = oracle(params, batch)``."""

    def __call__(self, params: TensorTree, batch: Batch) -> tuple[Tensor, TensorTree]: ...


@runtime_checkable
class Problem(Protocol):
    """What is inferred: a log density with a minibatch score oracle."""

    num_data: int
    temperature: float
    kld: float  # the KL discount: the likelihood weighted by 1/kld (1: none)

    @property
    def effective_num_data(self) -> float:
        """The number of examples the likelihood counts, N/kld, which every per-datum scale
        divides by (``docs/conventions.md``)."""
        ...

    def value_and_score(self, params: TensorTree, batch: Batch) -> tuple[Tensor, TensorTree]: ...

    def init_params(self, generator: torch.Generator) -> TensorTree: ...

    def validate_data(self, data: Any) -> None: ...


@runtime_checkable
class State(Protocol):
    """An immutable algorithm state (a frozen dataclass registered with optree)."""

    step: int


KINDS = ("optimizer", "sampler", "vi", "ensemble")
#: The kinds of problem a default may differ on (``AlgorithmBase.problem_defaults``): a
#: Target, or a model by its likelihood's task (``bdlkit.algorithms.options.problem_kind``).
PROBLEM_KINDS = ("target", "classification", "regression")


@runtime_checkable
class Approximation(Protocol):
    """A variational approximation q: sampling and log density."""

    def sample(self, n: int, generator: torch.Generator) -> TensorTree: ...

    def log_prob(self, theta: TensorTree) -> Tensor: ...


@runtime_checkable
class Algorithm(Protocol):
    """``state = init(params, generator=g)``; ``state, info = step(state, batch)``.

    ``info`` holds at least ``"log_prob"``, the step's (minibatch) log density, which the
    runner checks for NaN. The members below the three methods are the optional
    capabilities; :class:`AlgorithmBase` gives each its default, so every algorithm has
    all of them and nothing is probed.
    """

    name: str
    kind: str  # one of KINDS: what the algorithm returns
    problem: Problem
    full_batch: bool  # needs exact gradients: the runner feeds every row each step
    chooses_draws: bool  # keep(t) decides which draws are kept (no default burn-in/thin)
    collects_draws: bool  # its draws are the chain's states, kept in a sample store
    step_size_param: str  # the option named by the runner's NaN message
    objective: str  # the Info key of what it optimises, plotted first in history.png
    data_parallel: bool  # scores only through problem.value_and_score (what is all-reduced)
    flat_storage: bool  # steps on packed flat buffers through flat_twin(layout) (storage.py)
    is_finite: Any  # (state) -> bool: the runner's NaN check at checkpoints
    label: str  # how messages name it: the name, and a VI method's family
    VERSION: int | str  # of the update rule; a checkpoint of another version is refused
    problem_defaults: dict[str, dict[str, Any]]  # option defaults by kind of problem

    def init(self, params: TensorTree | None = None, *, generator: torch.Generator) -> State: ...

    def step(self, state: State, batch: Batch) -> tuple[State, Info]: ...

    def params(self, state: State) -> TensorTree:
        """The current point: the position of a chain, the optimum, the VI mean."""
        ...

    @property
    def warmup_steps(self) -> int:
        """Steps in which the algorithm still adapts itself (the minimum burn-in)."""
        ...

    def for_run(self, total_steps: int) -> Algorithm:
        """This algorithm with its run-length-dependent defaults bound (the runner calls
        it once)."""
        ...

    def keep(self, t: int) -> bool:
        """Whether the draw after ``t`` completed steps is offered to the store."""
        ...

    def draws(self, state: State, kept: Any) -> Any:
        """Where the result's draws come from (:mod:`bdlkit.core.draws`); ``kept`` is what
        a sampler run kept (a ``KeptDraws``, a store or stacked draws; unused by the other
        kinds)."""
        ...

    def hyperparameters(self) -> dict[str, Any]:
        """The options the algorithm was built with, by name."""
        ...

    def record(self) -> dict[str, Any]:
        """Name, kind and shown fields: what a checkpoint records to refuse another run."""
        ...

    def status(self, state: State) -> str:
        """``"ok"``, or why the run cannot usefully go on (e.g. GSM/BaM's
        ``"numerical_failure"`` after repeated rejected updates)."""
        ...


class AlgorithmBase:
    """The defaults of every optional capability of :class:`Algorithm`.

    An algorithm is a frozen dataclass deriving from one of :class:`Sampler`,
    :class:`Optimizer`, :class:`Variational` or :class:`EnsembleBase` and overriding
    only what it has: ``full_batch = True`` (HMC, NUTS), ``chooses_draws = True`` with a
    ``keep`` (cyclical SG-MCMC), a ``warmup_steps`` property, a ``for_run``, a ``VERSION``,
    ``data_parallel = False`` (it differentiates ``problem.log_posterior`` itself, which the
    data-parallel all-reduce does not reach: NUTS, Fisher VI).
    Its dataclass fields other than ``problem`` and ``name`` are its hyperparameters;
    fields declared ``field(init=False, repr=False)`` are derived members.
    """

    kind: ClassVar[str]
    full_batch: ClassVar[bool] = False
    chooses_draws: ClassVar[bool] = False
    collects_draws: ClassVar[bool] = False
    step_size_param: ClassVar[str] = "lr"
    #: the Info key of the quantity the method optimises (a sampler's or an optimiser's log
    #: density, a VI method's ELBO or its own divergence), which history.png plots first
    objective: ClassVar[str] = LOG_PROB
    data_parallel: ClassVar[bool] = True
    VERSION: ClassVar[int | str] = 1
    #: the options whose default differs on a kind of problem (one of PROBLEM_KINDS), by
    #: kind then option; ``build`` applies them where the caller leaves the option unset, and
    #: the dataclass field's default holds on every other kind (``docs/methods/index.md``)
    problem_defaults: ClassVar[dict[str, dict[str, Any]]] = {}

    @property
    def warmup_steps(self) -> int:
        return 0

    @property
    def flat_storage(self) -> bool:
        """Whether the state steps on flat storage, one contiguous buffer per state field
        stepped by ``flat_twin(layout)`` (:class:`bdlkit.algorithms.storage.FlatStorage`
        declares it for the element-wise methods)."""
        return False

    def is_finite(self, state: Any) -> bool:
        """Whether the state is free of NaN and inf (the runner checks it at checkpoints and
        at the end); by default, the point ``params(state)``."""
        return all_finite(self.params(state))  # type: ignore[attr-defined]

    @property
    def label(self) -> str:
        """How messages name the method (its name; a VI method adds its family)."""
        return self.name  # type: ignore[attr-defined]

    def for_run(self, total_steps: int) -> Any:
        return self

    def keep(self, t: int) -> bool:
        return True

    def status(self, state: Any) -> str:
        return "ok"

    def hyperparameters(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in hyperparameter_fields(type(self))}

    def record(self) -> dict[str, Any]:
        """What identifies this algorithm in a checkpoint: its name, kind and every shown
        field (the options and fixed constants; derived members are ``repr=False``)."""
        shown = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)  # type: ignore[arg-type]
                 if f.name != "problem" and f.repr}
        return {**shown, "name": self.name, "kind": self.kind}  # type: ignore[attr-defined]


def hyperparameter_fields(cls: type) -> list[dataclasses.Field]:
    """The dataclass fields of ``cls`` a user sets: all but ``problem``, ``name`` and the
    derived members (``init=False``)."""
    return [f for f in dataclasses.fields(cls) if f.init and f.name not in ("problem", "name")]


class Sampler(AlgorithmBase):
    """An MCMC or SG-MCMC method: its draws are states of the chain, kept in a store."""

    kind: ClassVar[str] = "sampler"
    collects_draws: ClassVar[bool] = True

    def draws(self, state: Any, kept: Any) -> KeptDraws:
        return kept if isinstance(kept, KeptDraws) else KeptDraws(kept)


class Optimizer(AlgorithmBase):
    """A point estimate (MAP): one draw, the optimum."""

    kind: ClassVar[str] = "optimizer"

    def draws(self, state: Any, kept: Any) -> PointDraws:
        return PointDraws(self.params(state))  # type: ignore[attr-defined]


class Variational(AlgorithmBase):
    """A VI method: its draws are fresh draws of ``approximation(state)``."""

    kind: ClassVar[str] = "vi"
    #: each step logs ``elbo``, the estimate E_q[log p] + H[q] at the q its draws came from
    objective: ClassVar[str] = "elbo"
    #: the options that make q₀ the Laplace approximation when bdlkit.infer starts VI on a
    #: Target's standardised coordinates (unit curvature there), unless the user sets them
    laplace_start: ClassVar[dict[str, Any]] = {"init_std": 1.0}
    #: whether σ₀ (``init_std``) is a guess the run is expected to move away from (the
    #: end-of-run check warns when it did not); False where σ₀ is an initial curvature
    guessed_init_std: ClassVar[bool] = True

    def approximation(self, state: Any) -> Approximation:
        raise NotImplementedError

    def draws(self, state: Any, kept: Any) -> ApproximationDraws:
        return ApproximationDraws(self.approximation(state))


class EnsembleBase(AlgorithmBase):
    """A deep ensemble: its draws are its members (``member_stack(state)``)."""

    kind: ClassVar[str] = "ensemble"

    def member_stack(self, state: Any) -> TensorTree:
        raise NotImplementedError

    def draws(self, state: Any, kept: Any) -> MemberDraws:
        return MemberDraws(self.member_stack(state))
