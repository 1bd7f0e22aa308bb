"""L2E meta-parameter files whose metadata are not what ``save_meta_params`` writes are
refused with a :class:`CorruptFileError` naming the file (issue 19, F9a)."""

from __future__ import annotations

import pytest
import torch

from bdlkit.core.errors import CorruptFileError
from bdlkit.core.serialization import save_tensors
from bdlkit.l2e import load_meta_params, save_meta_params
from bdlkit.l2e.kinetic import META_KEYS, Constants, init_meta_params


def _write(path, metadata):
    meta = init_meta_params(torch.Generator().manual_seed(0))
    save_tensors(path, {k: meta[k] for k in META_KEYS}, metadata=metadata)
    return path


@pytest.mark.parametrize("constants, needle", [
    ("[1, 2]", "JSON list"),
    ("null", "JSON NoneType"),
    ('"eps"', "JSON str"),
    ("{oops", "Expecting property name"),
    ('{"friction": "high"}', "'friction' must be a number"),
    ('{"noise_mode": 3}', "'noise_mode' must be a string"),
    ('{"eps": true}', "'eps' must be a number"),
    ('{"eps": -1}', "eps must be a finite number > 0"),
])
def test_bad_constants_metadata_is_a_corrupt_file_naming_it(tmp_path, constants, needle):
    path = _write(tmp_path / "meta.safetensors", {"constants": constants})
    with pytest.raises(CorruptFileError) as info:
        load_meta_params(path)
    message = str(info.value)
    assert str(path) in message and needle in message
    assert "bdlkit meta-train l2e" in message


def test_missing_constants_metadata_is_named(tmp_path):
    path = _write(tmp_path / "meta.safetensors", {"format": "bdlkit-l2e-meta-params/1"})
    with pytest.raises(CorruptFileError, match="no 'constants' entry"):
        load_meta_params(path)


def test_saved_file_loads_back_with_its_constants(tmp_path):
    meta = init_meta_params(torch.Generator().manual_seed(1))
    constants = Constants(friction=0.2, noise_mode="paper")
    path = save_meta_params(tmp_path / "m.safetensors", meta, constants, {"seed": 3})
    loaded = load_meta_params(path)
    assert loaded.constants == constants and loaded.info["seed"] == "3"
    assert torch.equal(loaded.meta["w0"], meta["w0"])
    assert loaded.info["format"] == "bdlkit-l2e-meta-params/1"
