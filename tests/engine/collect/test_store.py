"""SampleStore: selection, cap, memory/disk agreement, checkpoints and corrupt files."""

from __future__ import annotations

import json

import pytest
import torch

from bdlkit.core.serialization import CorruptFileError
from bdlkit.engine.collect import DiskStore, MemoryStore


def tensor_draw(i: int) -> torch.Tensor:
    return torch.full((2, 3), float(i), dtype=torch.float64) + torch.arange(3)


def dict_draw(i: int) -> dict[str, torch.Tensor]:
    return {"w": torch.full((3,), float(i)), "b": torch.tensor(i), "m": torch.eye(2) * i}


def make(kind: str, tmp_path, **kw):
    if kind == "memory":
        return MemoryStore(**kw)
    return DiskStore(tmp_path / "s", **kw)


def assert_same(a, b) -> None:
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
    else:
        assert a.dtype == b.dtype and torch.equal(a, b)


def count(chunk) -> int:
    return len(next(iter(chunk.values())) if isinstance(chunk, dict) else chunk)


def cat(chunks):
    if isinstance(chunks[0], dict):
        return {k: torch.cat([c[k] for c in chunks]) for k in chunks[0]}
    return torch.cat(chunks)


def values(store) -> list[float]:
    return store.load()[:, 0, 0].tolist()


def shard_files(path) -> set[str]:
    return {f.name for f in path.glob("shard-*.safetensors")}


def test_burnin_and_thinning_select_steps():
    store = MemoryStore(burnin=3, thin=2)
    assert [s for s in range(1, 12) if store.wants(s)] == [5, 7, 9, 11]
    kept = [store.offer(s, tensor_draw(s)) for s in range(1, 12)]
    assert sum(kept) == 4 and len(store) == 4 and values(store) == [5, 7, 9, 11]
    assert [s for s in range(1, 5) if MemoryStore().wants(s)] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    "kw, name",
    [({"burnin": -1}, "burnin"), ({"thin": 0}, "thin"), ({"max_samples": 0}, "max_samples")],
)
def test_invalid_settings_name_the_argument(kw, name):
    with pytest.raises(ValueError, match=name):
        MemoryStore(**kw)


@pytest.mark.parametrize(
    "kind, kw",
    [
        ("memory", {}),
        ("disk", {"shard_size": 1}),
        ("disk", {"shard_size": 4}),
        ("disk", {"shard_size": 100}),
    ],
)
def test_cap_keeps_the_most_recent_draws(kind, kw, tmp_path):
    store = make(kind, tmp_path, max_samples=6, **kw)
    for i in range(11):
        store.append(tensor_draw(i))
    assert len(store) == 6 and store.total_seen == 11
    assert values(store) == [5, 6, 7, 8, 9, 10]


def test_cap_across_shards_skips_the_front_of_the_first_shard(tmp_path):
    store = DiskStore(tmp_path, shard_size=4, max_samples=6)
    for i in range(11):
        store.append(tensor_draw(i))
    store.flush()
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [s["file"] for s in manifest["shards"]] == [
        "shard-000001.safetensors",
        "shard-000002.safetensors",
    ]
    assert manifest["offset"] == 1 and manifest["total_seen"] == 11
    assert values(store) == values(DiskStore.open(tmp_path)) == [5, 6, 7, 8, 9, 10]


@pytest.mark.parametrize("draw", [tensor_draw, dict_draw])
def test_memory_and_disk_agree_and_chunks_concatenate(draw, tmp_path):
    mem, disk = MemoryStore(max_samples=10), DiskStore(tmp_path, shard_size=4, max_samples=10)
    for i in range(13):
        mem.append(draw(i))
        disk.append(draw(i))
    full = mem.load()
    assert_same(disk.load(), full)
    for store in (mem, disk):
        for size in (None, 1, 3, 10, 100):
            chunks = list(store.iter_chunks(size))
            assert size is None or max(map(count, chunks)) == min(size, 10)
            assert_same(cat(chunks), full)
    disk.flush()
    assert_same(DiskStore.open(tmp_path).load(), full)
    assert [count(c) for c in DiskStore.open(tmp_path).iter_chunks()] == [1, 4, 4, 1]


