"""Compiled steps (``compile=True``): chunks of an algorithm's steps as one graph.

A *chunk* of K steps is one function, compiled once by ``torch.compile``: the state, with
its generator replaced by a :class:`~bdlkit.core.rng.NoiseTape` that holds the chunk's
standard normals and its step counter by a 0-d tensor, goes through ``algorithm.step`` K
times, unrolled; the chunk returns the new state, the draws after the steps the runner
keeps (stacked) and the last step's info. The algorithms are not rewritten for it: their ``step`` runs unchanged on the tape.

- On a :class:`~bdlkit.Target`, K = :data:`CHUNK_STEPS` and the chunk must be one whole
  graph (``fullgraph=True``): the log density, its score by ``torch.func`` and the
  update fuse into a few kernels, and the Python work of K steps (the runner's
  bookkeeping included, done once per chunk) becomes one call.
- On a network, K = 1 and the graph may break: the forward/backward runs eagerly (the
  oracles are excluded from compilation) and the element-wise update around it is
  compiled, on the flat storage of :mod:`bdlkit.algorithms.storage`.

Noise: a chunk's normals are drawn before it from the state's generator in one call, and
handed out in the order the steps ask. So the compiled chunk and the same chunk run
eagerly give the same iterates to float rounding (tested for every element-wise method);
a compiled run is deterministic and resumes bit-exactly (it checkpoints at chunk ends). It
draws different normals from an eager run (one call per chunk, not one per step): the
run's fingerprint records the chunk size, and a compiled and an eager run do not resume
each other.

Fallback: where a chunk cannot be compiled (a Python decision on the step counter in a
whole graph, such as a step-size schedule or a cyclical sampler's phase; random draws
other than normals; a backend failure) the run warns once, naming the reason, and goes on
eagerly from the same state.

Written here because ``torch.compile`` compiles functions, not sampler loops: the
unrolling, the noise tape and the fallback are bdlkit's. (torch's prototype ``scan``
operator compiles the loop without unrolling it, but on CPU runs it as a Python loop:
6.5 µs per step on the 3-D Gaussian against 1.1 µs unrolled.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import sys
import time
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from bdlkit.core import rng
from bdlkit.core.errors import caller_stacklevel
from bdlkit.core.flat import FlatLayout, pack, unpack
from bdlkit.core.protocol import Info
from bdlkit.core.tree import tree_map
from bdlkit.problems import Target

#: The steps per compiled chunk on a Target. 100 unrolled steps compile in 7-30 s on
#: this project's 2-core machine and then run at about 2 µs per step on the 3-D Gaussian.
CHUNK_STEPS = 100


def chunk_size(whole_graph: bool) -> int:
    """Steps per chunk by default: :data:`CHUNK_STEPS` for a whole graph (a Target), else 1."""
    return CHUNK_STEPS if whole_graph else 1


class CompiledSteps:
    """Runs chunks of ``algorithm``'s steps compiled (module docstring).

    Args:
        algorithm: the algorithm the runner drives.
        whole_graph: the chunk must be one graph (a Target) or may break (a network).
        size: steps per chunk (default: :data:`CHUNK_STEPS` for a whole graph, else 1).
        compiler: maps the chunk function to what runs (default ``torch.compile`` with
            ``fullgraph=whole_graph``; the identity runs the same chunks eagerly).
    """

    def __init__(self, algorithm: Any, *, whole_graph: bool, size: int | None = None,
                 compiler: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None
                 ) -> None:
        self.algorithm = algorithm
        self.compiler = compiler or (lambda fn: torch.compile(fn, fullgraph=whole_graph))
        self.size = int(size or chunk_size(whole_graph))
        if self.size < 1:
            raise ValueError(f"a compiled chunk needs at least one step, got {size}")
        self.compile_s = 0.0
        self.fallback: str | None = None  # why the run went on eagerly
        self._normals: int | None = None  # standard normals one step draws
        self._compiled: dict[tuple[int, tuple[int, ...]], Callable[..., Any]] = {}

    def report(self) -> dict[str, Any]:
        """What a run's config records: the chunk size, the compile time, any fallback."""
        return {"chunk_steps": self.size, "compile_s": round(self.compile_s, 3),
                "fallback": self.fallback}

    def run(self, state: Any, t: int, batches: Sequence[Any] | None,
            keep: tuple[int, ...] = ()) -> tuple[Any, Tensor | None, Info] | None:
        """``size`` steps from ``state`` after ``t`` steps on ``batches`` (None: a Target's,
        none): the new state, the draws after steps ``t + 1 + j`` for ``j`` in ``keep``,
        stacked (None when ``keep`` is empty), and the last info; None when the chunk cannot
        run compiled (then the caller steps eagerly, and so does every later call).

        ``keep`` is part of the graph: a runner asks for the same positions in every chunk
        (those its thinning can keep), so one graph serves the whole run."""
        if self.fallback is not None:
            return None
        target, packed, restore = self._on_storage(state)
        if keep and packed is not state:
            raise ValueError("draws are returned for unpacked states only (a Target's); a "
                             "one-step chunk's draw is its state")
        noisy = hasattr(packed, "rng_state")  # MAP draws nothing
        try:
            if self._normals is None:
                self._normals = (self._count_normals(target, packed, t, batches and batches[0])
                                 if noisy else 0)
            gen, block = None, None
            if noisy:
                gen = rng.from_state(state.rng_state, device=self._device)
                block = torch.randn(self.size * self._normals, generator=gen,
                                    dtype=self._dtype, device=self._device)
            key = (id(target), tuple(keep))
            first = key not in self._compiled
            chunk = self._compiled.get(key) or self._compile(target, noisy, key)
            start = time.perf_counter()
            with warnings.catch_warnings() if first else contextlib.nullcontext():
                if first:  # torch's own deprecations, from inside inductor
                    warnings.filterwarnings("ignore", message=".*torch.jit.script.* is "
                                            "deprecated")
                out, draws, info = chunk(_replace(packed, step=_counter(t),
                                                  rng_state=None if noisy else _KEEP),
                                         block, batches)
            if first:
                self.compile_s += time.perf_counter() - start
        except Exception as err:  # noqa: BLE001 - any failure to compile means: go eager
            self._give_up(err)
            return None
        new = _replace(out, step=t + self.size,
                       rng_state=rng.state_of(gen) if noisy else _KEEP)
        return restore(new), draws, info

    # ------------------------------------------------------------------ internals
    def _on_storage(self, state: Any) -> tuple[Any, Any, Callable[[Any], Any]]:
        """The algorithm that steps the packed state (flat storage's twin), that state,
        and the map back (:mod:`bdlkit.algorithms.storage`)."""
        algorithm = self.algorithm
        if algorithm.flat_storage:
            layout = FlatLayout.of(algorithm.params(state))
            if layout is not None:
                return (algorithm.flat_twin(layout), pack(layout, state),
                        lambda new: unpack(layout, state, new))
        return algorithm, state, lambda new: new

    def _count_normals(self, target: Any, state: Any, t: int, batch: Any) -> int:
        """How many normals one step draws (one eager step on a counting tape)."""
        tape = rng.NoiseTape(None)
        target.step(dataclasses.replace(state, rng_state=tape, step=_counter(t)), batch)
        if tape.used == 0:
            raise TypeError("the step draws no normals from its generator (or other kinds "
                            "of random numbers, which a noise tape does not hold)")
        self._dtype, self._device = tape.dtype, tape.device
        return tape.used

    def _compile(self, target: Any, noisy: bool, key: tuple[int, tuple[int, ...]]
                 ) -> Callable[..., Any]:
        size, keep = self.size, frozenset(key[1])

        def chunk(state: Any, block: Tensor | None, batches: Sequence[Any] | None
                  ) -> tuple[Any, Any, Info]:
            if noisy:
                state = dataclasses.replace(state, rng_state=rng.NoiseTape(block))
            draws, info = [], {}
            for i in range(size):
                state, info = target.step(state, None if batches is None else batches[i])
                if i in keep:
                    draws.append(target.params(state))
            stacked = tree_map(lambda *xs: torch.stack(xs), *draws) if draws else None
            return _replace(state, rng_state=None if noisy else _KEEP), stacked, info

        compiled = self.compiler(_own_code(chunk))
        self._compiled[key] = compiled
        return compiled

    def _give_up(self, err: Exception) -> None:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        self.fallback = f"{type(err).__name__}: {reason}"[:300]
        warnings.warn(
            f"compile=True: {self.algorithm.label} cannot run as compiled chunks of "
            f"{self.size} step(s) ({self.fallback}); the run goes on eagerly. A whole graph "
            "cannot hold a Python decision on the step or on a value (a step-size schedule, "
            "a cyclical phase, an accept/reject test); an error of the problem itself is "
            "raised again by the eager step",
            stacklevel=caller_stacklevel(),
        )


