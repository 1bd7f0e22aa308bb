"""What the runner does differently on several data-parallel ranks of one chain.

The replicas of a chain run the same loop on different shards of each minibatch; the
model's all-reduced oracle (:mod:`bdlkit.problems.data_parallel`) makes their steps
identical. These things must then be decided or checked together, or one rank would
wait forever in a collective the others skipped:

* **when to checkpoint or stop** (a time-based checkpoint, Ctrl-C/SIGTERM on one rank, a
  failed callback on the writer): :func:`decide_together` ORs the flags every step;
* **that the replicas are still replicas**: :func:`verify` compares the digest of every
  rank's state at each checkpoint, before the writer writes it;
* **that the checkpoint is on disk**: the writer announces it once written
  (:func:`checkpoint_on_disk`) and a replica waits for that (:func:`checkpoint_written`), so
  that it names the file when it stops and no replica leaves while its writer writes (a
  launcher ends the other ranks when one exits);
* **when and where to start**: the writer locks the folder, picks the newest intact
  checkpoint of a resume (setting damaged ones aside) and runs its callbacks' start;
  then it broadcasts the step it starts from (:func:`announce_start`), or -1 when it
  refused the run, so that its replicas stop instead of waiting; they read that
  checkpoint and check its checksum themselves (:func:`open_announced`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from signal import SIGTERM
from typing import Any

import torch
from torch import Tensor

from bdlkit.core import distributed
from bdlkit.core.distributed import SINGLE, Topology
from bdlkit.core.errors import ReplicaStopped
from bdlkit.core.serialization import tensor_digest
from bdlkit.engine.checkpoint import Checkpoint, checkpoint_path, load_checkpoint
from bdlkit.problems import BayesianModel, Target


def device_of(problem: Any) -> torch.device:
    """Where a problem's collectives run (its device: nccl needs CUDA tensors)."""
    return getattr(problem, "device", torch.device("cpu"))


def check_data_parallel(algorithm: Any, data: Any, compile: bool) -> None:
    """Refuse what data parallelism cannot split exactly, naming the fix."""
    problem = algorithm.problem
    if not algorithm.data_parallel:
        raise ValueError(f"{algorithm.name} differentiates the log density itself, past the "
                         "all-reduce of data-parallel ranks: run it in one process per chain "
                         "(--chain-groups equal to the process count)")
    if isinstance(problem, Target):
        raise ValueError("a Target has no data to split over data-parallel ranks: run its "
                         "chains on chain groups instead (chain_groups = the process count)")
    if not isinstance(problem, BayesianModel) or (
            type(problem).value_and_score is not BayesianModel.value_and_score):
        raise ValueError(f"data parallelism all-reduces BayesianModel.value_and_score; "
                         f"{type(problem).__name__} is not one or overrides it: run it in one "
                         "process per chain (chain groups)")
    if problem.buffers == "batch_stats":
        raise ValueError("buffers='batch_stats' normalises each rank's shard by its own "
                         "statistics, which is not the one-process step: use frozen buffers "
                         "(a FilterResponseNorm or LayerNorm network) or one process")
    if compile:
        raise ValueError("compile=True is not supported on several data-parallel ranks yet: "
                         "drop it (the all-reduce is the step's collective)")


def decide_together(topology: Topology, problem: Any, checkpoint_due: bool,
                    signal: int | None, failed: bool) -> tuple[bool, int | None, bool]:
    """``(checkpoint now, the stopping signal, a callback failed on another rank)`` as
    every replica sees them. Every rank then checkpoints (all take part in :func:`verify`)
    before any of them raises."""
    due, stopped, failed_any = distributed.any_of(
        [bool(checkpoint_due), signal is not None, failed], topology.group, device_of(problem))
    return (due, signal if signal is not None else (SIGTERM if stopped else None),
            failed_any and not failed)


def stopped_by_another(topology: Topology, t: int) -> ReplicaStopped:
    """Why a replica stops when a callback failed on another rank of its chain."""
    return ReplicaStopped(f"stopped after step {t}, checkpointed: a callback failed on another "
                        f"rank of chain {topology.chain} (ranks {topology.leader}.."
                        f"{topology.leader + topology.data_size - 1}); see its message")


