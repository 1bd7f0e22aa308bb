"""The layout of the ranks and the bucketed all-reduce (one gloo process; the
multi-process behaviour is tested in tests/distributed)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from bdlkit.core import distributed
from bdlkit.core.distributed import Topology
from bdlkit.core.errors import InputError


def test_layout_of_chains_times_data_parallel():
    places = [Topology(world=6, rank=r, chain_groups=2) for r in range(6)]
    assert [t.chain for t in places] == [0, 0, 0, 1, 1, 1]
    assert [t.data_rank for t in places] == [0, 1, 2, 0, 1, 2]
    assert [t.writer for t in places] == [True, False, False, True, False, False]
    assert [t.leader for t in places] == [0, 0, 0, 3, 3, 3]
    assert all(t.data_parallel and t.data_size == 3 for t in places)
    assert not Topology(world=2, rank=1, chain_groups=2).data_parallel
    with pytest.raises(InputError, match="equal chain groups"):
        Topology(world=3, rank=0, chain_groups=2)


def test_alone_init_is_the_single_process(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert distributed.init() is distributed.SINGLE
    with pytest.raises(InputError, match="torchrun --nproc-per-node"):
        distributed.init(chain_groups=2)


def test_a_launch_without_its_rendezvous_names_the_missing_variables(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(RuntimeError, match="MASTER_ADDR"):
        distributed.init()


@pytest.fixture
def one_process_group():
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_all_reduce_packs_tensors_into_buckets(one_process_group, monkeypatch):
    calls = []
    real = dist.all_reduce
    monkeypatch.setattr(dist, "all_reduce", lambda t, **kw: (calls.append(t.numel()),
                                                           real(t, **kw))[1])
    tensors = [torch.full((100,), float(i)) for i in range(10)] + [torch.ones(3, 4,
                                                                         dtype=torch.float64)]
    out = distributed.all_reduce_sum(tensors, None, bucket_bytes=1000)  # 2 float32 x 100 fit
    assert calls == [200, 200, 200, 200, 200, 12]  # a new dtype starts a new bucket
    assert all(torch.equal(a, b) and a.shape == b.shape for a, b in zip(out, tensors))
    monkeypatch.setattr(dist, "all_reduce", real)
    assert distributed.any_of([False, True], None) == [False, True]
    assert distributed.broadcast_int(7, 0, None) == 7
    assert distributed.same_everywhere("abc", None, 1)


def test_an_indexed_gpu_under_torchrun_is_refused(monkeypatch):
    for name, value in (("WORLD_SIZE", "2"), ("RANK", "0"), ("MASTER_ADDR", "127.0.0.1"),
                        ("MASTER_PORT", "1")):
        monkeypatch.setenv(name, value)
    with pytest.raises(InputError, match="--device cuda"):
        distributed.init(device="cuda:1")


def test_commands_that_run_in_one_process_are_refused_under_torchrun(monkeypatch, capsys):
    from bdlkit.cli import main

    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["evaluate", "nowhere"]) == 2
    assert "runs in one process" in capsys.readouterr().err
