"""Data order as a function of the step: epochs cover every row, resumes replay exactly."""

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from bdlkit.engine.batches import Batches


def _data(n=10):
    x = torch.arange(n, dtype=torch.float64)[:, None]
    return x, torch.arange(n, dtype=torch.float64)


def test_each_epoch_visits_every_row_once_and_reshuffles(blr):
    model, _, _, _ = blr
    batches = Batches(model, _data(10), batch_size=4, seed=3)
    assert batches.per_epoch == 3
    epochs = [torch.cat([batches(e * 3 + i)[1] for i in range(3)]) for e in range(3)]
    for rows in epochs:
        assert sorted(rows.tolist()) == list(range(10))
    assert not torch.equal(epochs[0], epochs[1])
    assert [len(batches(i)[1]) for i in range(3)] == [4, 4, 2]


def test_random_access_equals_sequential_and_depends_on_seed(blr):
    model, _, _, _ = blr
    seq = Batches(model, _data(), batch_size=3, seed=0)
    order = [seq(t)[1] for t in range(12)]
    fresh = Batches(model, _data(), batch_size=3, seed=0)
    for t in (9, 2, 11, 0):  # resuming at any step gives the same batch
        assert torch.equal(fresh(t)[1], order[t])
    other = Batches(model, _data(), batch_size=3, seed=1)
    assert not all(torch.equal(other(t)[1], order[t]) for t in range(4))


def test_target_batches_are_none():
    import bdlkit

    target = bdlkit.Target(lambda th: -0.5 * (th**2).sum(-1), dim=2)
    assert Batches(target, None, 8, 0)(5) is None


@pytest.mark.parametrize("resume_at", [5, 6, 9])  # mid-epoch, at a boundary, later
def test_dataloader_with_generator_resumes_exactly(blr, resume_at):
    model, _, _, _ = blr
    ds = TensorDataset(*_data(9))

    def loader():
        return DataLoader(ds, batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(7))

    full = Batches(model, loader(), 3, 0)
    order = [full(t)[1] for t in range(12)]
    first = Batches(model, loader(), 3, 0)
    for t in range(resume_at):
        first(t)
    saved = first.state_dict(resume_at)
    resumed = Batches(model, loader(), 3, 0)  # a fresh process: a fresh generator
    resumed.load_state_dict(saved)
    for t in range(resume_at, 12):
        assert torch.equal(resumed(t)[1], order[t]), t


def test_shuffling_loader_without_generator_warns_on_resume(blr):
    model, _, _, _ = blr
    loader = DataLoader(TensorDataset(*_data(9)), batch_size=3, shuffle=True)
    batches = Batches(model, loader, 3, 0)
    batches.load_state_dict({})
    with pytest.warns(UserWarning, match="generator="):
        batches(4)


def test_bad_batch_size(blr):
    with pytest.raises(ValueError, match="batch_size"):
        Batches(blr[0], _data(), 0, 0)


@pytest.mark.parametrize("ranks", [2, 3])
def test_data_parallel_shards_are_the_pieces_of_the_one_process_batch(blr, ranks):
    model, _, _, _ = blr
    whole = Batches(model, _data(10), batch_size=4, seed=3)
    shards = [Batches(model, _data(10), batch_size=4, seed=3, shard=(r, ranks))
              for r in range(ranks)]
    for t in range(7):  # across epochs, with the short last batch (2 rows: a rank may get 0)
        pieces = [s(t)[1] for s in shards]
        assert torch.equal(torch.cat(pieces), whole(t)[1])
        assert max(len(p) for p in pieces) - min(len(p) for p in pieces) <= 1


def test_data_parallel_full_batch_and_refusals(blr):
    model, _, _, _ = blr
    a, b = (Batches(model, _data(5), batch_size=5, seed=0, shard=(r, 2)) for r in (0, 1))
    assert torch.equal(torch.cat([a(0)[1], b(0)[1]]), _data(5)[1])
    with pytest.raises(ValueError, match="cannot be split over 3"):
        Batches(model, _data(2), batch_size=2, seed=0, shard=(0, 3))
    loader = DataLoader(TensorDataset(*_data(10)), batch_size=2)
    with pytest.raises(ValueError, match="not a DataLoader"):
        Batches(model, loader, batch_size=2, seed=0, shard=(0, 2))