def test_draws_are_detached_cpu_clones():
    store, x = MemoryStore(), torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    store.append(x)
    with torch.no_grad():
        x += 1
    out = store.load()
    assert (
        not out.requires_grad
        and out.device.type == "cpu"
        and torch.equal(out, torch.zeros(1, 2, 3, dtype=torch.float64))
    )


def test_empty_store_and_existing_folders(tmp_path):
    assert MemoryStore().load() is None and list(MemoryStore().iter_chunks()) == []
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        DiskStore.open(tmp_path)
    store = DiskStore(tmp_path)
    assert store.load() is None
    store.flush()
    assert len(DiskStore.open(tmp_path)) == 0
    with pytest.raises(FileExistsError, match="DiskStore.open"):
        DiskStore(tmp_path)
    with pytest.raises(RuntimeError, match="read-only"):
        DiskStore.open(tmp_path).append(tensor_draw(0))


def test_memory_state_dict_round_trip(tmp_path):
    store = MemoryStore(burnin=2, thin=3, max_samples=4)
    for i in range(1, 30):
        store.offer(i, dict_draw(i))
    meta, tensors = store.state_dict()
    back = MemoryStore()
    back.load_state_dict(json.loads(json.dumps(meta)), tensors)
    assert (back.burnin, back.thin, back.max_samples, back.total_seen) == (2, 3, 4, 9)
    assert_same(back.load(), store.load())
    store.append(dict_draw(99))
    back.append(dict_draw(99))
    assert_same(back.load(), store.load())
    with pytest.raises(CorruptFileError, match="samples.w"):
        MemoryStore().load_state_dict(meta, {k: v for k, v in tensors.items() if k != "samples.w"})
    with pytest.raises(CorruptFileError, match="kind"):
        DiskStore(tmp_path).load_state_dict(meta, tensors)


def test_disk_resume_after_crash_deletes_later_shards(tmp_path):
    store = DiskStore(tmp_path, shard_size=3, max_samples=5)
    for i in range(4):
        store.append(tensor_draw(i))
    meta, tensors = store.state_dict()  # shard 0 (3 draws) on disk, draw 3 in the checkpoint
    assert meta["pending"] == 1 and set(tensors) == {"pending._"}
    held = store.load()
    for i in range(4, 10):  # writes shards 1-2; the cap drops shard 0
        store.append(tensor_draw(i))
    assert shard_files(tmp_path) == {f"shard-00000{i}.safetensors" for i in range(3)}
    (tmp_path / ".shard-000004.safetensors.x1y2z3w4.tmp").write_bytes(b"partial")
    fresh = DiskStore(tmp_path, exist_ok=True)  # a new process, after a crash
    fresh.load_state_dict(json.loads(json.dumps(meta)), tensors)
    assert shard_files(tmp_path) == {"shard-000000.safetensors"}
    assert not list(tmp_path.glob(".*.tmp"))
    assert len(fresh) == 4 and fresh.total_seen == 4 and fresh.max_samples == 5
    assert_same(fresh.load(), held)
    assert_same(DiskStore.open(tmp_path).load(), held[:3])  # the manifest lists shard 0 only
    ref = MemoryStore(max_samples=5)
    for i in range(12):
        ref.append(tensor_draw(i))
        if i >= 4:
            fresh.append(tensor_draw(i))
    assert_same(fresh.load(), ref.load())


def test_collect_garbage_deletes_only_dropped_shards_when_called(tmp_path):
    store = DiskStore(tmp_path, shard_size=2, max_samples=3)
    for i in range(6):
        store.append(tensor_draw(i))
    names = [f"shard-00000{i}.safetensors" for i in range(3)]
    assert shard_files(tmp_path) == set(names)  # shard 0 is dropped but not yet deleted
    store.state_dict()
    assert shard_files(tmp_path) == set(names)
    store.collect_garbage(keep={names[0]})  # an older kept checkpoint still lists it
    assert shard_files(tmp_path) == set(names)
    store.collect_garbage()
    assert shard_files(tmp_path) == set(names[1:])
    assert values(store) == values(DiskStore.open(tmp_path)) == [3, 4, 5]


