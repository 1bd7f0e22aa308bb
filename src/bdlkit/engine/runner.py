"""``bdlkit.Runner``: drive any algorithm over data, with progress, logs and checkpoints.

The loop, for ``t = start, ..., total - 1``::

    batch = batches(t)                      # a pure function of (seed, t): bdlkit.engine.batches
    state, info = algorithm.step(state, batch)
    stop if info["log_prob"] is NaN/inf     # last good checkpoint stays on disk
    store.offer(t + 1, params(state))       # burn-in, thinning, cap: bdlkit.engine.collect
    log (log.jsonl, callbacks) / evaluate / checkpoint when due
    at the end of a VI run: warn if σ never moved or q is still moving (bdlkit.engine.vi_checks)

With a ``run_dir`` the runner writes ``log.jsonl`` (one JSON line per logged step)
and ``checkpoints/step-<t>.safetensors`` (every ``checkpoint_every`` steps, every
``checkpoint_seconds`` seconds, on Ctrl-C and at the end). ``fit(resume=True)``
restores the newest checkpoint and continues bit-exactly: the trajectory, kept
samples and log equal those of an uninterrupted run with the same seed.

On several data-parallel ranks (``topology``, :mod:`bdlkit.core.distributed`) every rank
runs this loop on its shard of each batch with the model's oracle all-reduced, so the
replicas take identical steps; the writer (replica 0) alone writes the log, the draws
and the checkpoints, every replica checks at each checkpoint that its state is the
writer's, and the ranks decide together when to checkpoint or stop.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from bdlkit.core import rng
from bdlkit.core.distributed import SINGLE, Topology
from bdlkit.core.errors import NonFiniteError
from bdlkit.core.lock import run_lock
from bdlkit.core.protocol import LOG_PROB, NONFINITE, Algorithm, AlgorithmBase, Variational
from bdlkit.core.serialization import (
    remove_stale_temps,
)
from bdlkit.core.tree import TensorTree, max_abs
from bdlkit.engine import checkpointing, replicas, vi_checks
from bdlkit.engine.batches import Batches
from bdlkit.engine.callbacks import Callback, Callbacks, LogEvent
from bdlkit.engine.checkpoint import (
    latest_checkpoint,
)
from bdlkit.engine.collect import SampleStore, default_store
from bdlkit.engine.collect.defaults import store_options
from bdlkit.engine.compiled import CompiledSteps, advance, chunk_size
from bdlkit.engine.result import Result
from bdlkit.engine.resume import (
    SANE_FACTOR,
    check_fingerprint,
    nan_message,
    run_fingerprint,
)
from bdlkit.engine.runlog import LogWriter, due, log_entry, postfix
from bdlkit.engine.signals import Interrupted, deferred_stop
from bdlkit.families.diag_gaussian import DiagGaussianParams
from bdlkit.families.full_gaussian import FullGaussianParams
from bdlkit.problems import Target

DATA_SEED_SALT = 0xDA7A
#: ``progress="auto"`` shows the bar once a run has lasted this long (a terminal only)
AUTO_PROGRESS_DELAY_S = 3.0


class Runner:
    """Run ``algorithm`` for a number of steps or epochs (see the module docstring).

    The runner is built whole: with ``steps`` or ``epochs`` it binds the run length to
    the algorithm (``algorithm.for_run``), builds the sampler's store and fixes the
    checkpoint cadence here, once; nothing outside assigns its attributes. (Without a
    length, ``fit(steps=...)`` binds it on the first call.)

    Args:
        algorithm: any object following :class:`~bdlkit.core.protocol.Algorithm`.
        data: training data for a model (Dataset, ``(x, y)`` or DataLoader); None for a
            Target. Validated once, here (``problem.validate_data``).
        steps, epochs: the run length (at most one).
        seed: seeds initialisation (through ``algorithm.init``) and data order.
        batch_size: minibatch size for tensor data.
        store: where sampler draws go (default: :func:`default_store` with ``burnin``,
            ``thin`` and ``max_samples``, under ``run_dir/samples`` with a run_dir);
            ignored by optimisers and VI.
        burnin, thin, max_samples: the default store's settings (None: its defaults).
        run_dir: folder for ``log.jsonl``, ``checkpoints/`` (and ``samples/`` for the
            default store); None keeps everything in memory.
        init, chains: starting parameters (default ``problem.init_params``) and the number
            of chains on a Target.
        log_every: log every this many steps (and the last one).
        eval_fn, eval_every: ``eval_fn(params) -> {name: value}`` on held-out data every
            ``eval_every`` steps, logged as ``eval/<name>``.
        checkpoint_every, checkpoint_seconds: checkpoint cadence in steps and/or seconds.
        checkpoints_per_run: without ``checkpoint_every``, checkpoint this many times per
            run (``bdlkit fit`` uses 10); None: only at the end and by time.
        progress: show a tqdm bar with ETA, the log density and the latest evaluation;
            ``"auto"``: only on a terminal, once the run has lasted ``AUTO_PROGRESS_DELAY_S``.
        warm_start: q₀ of a VI run is a Gaussian approximation, not a point with σ =
            ``init_std`` (default: whether ``init`` is a Gaussian λ); it skips the σ check
            of :mod:`bdlkit.engine.vi_checks`, which every VI run gets at the end.
        callbacks: called with each logged entry and the Result, not saved in checkpoints
            (:mod:`bdlkit.engine.callbacks`: the protocol, and how a failing one stops).
        compile: run the steps compiled (:mod:`bdlkit.engine.compiled`): on a Target in
            unrolled chunks of ``CHUNK_STEPS`` steps, logged, evaluated, checkpointed and
            offered to callbacks at chunk ends only; on a network step by step with the
            element-wise update compiled. Falls back to eager steps with a warning where
            the step cannot be compiled.
        pinned: what else the run's checkpoints record and a resume must find unchanged
            (field -> text: a run directory's data digest, thread count and logging
            options, :mod:`bdlkit.runs.run_record`), compared with the fingerprint.
        topology: this process's place in a multi-process run (default: alone). With
            several data-parallel ranks, ``batch_size`` is per rank (the step's minibatch
            has ``batch_size × D`` rows), the model's oracle is made data parallel
            (:meth:`bdlkit.BayesianModel.shard_over`) and only the writer writes
            ``run_dir``; each chain's ranks pass the same ``seed``.
    """

    def __init__(
        self,
        algorithm: Algorithm,
        data: Any = None,
        *,
        steps: int | None = None,
        epochs: int | None = None,
        seed: int = 0,
        batch_size: int = 128,
        store: SampleStore | None = None,
        burnin: int | None = None,
        thin: int | None = None,
        max_samples: int | None = None,
        run_dir: str | os.PathLike | None = None,
        init: TensorTree | None = None,
        chains: int | None = None,
        log_every: int = 1,
        eval_fn: Callable[[TensorTree], dict[str, float]] | None = None,
        eval_every: int | None = None,
        checkpoint_every: int | None = None,
        checkpoint_seconds: float | None = None,
        checkpoints_per_run: int | None = None,
        progress: bool | str = False,
        warm_start: bool | None = None,
        callbacks: Sequence[Callback] | None = None,
        compile: bool = False,
        topology: Topology | None = None,
        pinned: dict[str, str] | None = None,
    ) -> None:
        for name, value in (("log_every", log_every), ("eval_every", eval_every),
                            ("checkpoint_every", checkpoint_every)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if checkpoint_seconds is not None and not checkpoint_seconds > 0:
            raise ValueError(f"checkpoint_seconds must be > 0, got {checkpoint_seconds}")
        if eval_every is not None and eval_fn is None:
            raise ValueError("eval_every needs eval_fn")
        if chains is not None and chains < 1:
            raise ValueError(f"chains must be >= 1, got {chains}")
        if not isinstance(algorithm, AlgorithmBase):
            raise TypeError(
                f"{type(algorithm).__name__} is not a bdlkit algorithm: derive it from "
                "bdlkit.core.protocol.Sampler, Optimizer, Variational or EnsembleBase, which "
                "declare what the runner asks of it (docs/architecture.md)"
            )
        if store is not None and any(v is not None for v in (burnin, thin, max_samples)):
            raise ValueError("give either store= or burnin/thin/max_samples (the settings of "
                             "the default store), not both: set them on the store itself")
        self.algorithm = algorithm
        self.problem = algorithm.problem
        self.problem.validate_data(data)
        self.data = data
        self.seed = int(seed)
        self.topology = topology = topology or SINGLE
        self.writes = topology.writer
        ranks = topology.data_size
        if topology.data_parallel:  # (fit() makes the oracle data parallel while it runs)
            replicas.check_data_parallel(algorithm, data, compile)
        rows = batch_size * ranks  # the step's minibatch, over all ranks
        self.batches = Batches(self.problem, data, rows, rng.fold_in(seed, DATA_SEED_SALT),
                               (topology.data_rank, ranks))
        if algorithm.full_batch:  # HMC, NUTS: exact gradients
            rows = self.batches.use_every_row(algorithm.name, rows)
        self.batch_size, self.minibatch_rows = -(-rows // ranks), rows
        self.store = store
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.init, self.chains = init, chains
        self.log_every, self.eval_fn, self.eval_every = log_every, eval_fn, eval_every
        self.checkpoint_every, self.checkpoint_seconds = checkpoint_every, checkpoint_seconds
        if progress not in (True, False, "auto"):
            raise ValueError(f"progress must be True, False or 'auto', got {progress!r}")
        self.progress, self.callbacks = progress, Callbacks.of(callbacks)
        self.warm_start = (isinstance(init, (DiagGaussianParams, FullGaussianParams))
                           if warm_start is None else warm_start)
        self.last_checkpoint: Path | None = None
        self.compile, self.compiled = bool(compile), None
        self.pinned = dict(pinned or {})
        if max_samples is not None and max_samples < 1:
            raise ValueError(f"max_samples must be >= 1, got {max_samples}")
        self._store_settings = {"burnin": burnin, "thin": thin, "max_samples": max_samples}
        self._checkpoints_per_run = checkpoints_per_run
        self.total: int | None = None
        if steps is not None or epochs is not None:
            self._bind(self.num_steps(steps, epochs))

    def _bind(self, total: int) -> None:
        """Fix the run length: bind it to the algorithm, build the default store, set the
        checkpoint cadence. Called once (a second, different length is refused)."""
        if self.total is not None:
            if total != self.total:
                raise ValueError(f"this runner was built for {self.total} steps; fit() asked "
                                 f"for {total}: build a new Runner for another run length")
            return
        self.total = total
        self.algorithm = self.algorithm.for_run(total)  # e.g. cyclical cycle_steps
        if self.algorithm.collects_draws and self.store is None:
            self.store = default_store(total, isinstance(self.problem, Target), self.run_dir,
                                       **self._store_settings, **store_options(self.algorithm))
        if self.checkpoint_every is None and self._checkpoints_per_run:
            self.checkpoint_every = max(1, total // self._checkpoints_per_run)

    # ------------------------------------------------------------------ public
    def num_steps(self, steps: int | None = None, epochs: int | None = None) -> int:
        """Total steps for ``steps=`` or ``epochs=`` (exactly one)."""
        return self.batches.num_steps(steps, epochs)

    def initial_state(self) -> Any:
        """``algorithm.init`` at the seeded initial parameters (also the resume template)."""
        gen = rng.generator(self.seed)
        init = self.init
        if init is None:
            init = (self.problem.init_params(gen, self.chains) if self.chains
                    else self.problem.init_params(gen))
        return self.algorithm.init(init, generator=gen)

    def fit(
        self,
        steps: int | None = None,
        epochs: int | None = None,
        *,
        resume: bool = False,
        config: dict[str, Any] | None = None,
        changed: dict[str, int] | None = None,
    ) -> Result:
        """Run to the runner's length (or ``steps``/``epochs`` given here, when it was built
        without one) in total; ``resume=True`` continues from ``run_dir``, the newest
        checkpoint whose checksum holds. ``changed`` maps hyperparameters deliberately
        given new values (e.g. a smaller ``lr`` after a NaN stop) to the step of the
        change: checkpoints up to that step may hold the old value; any other difference
        from the checkpoint is refused. The run folder is locked
        (:mod:`bdlkit.core.lock`) while the runner writes it."""
        if steps is not None or epochs is not None or self.total is None:
            self._bind(self.num_steps(steps, epochs))
        self.changed = dict(changed or {})
        self._start_signal = replicas.StartSignal(self.topology, self.problem)
        with self._start_signal.while_fitting():
            if self.run_dir is None or not self.writes:  # the writer alone locks and writes
                return self._fit(resume, config)
            with run_lock(self.run_dir, f"fitting {self.algorithm.name}"):
                return self._fit(resume, config)

    def _fit(self, resume: bool, config: dict[str, Any] | None) -> Result:
        total = self.total
        sampler = self.algorithm.collects_draws
        vi = isinstance(self.algorithm, Variational)
        state, start, history, elapsed = self._start(total, resume)
        self.log = log = (LogWriter(self.run_dir / "log.jsonl", history)  # (chained digests)
                           if self.run_dir and self.writes else None)
        method = self.algorithm.name
        self.callbacks.start(start, total, history, method)
        self._start_signal.send(start)  # the replicas start with the writer (its step)
        auto = self.progress == "auto"
        bar = tqdm(total=total, initial=start, desc=method, dynamic_ncols=True,
                   disable=not self.progress or (auto and not sys.stderr.isatty()),
                   delay=AUTO_PROGRESS_DELAY_S if auto else 0)
        clock = time.perf_counter()
        last_ckpt_time = clock
        t = start
        compiled = self.compiled = (CompiledSteps(self.algorithm, whole_graph=isinstance(
            self.problem, Target)) if self.compile else None)
        data_parallel = self.topology.data_parallel
        with deferred_stop() as interrupted:
            while t < total:
                new_state, done, draws, info = advance(
                    self.algorithm, self.problem, self.batches, self.store, state, t, total,
                    compiled)
                if LOG_PROB not in info:
                    raise TypeError(f"{method}.step returned an info without {LOG_PROB!r}, the "
                                    "step's log density the runner checks for NaN; add it "
                                    "(bdlkit.core.protocol.Algorithm)")
                before, t = t, t + done
                info = self._check_finite(info, t)
                if done > 1 and not self.algorithm.is_finite(new_state):  # a NaN stays NaN
                    raise NonFiniteError(self.nan_stop_message("the parameters", t))
                state = new_state
                if sampler and self.writes:
                    self._offer(state, draws, before, t)
                entry = log_entry(info, t, total, elapsed + time.perf_counter() - clock,
                                  before, self.log_every, self.eval_every,
                                  lambda s=state: self.eval_fn(self.algorithm.params(s)))
                failed = None
                if entry is not None:
                    history.append(entry)
                    if log is not None:
                        log.append(entry)
                    if self.callbacks.items:
                        failed = self.callbacks.log(LogEvent(t, total, dict(entry), method))
                    if not bar.disable:  # a disabled bar still formats its postfix
                        bar.set_postfix(postfix(entry), refresh=False)
                if not bar.disable:
                    bar.update(t - before)
                now = time.perf_counter()
                checkpoint_due = due(self.checkpoint_every, before, t) or (
                    self.checkpoint_seconds is not None
                    and now - last_ckpt_time >= self.checkpoint_seconds
                )
                signal, failed_elsewhere = interrupted(), False
                if data_parallel:  # decided together: no rank waits alone
                    checkpoint_due, signal, failed_elsewhere = replicas.decide_together(
                        self.topology, self.problem, checkpoint_due, signal, failed is not None)
                stop = signal is not None or failed is not None or failed_elsewhere
                if self.run_dir is not None and (checkpoint_due or t == total or stop):
                    checkpointing.write(self, state, t, total, elapsed + now - clock)
                    last_ckpt_time = now
                if failed is not None:  # the step is logged and checkpointed: now stop
                    bar.close()
                    raise Callbacks.log_error(failed, t, total, self.last_checkpoint, self.run_dir)
                if failed_elsewhere:
                    bar.close()
                    raise replicas.stopped_by_another(self.topology, t)
                if signal is not None and t < total:
                    bar.close()
                    raise Interrupted(t, self.last_checkpoint, signal)
        bar.close()
        if not self.algorithm.is_finite(state):
            raise NonFiniteError(self.nan_stop_message("the parameters", total))
        if sampler and self.run_dir is None:
            self.store.flush()  # its last shard (with a run_dir, the final checkpoint did)
        run_config = {
            "method": method, "kind": self.algorithm.kind, "seed": self.seed, "steps": total,
            "batch_size": self.batch_size, "chains": self.chains,
            **{k: (getattr(self.store, k) if sampler else None)
               for k in ("burnin", "thin", "max_samples")},
            "wall_time_s": elapsed + time.perf_counter() - clock, "problem": repr(self.problem),
            **({"compile": compiled.report()} if compiled else {}), **(config or {}),
        }
        if vi and self.writes:
            vi_checks.warn_if_unfinished(self.algorithm, state, warm_start=self.warm_start,
                                         total=total)
        store = self.store if sampler else None
        result = Result(self.problem, self.algorithm, state, store, history, run_config)
        self.callbacks.end(result, total, self.last_checkpoint)
        return result

    def fingerprint(self) -> dict[str, str]:
        """What must not change between a run and its resume, as text for the checkpoint:
        the algorithm's name, kind and shown fields (its options and fixed constants; the
        derived members are ``repr=False``), the version of its update rule
        (``VERSION``), the problem, the batch size, the chains, the sample store's
        burn-in, thinning and cap, and the caller's ``pinned`` fields."""
        # the step's minibatch over all data-parallel ranks: the same run read back in one
        # process (bdlkit evaluate) has the same fingerprint
        data = (f"batch_size={self.minibatch_rows}, rows={self.batches.num_rows}, "
                f"chains={self.chains}")
        # a compiled run draws its normals a chunk at a time (bdlkit.engine.compiled)
        compiled = (f"chunks of {chunk_size(isinstance(self.problem, Target))}"
                    if self.compile else "off")
        return run_fingerprint(self.algorithm, self.problem, data, self.store, compiled,
                               self.pinned)

    def check_checkpoint(self, meta: dict[str, Any], path: Path,
                         changed: dict[str, int] | None = None,
                         fix: str = "resume with the run's own configuration") -> None:
        """Refuse checkpoint ``path`` unless this runner (method, seed, length and
        :meth:`fingerprint`) wrote it; a hyperparameter in ``changed`` (name -> step of the
        change) is not compared in checkpoints written up to that step."""
        step = int(meta.get("step", 0))
        lenient = tuple(k for k, at in (changed or {}).items() if at is None or step <= at)
        expected = {"method": self.algorithm.name, "seed": self.seed,
                    "total_steps": self.total, **self.fingerprint()}
        check_fingerprint(meta, expected, path, self.algorithm.name, lenient, fix)

    # ------------------------------------------------------------------ internals
    def _start(self, total: int, resume: bool) -> tuple[Any, int, list[dict], float]:
        if not self.writes and not resume:  # a replica waits for its writer's start
            replicas.wait_for_start(self.topology, self.problem)
        state = self.initial_state()
        self.sane_bound = SANE_FACTOR * max(1.0, max_abs(self.algorithm.params(state)))
        folder = self.run_dir / "checkpoints" if self.run_dir is not None else None
        if folder is not None and self.writes:
            remove_stale_temps(folder)  # left by a writer killed mid-write
        if not resume:  # (the writer refuses; another rank may see files it will replace)
            if folder is not None and self.writes and latest_checkpoint(folder):
                raise FileExistsError(
                    f"{self.run_dir} already holds checkpoints of a run: pass resume=True to "
                    "continue it, or use a new run_dir"
                )
            return state, 0, [], 0.0
        if folder is None:
            raise ValueError("resume=True needs the run_dir of the interrupted run")
        return checkpointing.restore(self, state, folder)

    def _offer(self, state: Any, draws: dict[int, Any] | None, before: int, t: int) -> None:
        """Offer the draws after steps ``before + 1 .. t`` that are kept to the store."""
        for s in self.store.wanted(before + 1, t + 1):
            if self.algorithm.keep(s):
                self.store.offer(s, self.algorithm.params(state) if draws is None else draws[s])

    def _check_finite(self, info: dict[str, Any], t: int) -> dict[str, Any]:
        """Stop at a non-finite ``info[LOG_PROB]`` (its ``NONFINITE`` says what); return
        ``info`` with a one-value log density as a float (one host read per step: the
        log entry formats that float)."""
        value = info[LOG_PROB]
        if value is None:
            return info
        if isinstance(value, Tensor) and value.numel() != 1:
            finite = bool(torch.isfinite(value).all())
        else:
            value = float(value)
            finite = math.isfinite(value)
            info = {**info, LOG_PROB: value}
        if not finite:
            raise NonFiniteError(self.nan_stop_message(info.get(NONFINITE, "the log density"), t))
        return info

    def nan_stop_message(self, what: str, t: int) -> str:
        """The NaN stop's message (:func:`~bdlkit.engine.resume.nan_message`; with a run_dir
        the checkpoints after the newest sane one are set aside first)."""
        message, good = nan_message(self.algorithm, what, t,
                                    self.run_dir if self.writes else None)
        if self.run_dir is not None:
            self.last_checkpoint = good
        return message
