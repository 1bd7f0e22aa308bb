"""Processes: where a run's ranks sit, and the few collectives bdlkit needs.

A run spread over ``world`` processes (``torchrun --nproc-per-node W -m bdlkit fit ...``)
is laid out as ``chain_groups × data_parallel``: rank ``r`` runs chain (or ensemble
member set) ``r // D`` of ``G`` independent ones, and is replica ``r mod D`` of the ``D``
data-parallel ranks of that chain. The ranks of one chain hold the same state (the
same seed, hence identical generators for sampler noise and VI draws) and see
different rows of each minibatch; their minibatch scores are averaged by one bucketed
all-reduce (:class:`bdlkit.problems.data_parallel.ShardReducer`), so every replica takes
the same step. The replica ``r mod D == 0`` of each chain is its *writer*: it alone
writes the run folder; the others verify (``docs/distributed.md``).

This is ``torch.distributed`` itself (gloo on CPU, nccl on GPU), with explicit
collectives on bdlkit's pytrees: ``torch.func`` (the default oracle) does not compose
with the ``DistributedDataParallel`` wrapper (pytorch #102197, #130932), and bdlkit's
update rules act on parameter pytrees, not on a module's ``.grad``. What is written
here is the layout and three small helpers; the communication is torch's.

Every collective bdlkit runs goes through :func:`collective`: when a peer's process ends
(``kill -9``, out of memory, a crash elsewhere) the backend's error there becomes
:class:`~bdlkit.core.errors.PeerLost`, naming the lost rank, which the command line
reports as one line with the run's last checkpoint and its ``torchrun`` resume command.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from bdlkit.core.errors import InputError, PeerLost

BUCKET_BYTES = 25 * 2**20  #: all-reduce buckets of at most this size (DDP's default)
ENV_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
#: what gloo and nccl say in a collective whose peer's process ended or stopped answering
#: (gloo: "Connection closed by peer [127.0.0.1]:37504. This is typically caused by a
#: remote worker crashing.")
PEER_FAILURE_TEXT = ("closed by peer", "reset by peer", "Broken pipe", "Connection refused",
                     "remote worker", "Timed out", "timed out", "communicator was aborted")


@dataclass(frozen=True)
class Topology:
    """Where this process sits in a run of ``world`` processes.

    Args:
        world: the number of processes (1: no ``torch.distributed`` at all).
        rank: this process's global rank.
        chain_groups: G, the independent chains (or member sets) run side by side;
            ``world`` is a multiple of G.
        group: the process group of this chain's data-parallel ranks (None when alone).
        writers: the process group of the G chains' writers (None with one chain), over
            which cross-chain diagnostics are gathered.
    """

    world: int = 1
    rank: int = 0
    chain_groups: int = 1
    group: Any = None
    writers: Any = None

    def __post_init__(self) -> None:
        if self.world < 1 or not 0 <= self.rank < self.world:
            raise ValueError(f"rank {self.rank} of world {self.world}: impossible")
        if self.chain_groups < 1 or self.world % self.chain_groups:
            raise InputError(f"{self.world} processes cannot form {self.chain_groups} equal chain "
                             "groups: run a multiple of --chain-groups processes")

    @property
    def data_size(self) -> int:
        """D, the data-parallel ranks of each chain."""
        return self.world // self.chain_groups

    @property
    def chain(self) -> int:
        """Which of the G chains this rank runs."""
        return self.rank // self.data_size

    @property
    def data_rank(self) -> int:
        """This rank's place among its chain's D replicas (its shard of each minibatch)."""
        return self.rank % self.data_size

    @property
    def leader(self) -> int:
        """The global rank of this chain's writer."""
        return self.chain * self.data_size

    @property
    def writer(self) -> bool:
        """Whether this rank writes its chain's run folder (replica 0 of the chain)."""
        return self.data_rank == 0

    @property
    def data_parallel(self) -> bool:
        return self.data_size > 1


SINGLE = Topology()