def positions(size: int, t: int, burnin: int, thin: int) -> tuple[int, ...]:
    """The positions j in a chunk of ``size`` steps after ``t`` whose draws (after step
    ``t + 1 + j``) a store with ``burnin`` and ``thin`` may keep: the same for every chunk
    of a run (t a multiple of ``size``), one in ``size`` when ``thin`` is a multiple of it."""
    step = math.gcd(size, thin)
    return tuple(range((burnin - 1 - t) % step, size, step))


def _own_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a code object of its own: torch.compile keeps its compiled graphs, and
    its limit of 8 recompilations, per code object, and every chunk is a closure of the
    same code; without a copy a process's ninth compiled run would fall back to eager."""
    name = f"{fn.__name__}_{next(_CODES)}"  # a name of its own too: torch keys some state
    names = {"co_name": name} | ({"co_qualname": name} if sys.version_info >= (3, 11) else {})
    return types.FunctionType(fn.__code__.replace(**names), fn.__globals__, name,
                              fn.__defaults__, fn.__closure__)


_CODES = itertools.count()


def _counter(t: int) -> Tensor:
    """The step counter inside a chunk: a float64 0-d tensor (a graph input, not a constant
    to recompile for), so ``b ** (step + 1)`` is computed in float64 as with a Python int."""
    return torch.tensor(float(t), dtype=torch.float64)


