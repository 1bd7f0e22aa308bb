"""Tensor files are deterministic: the same tensors and metadata give the same bytes."""

import struct

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from bdlkit.core.serialization import canonical_header, load_tensors_with_metadata, save_tensors


def _tensors():
    g = torch.Generator().manual_seed(0)
    return {"w": torch.randn(3, 4, generator=g), "b": torch.arange(5),
            "ü": torch.zeros(2, dtype=torch.float64)}


def test_two_saves_of_the_same_content_are_byte_equal(tmp_path):
    meta = {f"key{i}": f"välue {i}" for i in range(30)}  # many keys: hash order varies
    raws = []
    for i in range(4):
        save_tensors(tmp_path / f"f{i}.safetensors", _tensors(), metadata=meta)
        raws.append((tmp_path / f"f{i}.safetensors").read_bytes())
    assert all(r == raws[0] for r in raws)
    tensors, read = load_tensors_with_metadata(tmp_path / "f0.safetensors")
    assert read == meta and all(torch.equal(tensors[k], v) for k, v in _tensors().items())


def test_the_canonical_header_keeps_length_data_and_content():
    raw = st_save(_tensors(), metadata={"z": "1", "a": "2", "m": "3"})
    canon = canonical_header(raw)
    (size,) = struct.unpack("<Q", raw[:8])
    assert len(canon) == len(raw) and canon[8 + size:] == raw[8 + size:]
    head = canon[8:8 + size].decode()
    assert head.index('"a"') < head.index('"m"') < head.index('"z"')
    loaded = st_load(canon)
    assert all(torch.equal(loaded[k], v) for k, v in _tensors().items())
