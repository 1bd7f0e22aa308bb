"""Checkpoint files: exact round trip, atomic replacement, clear errors on corruption."""

import pytest
import torch

from bdlkit.core.serialization import CorruptFileError
from bdlkit.engine.checkpoint import (
    Checkpoint,
    global_rng_state,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    read_meta,
    sane,
    save_checkpoint,
    set_aside,
    set_global_rng_state,
)


def _ckpt(step=7):
    g = torch.Generator().manual_seed(0)
    return Checkpoint(
        step=step,
        meta={"method": "sgld", "store": {"shards": [1, 2]}},
        state={"params.w": torch.randn(3, 2, generator=g, dtype=torch.float64),
               "step": torch.tensor(step)},
        store={"samples._": torch.randn(4, 3, generator=g)},
        data={"loader_generator": g.get_state()},
        rng=global_rng_state(),
    )


def test_round_trip_is_exact(tmp_path):
    ckpt = _ckpt()
    path = save_checkpoint(tmp_path, ckpt)
    back = load_checkpoint(path)
    assert back.step == 7 and back.meta["method"] == "sgld" and back.meta["store"]["shards"] == [1, 2]
    for part in ("state", "store", "data", "rng"):
        want, got = getattr(ckpt, part), getattr(back, part)
        assert set(want) == set(got)
        for key in want:
            assert torch.equal(want[key], got[key]) and want[key].dtype == got[key].dtype


def test_keeps_the_newest_two_and_no_temp_files(tmp_path):
    for step in (5, 10, 15):
        save_checkpoint(tmp_path, _ckpt(step))
    newest = ["step-000000010.safetensors", "step-000000015.safetensors"]
    assert [p.name for p in list_checkpoints(tmp_path)] == newest
    assert latest_checkpoint(tmp_path).name == "step-000000015.safetensors"
    assert sorted(p.name for p in tmp_path.iterdir()) == newest
    assert latest_checkpoint(tmp_path / "missing") is None
    save_checkpoint(tmp_path, _ckpt(20), protect=tmp_path / newest[0])
    assert [p.name for p in list_checkpoints(tmp_path)] == [*newest, "step-000000020.safetensors"]


def test_flipped_tensor_bytes_are_detected(tmp_path):
    """F1: bytes flipped inside the tensor data, header intact, used to load as good."""
    path = save_checkpoint(tmp_path, _ckpt())
    raw = bytearray(path.read_bytes())
    raw[-20] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError, match="step-000000007.*damaged.*SHA-256"):
        load_checkpoint(path)


def test_set_aside_and_sane(tmp_path):
    path = save_checkpoint(tmp_path, _ckpt())
    moved = set_aside(path, "damaged")
    assert moved.name == "step-000000007.safetensors.damaged" and list_checkpoints(tmp_path) == []
    assert read_meta(moved)["method"] == "sgld" and read_meta(tmp_path / "nothing") is None
    assert sane({"max_abs": 3.0, "sane_bound": 1e6}) and sane({})
    assert not sane({"max_abs": 2.7e22, "sane_bound": 1e6})
    assert not sane({"max_abs": float("inf"), "sane_bound": 1e6})


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "no_meta"])
def test_corrupt_checkpoint_gives_a_clear_error(tmp_path, damage):
    path = save_checkpoint(tmp_path, _ckpt())
    raw = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00\x01not a checkpoint" * 10)
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        from safetensors.torch import save

        path.write_bytes(save({"state/x": torch.zeros(1)}))
    with pytest.raises(CorruptFileError, match="corrupt or truncated") as info:
        load_checkpoint(path)
    assert path.name in str(info.value)


def test_missing_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_checkpoint(tmp_path / "step-000000001.safetensors")


def test_global_rng_state_round_trip():
    state = global_rng_state()
    a = torch.rand(3)
    set_global_rng_state(state)
    assert torch.equal(torch.rand(3), a)
