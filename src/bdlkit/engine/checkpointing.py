"""The :class:`~bdlkit.engine.runner.Runner`'s checkpoints: writing one at step ``t`` and
restoring the newest on a resume.

A checkpoint (:mod:`bdlkit.engine.checkpoint`, the file format) holds the algorithm
state, every generator state, the data order's, the sample store's record and draws not
yet in a shard, and the run's fingerprint
(:meth:`~bdlkit.engine.runner.Runner.fingerprint`), with the digest of the log up to its
step. On several data-parallel ranks every rank checks its state against
the writer's here, and only the writer writes. Kept apart from the loop itself so that
each file reads as one thing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from bdlkit.core.errors import NonFiniteError
from bdlkit.core.serialization import CorruptFileError, state_from_tensors, state_to_tensors
from bdlkit.core.tree import max_abs
from bdlkit.engine import replicas
from bdlkit.engine.checkpoint import (
    Checkpoint,
    global_rng_state,
    save_checkpoint,
    set_global_rng_state,
)
from bdlkit.engine.resume import CHECKPOINT_FORMAT, listed_files, newest_sane, open_newest
from bdlkit.engine.runlog import LOG_DIGEST, read_log

if TYPE_CHECKING:
    from bdlkit.engine.runner import Runner


def write(runner: Runner, state: Any, t: int, total: int, elapsed: float) -> None:
    """Checkpoint ``state`` after step ``t`` of ``total`` (``elapsed`` seconds of training
    so far) into ``run_dir/checkpoints``, keeping the newest two; a state that is no longer
    finite stops the run instead (the NaN stop), and a state past the sane bound is written
    without replacing the newest sane checkpoint. A data-parallel replica checks its state
    against its writer's and records the writer's file."""
    if not runner.algorithm.is_finite(state):
        raise NonFiniteError(runner.nan_stop_message("the parameters", t))
    tensors = state_to_tensors(state)
    if runner.topology.data_parallel:
        replicas.verify(runner.topology, runner.problem, tensors, t, runner.last_checkpoint)
    if not runner.writes:  # the writer's file, once it is on disk
        runner.last_checkpoint = replicas.checkpoint_written(
            runner.topology, runner.problem, runner.run_dir / "checkpoints", t)
        return
    store = runner.store
    if store is not None and t == total:
        store.flush()  # the last shard; earlier checkpoints hold unwritten draws
    store_meta, store_tensors = store.state_dict() if store is not None else ({}, {})
    largest = max_abs(runner.algorithm.params(state))
    meta = {"method": runner.algorithm.name, "seed": runner.seed, "total_steps": total,
            "checkpoint_format": CHECKPOINT_FORMAT, "elapsed_s": elapsed,
            "store": store_meta, "max_abs": largest, "sane_bound": runner.sane_bound,
            LOG_DIGEST: runner.log.head, **runner.fingerprint()}
    runner.log.sync()  # the lines the checkpoint's log_digest ends are on disk first
    ckpt = Checkpoint(step=t, meta=meta, state=tensors, store=store_tensors,
                      data=runner.batches.state_dict(t), rng=global_rng_state())
    folder = runner.run_dir / "checkpoints"
    protect = None if largest <= runner.sane_bound else newest_sane(folder)
    runner.last_checkpoint = save_checkpoint(folder, ckpt, protect=protect)
    replicas.checkpoint_on_disk(runner.topology, runner.problem)
    if store is not None:
        store.collect_garbage(keep=listed_files(folder))


def restore(runner: Runner, state: Any, folder: Path) -> tuple[Any, int, list[dict], float]:
    """The newest intact checkpoint in ``folder`` restored into ``runner`` (its store, data
    order and the global generators) after checking it is this run's: ``(state, step,
    log entries up to the step, elapsed seconds)``. ``state``: a fresh state of the run,
    whose structure the checkpoint's tensors fill."""
    path, ckpt = (replicas.open_announced(runner.topology, runner.problem, folder)
                  if not runner.writes else open_newest(folder))
    meta = ckpt.meta
    runner.check_checkpoint(meta, path, runner.changed)
    try:
        state = state_from_tensors(state, ckpt.state)
    except CorruptFileError as err:
        raise CorruptFileError(f"checkpoint {path}: {err}") from None
    if runner.store is not None and runner.writes:
        runner.store.load_state_dict(meta.get("store", {}), ckpt.store,
                                     keep=listed_files(folder, skip=path))
    runner.batches.load_state_dict(ckpt.data)
    set_global_rng_state(ckpt.rng)
    runner.last_checkpoint = path
    history = read_log(runner.run_dir / "log.jsonl", ckpt.step, meta.get(LOG_DIGEST))
    return state, ckpt.step, history, float(meta.get("elapsed_s", 0.0))