def test_checkpoints_do_not_change_the_shard_files(tmp_path):
    """Where a run takes checkpoints (and resumes from them) leaves the shard files as an
    uncheckpointed run writes them: a checkpoint holds the unwritten draws instead of
    flushing a short shard."""
    def run(folder, checkpoint_at):
        store, meta, tensors = DiskStore(folder, shard_size=4), None, None
        for i in range(11):
            store.append(tensor_draw(i))
            if i == checkpoint_at:
                meta, tensors = store.state_dict()
                store = DiskStore(folder, exist_ok=True)  # killed and resumed
                store.load_state_dict(json.loads(json.dumps(meta)), tensors)
        store.flush()
        return {f.name: f.read_bytes() for f in sorted(folder.iterdir())}

    plain = run(tmp_path / "plain", checkpoint_at=None)
    assert sorted(plain) == ["manifest.json", *[f"shard-00000{i}.safetensors" for i in range(3)]]
    for at in (1, 3, 5, 9):
        assert run(tmp_path / f"at{at}", checkpoint_at=at) == plain


def test_a_damaged_shard_or_manifest_entry_is_refused(tmp_path):
    store = DiskStore(tmp_path, shard_size=2)
    for i in range(4):
        store.append(tensor_draw(i))
    store.flush()
    shard = tmp_path / "shard-000001.safetensors"
    raw = bytearray(shard.read_bytes())
    raw[-3] ^= 0x40  # a flipped bit in the tensor data, header intact
    shard.write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError, match="shard-000001.*damaged"):
        DiskStore.open(tmp_path).load()
    (tmp_path / "shard-000001.safetensors").write_bytes(
        (tmp_path / "shard-000000.safetensors").read_bytes())  # another shard's file
    with pytest.raises(CorruptFileError, match="shard-000001.*not the shard"):
        DiskStore.open(tmp_path)


def test_corrupt_files_raise_clear_errors(tmp_path):
    store = DiskStore(tmp_path, shard_size=2)
    for i in range(4):
        store.append(dict_draw(i))
    shard = tmp_path / "shard-000001.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(data[:-7])
    for fn in (lambda: DiskStore.open(tmp_path), store.load):
        with pytest.raises(CorruptFileError, match="shard-000001"):
            fn()
    shard.unlink()
    with pytest.raises(CorruptFileError, match="missing"):
        DiskStore.open(tmp_path)
    shard.write_bytes(data)
    manifest = tmp_path / "manifest.json"
    meta = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**meta, "shapes": {**meta["shapes"], "w": [4]}}))
    with pytest.raises(CorruptFileError, match="shard-000000"):
        DiskStore.open(tmp_path)
    manifest.write_text(json.dumps({**meta, "kind": "other"}))
    with pytest.raises(CorruptFileError, match="manifest.json.*kind"):
        DiskStore.open(tmp_path)
    manifest.write_text("{not json")
    with pytest.raises(CorruptFileError, match="manifest.json"):
        DiskStore.open(tmp_path)


def test_structure_mismatches_are_rejected():
    store = MemoryStore()
    store.append(dict_draw(0))
    with pytest.raises(ValueError, match="Tensor"):
        store.append(tensor_draw(0))
    with pytest.raises(ValueError, match="missing \\['m'\\]"):
        store.append({k: v for k, v in dict_draw(1).items() if k != "m"})
    with pytest.raises(ValueError, match="draw\\['w'\\] has shape \\(4,\\)"):
        store.append({**dict_draw(1), "w": torch.zeros(4)})
    with pytest.raises(ValueError, match="draw\\['b'\\].*torch.float32"):
        store.append({**dict_draw(1), "b": torch.tensor(1.0)})
    with pytest.raises(TypeError, match="flat dict"):
        store.append([torch.zeros(3)])
    with pytest.raises(TypeError, match="'w'"):
        MemoryStore().append({"w": {"x": torch.zeros(1)}})
    assert len(store) == 1 and store.total_seen == 1