def launched() -> bool:
    """Whether this process was started by ``torchrun`` (or another launcher that sets
    ``RANK`` and ``WORLD_SIZE``) as one of several."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init(chain_groups: int = 1, device: str = "cpu", backend: str | None = None
         ) -> Topology:
    """Join the launcher's process group and build this rank's :class:`Topology`.

    Every rank calls it with the same ``chain_groups``. Alone (no launcher), nothing is
    initialised and the single-process topology is returned. ``device``: where the run's
    tensors (and so its collectives) live; ``backend``: default ``nccl`` for a CUDA
    ``device`` (each rank on GPU ``LOCAL_RANK``), ``gloo`` otherwise (the environment
    variable ``BDLKIT_DIST_BACKEND`` overrides it).
    """
    if not launched():
        if chain_groups != 1:
            raise InputError(f"chain_groups={chain_groups} needs that many processes (or a "
                             "multiple): launch with torchrun --nproc-per-node N")
        return SINGLE
    missing = [v for v in ENV_VARS if v not in os.environ]
    if missing:
        raise RuntimeError(f"WORLD_SIZE is set but {', '.join(missing)} are not: launch the "
                           "processes with torchrun (it sets all four)")
    if re.fullmatch(r"cuda:\d+", str(device)):
        raise InputError(f"--device {device} under torchrun: every rank takes GPU LOCAL_RANK, "
                         "so pass --device cuda")
    if not dist.is_initialized():
        chosen = (backend or os.environ.get("BDLKIT_DIST_BACKEND")
                  or ("nccl" if str(device).startswith("cuda") else "gloo"))
        if str(device).startswith("cuda"):
            local = int(os.environ.get("LOCAL_RANK", "0"))
            if local >= torch.cuda.device_count():
                raise InputError(f"rank {os.environ.get('RANK')} is local rank {local} but "
                                 f"{torch.cuda.device_count()} GPU(s) are visible: launch at "
                                 "most one process per GPU (--nproc-per-node)")
            torch.cuda.set_device(local)
        dist.init_process_group(chosen)
    world, rank = dist.get_world_size(), dist.get_rank()
    probe = Topology(world, rank, chain_groups)  # checks the layout before any new_group
    group = None
    for c in range(chain_groups):  # every rank creates every group, in the same order
        members = list(range(c * probe.data_size, (c + 1) * probe.data_size))
        made = dist.new_group(members) if probe.data_size > 1 else None
        if c == probe.chain:
            group = made
    writers = (dist.new_group(list(range(0, world, probe.data_size)))
               if chain_groups > 1 else None)
    return Topology(world, rank, chain_groups, group, writers)


def all_reduce_sum(tensors: list[Tensor], group: Any,
                   bucket_bytes: int = BUCKET_BYTES) -> list[Tensor]:
    """The element-wise sums over ``group`` of ``tensors`` (new tensors, same shapes).

    Consecutive tensors of one dtype and device are packed into flat buckets of at most
    ``bucket_bytes`` (one larger tensor is its own bucket), one ``all_reduce`` per bucket,
    as DDP's gradient buckets do: few large messages instead of one per parameter.
    """
    out: list[Tensor | None] = [None] * len(tensors)
    bucket: list[int] = []

    def flush() -> None:
        if not bucket:
            return
        flat = torch.cat([tensors[i].reshape(-1) for i in bucket])
        collective(lambda: dist.all_reduce(flat, group=group), group)
        for i, part in zip(bucket, flat.split([tensors[i].numel() for i in bucket]),
                           strict=True):
            out[i] = part.view(tensors[i].shape)
        bucket.clear()

    size = 0
    for i, t in enumerate(tensors):
        nbytes = t.numel() * t.element_size()
        if bucket and (size + nbytes > bucket_bytes
                       or (t.dtype, t.device) != (tensors[bucket[0]].dtype,
                                                  tensors[bucket[0]].device)):
            flush()
            size = 0
        bucket.append(i)
        size += nbytes
    flush()
    return out  # type: ignore[return-value]


def any_of(flags: list[bool], group: Any, device: torch.device | str = "cpu") -> list[bool]:
    """Each flag OR-ed over ``group``: a decision every rank takes together (stop,
    checkpoint now), so that no rank waits in a collective the others skipped."""
    t = torch.tensor([int(f) for f in flags], dtype=torch.int64, device=device)
    collective(lambda: dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group), group)
    return [bool(v) for v in t.tolist()]


def broadcast_int(value: int, src: int, group: Any, device: torch.device | str = "cpu") -> int:
    """``value`` of global rank ``src``, on every rank of ``group``."""
    t = torch.tensor([value], dtype=torch.int64, device=device)
    collective(lambda: dist.broadcast(t, src=src, group=group), group)
    return int(t.item())


def same_everywhere(digest: str, group: Any, size: int,
                    device: torch.device | str = "cpu") -> bool:
    """Whether every rank of ``group`` (``size`` ranks) passed the same ``digest`` (a hex
    string; its first 15 hex digits are compared)."""
    mine = torch.tensor([int(hashlib.sha256(digest.encode()).hexdigest()[:15], 16)],
                        dtype=torch.int64, device=device)
    found = [torch.zeros_like(mine) for _ in range(size)]
    collective(lambda: dist.all_gather(found, mine, group=group), group)
    return all(bool((f == mine).all()) for f in found)


def all_gather_stack(t: Tensor, group: Any, size: int) -> Tensor:
    """``t`` of every rank of ``group``, stacked along a new leading dimension (rank order);
    every rank passes a tensor of the same shape and dtype."""
    found = [torch.empty_like(t) for _ in range(size)]
    collective(lambda: dist.all_gather(found, t.contiguous(), group=group), group)
    return torch.stack(found)


def barrier() -> None:
    """Wait for every rank (a no-op alone)."""
    if dist.is_initialized():
        collective(dist.barrier, None)


def collective(run: Callable[[], Any], group: Any) -> Any:
    """``run()``, a collective over ``group`` (None: every process), with a peer's loss
    turned into :class:`~bdlkit.core.errors.PeerLost`: the backend's error, or a stop
    signal (a launcher's SIGTERM) that arrived while that error was being raised.

    Args:
        run: the ``torch.distributed`` call.
        group: its process group, whose other ranks are the ones that may be lost.
    """
    try:
        return run()
    except PeerLost:
        raise
    except BaseException as err:
        detail = peer_failure(err)
        if detail is None:
            raise
        raise lost_peer(group, detail) from err


def peer_failure(err: BaseException | None) -> str | None:
    """What the backend said, when ``err`` (or an exception it was raised while handling)
    says that a peer's process ended or stopped answering; None for any other error."""
    for _ in range(8):  # a stop signal raised during the backend's error, and so on
        if err is None:
            return None
        if isinstance(err, (dist.DistNetworkError, dist.DistStoreError)) or (
                isinstance(err, RuntimeError)
                and any(text in str(err) for text in PEER_FAILURE_TEXT)):
            said = re.sub(r"^\[[^\]]*\]\s*", "", str(err).strip().splitlines()[0])
            return said.split(". ")[0][:200]  # gloo: "[pair.cc:553] Connection closed ..."
        err = err.__context__
    return None


def lost_peer(group: Any, detail: str) -> PeerLost:
    """The :class:`~bdlkit.core.errors.PeerLost` of this rank in ``group``: the lost rank
    is the other one of a group of two, else one of the others (the backend does not say
    which, only the address of the connection that closed)."""
    if not dist.is_initialized():  # (a failed collective may have left it destroyed)
        rank, members = int(os.environ.get("RANK", "0")), range(int(os.environ.get(
            "WORLD_SIZE", "1")))
    else:
        rank = dist.get_rank()
        members = (dist.get_process_group_ranks(group) if group is not None
                   else range(dist.get_world_size()))
    return PeerLost(rank, tuple(r for r in members if r != rank), detail)


@contextlib.contextmanager
def joined(chain_groups: int = 1, device: str = "cpu", backend: str | None = None
           ) -> Iterator[Topology]:
    """:func:`init`, and leaving the process group at the end: after a barrier when the
    body succeeded (no rank exits while another still talks to it: a rank that leaves
    early can abort the others' gloo threads), at once when it failed (the launcher ends
    the others)."""
    topology = init(chain_groups, device, backend)
    try:
        yield topology
    except BaseException:
        if dist.is_initialized():
            dist.destroy_process_group()
        raise
    if dist.is_initialized():
        collective(dist.barrier, None)
        dist.destroy_process_group()