def verify(topology: Topology, problem: Any, tensors: dict[str, Tensor], t: int,
           last_checkpoint: Path | None) -> None:
    """Refuse to go on when the chain's replicas no longer hold the same state."""
    if not distributed.same_everywhere(tensor_digest(tensors), topology.group,
                                       topology.data_size, device_of(problem)):
        raise RuntimeError(
            f"after step {t} the {topology.data_size} data-parallel replicas of chain "
            f"{topology.chain} hold different states: they must run the same bdlkit, seed and "
            "options on the same data, with a deterministic all-reduce. The last checkpoint, "
            f"{last_checkpoint}, is from before the difference")


class StartSignal:
    """The writer's start signal to its replicas, sent once per ``Runner.fit``: the step
    the run starts from once the writer has locked the folder, chosen the checkpoint and
    started its callbacks (:func:`announce_start`), or -1 when it refused the run before.

    Args:
        topology: the runner's; only a data-parallel writer sends anything.
        problem: the model whose oracle is data parallel while the fit runs.
    """

    def __init__(self, topology: Topology, problem: Any) -> None:
        self.topology, self.problem = topology, problem
        self.pending = topology.data_parallel and topology.writer

    def send(self, step: int) -> None:
        if self.pending:
            self.pending = False
            announce_start(self.topology, self.problem, step)

    @contextlib.contextmanager
    def while_fitting(self) -> Iterator[None]:
        """The model's oracle data parallel for the fit; a failure before the start signal
        sends -1, so that the replicas stop instead of waiting."""
        if self.topology.data_parallel:
            self.problem.shard_over(self.topology)
        try:
            yield
        except BaseException:
            self.send(-1)
            raise
        finally:
            if self.topology.data_parallel:  # the model's oracle is its own again
                self.problem.shard_over(SINGLE)


def announce_start(topology: Topology, problem: Any, step: int) -> None:
    """The writer's start signal: the step its run starts from (the checkpoint a resume
    reads), or -1 when it refused the run (its replicas then stop instead of waiting in
    the first all-reduce)."""
    distributed.broadcast_int(step, topology.leader, topology.group, device_of(problem))


def wait_for_start(topology: Topology, problem: Any) -> int:
    """A replica's side of :func:`announce_start`: the writer's step, or an error."""
    step = distributed.broadcast_int(-1, topology.leader, topology.group, device_of(problem))
    if step < 0:
        raise ReplicaStopped(f"chain {topology.chain}'s writer (rank {topology.leader}) could not "
                           "start the run; see its message")
    return step


def open_announced(topology: Topology, problem: Any, folder: Path) -> tuple[Path, Checkpoint]:
    """The checkpoint a replica resumes from: the one its writer chose (setting damaged
    ones aside) and announced; read and checksummed here."""
    path = checkpoint_path(folder, wait_for_start(topology, problem))
    return path, load_checkpoint(path)


def checkpoint_on_disk(topology: Topology, problem: Any) -> None:
    """The writer tells its replicas that its checkpoint is on disk
    (:func:`checkpoint_written`). A writer that failed to write it says nothing and its
    process ends: its replicas then stop with :class:`~bdlkit.core.errors.PeerLost`."""
    writer_ready(topology, device_of(problem), True)


def checkpoint_written(topology: Topology, problem: Any, folder: Path, step: int) -> Path:
    """A replica's side of :func:`checkpoint_on_disk`: the checkpoint its writer wrote after
    ``step`` in ``folder``, once it is on disk."""
    distributed.broadcast_int(-1, topology.leader, topology.group, device_of(problem))
    return checkpoint_path(folder, step)


def writer_ready(topology: Topology, device: torch.device | str, ok: bool) -> None:
    """The writer tells its replicas that the run folder is ready (``ok``) or that it
    refused the run (they then stop too, instead of waiting in the first all-reduce)."""
    if topology.data_parallel:
        distributed.broadcast_int(0 if ok else 1, topology.leader, topology.group, device)


def wait_for_writer(topology: Topology, device: torch.device | str) -> None:
    """A replica waits until its writer has prepared the run folder (:func:`writer_ready`)."""
    if distributed.broadcast_int(-1, topology.leader, topology.group, device) != 0:
        raise ReplicaStopped(f"chain {topology.chain}'s writer (rank {topology.leader}) refused "
                           "the run; see its message")