_KEEP = object()  # a field _replace leaves as it is


def _replace(state: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` with the fields given as ``_KEEP`` left out."""
    return dataclasses.replace(state, **{k: v for k, v in changes.items() if v is not _KEEP})


__all__ = ["CHUNK_STEPS", "CompiledSteps", "chunk_size", "positions"]


def advance(algorithm: Any, problem: Any, batches: Any, store: Any, state: Any, t: int,
            total: int, compiled: CompiledSteps | None
            ) -> tuple[Any, int, dict[int, Any] | None, dict[str, Any]]:
    """The runner's next step, or chunk of steps when compiled and the run has room for
    one: ``(state, steps done, {step: draw} the store may keep in a chunk, last info)``.

    Args:
        algorithm, problem: the run's.
        batches: the run's :class:`~bdlkit.engine.batches.Batches` (``batches(t)``).
        store: the sample store, or None (optimisers, VI).
        state, t, total: the state after ``t`` steps of ``total``.
        compiled: the compiled steps, or None for eager ones.
    """
    size = compiled.size if compiled is not None and compiled.fallback is None else 0
    drawn = None
    if size and t + size <= total:
        drawn = (None if isinstance(problem, Target)
                 else [batches(s) for s in range(t, t + size)])
        keep = () if store is None or size == 1 else positions(
            size, t, store.burnin, store.thin)  # one step: the state is the draw
        ran = compiled.run(state, t, drawn, keep)
        if ran is not None:
            new_state, draws, info = ran
            kept = {t + 1 + j: draws[i] for i, j in enumerate(keep)} if keep else None
            return new_state, size, kept, info
    batch = drawn[0] if drawn else batches(t)  # a batch is drawn once
    new_state, info = algorithm.step(state, batch)
    return new_state, 1, None, info
