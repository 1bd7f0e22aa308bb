"""A run on a user's file records where the data is and how its inputs were scaled, so
that it can be evaluated, loaded and reproduced from any folder (issue 43, own data 5 and
raw pixels)."""

import numpy as np
import pytest
import torch
import yaml

from bdlkit.core.errors import InputScaleWarning
from bdlkit.runs import directory as run
from bdlkit.runs.config import RunConfig


def _pixels_npz(folder):
    """A user's two-class image file as most are saved: uint8 pixels 0..255."""
    gen = np.random.default_rng(0)
    x = gen.integers(0, 256, size=(40, 1, 4, 4)).astype(np.uint8)
    x[0, 0, 0, :2] = (0, 255)
    path = folder / "pixels.npz"
    np.savez(path, x=x, y=(x.reshape(40, -1).mean(1) > 127).astype(np.int64))
    return path


def test_a_relative_data_path_is_recorded_absolute_and_evaluates_from_anywhere(
        tmp_path, monkeypatch):
    start, elsewhere = tmp_path / "start", tmp_path / "elsewhere"
    start.mkdir()
    elsewhere.mkdir()
    data = _pixels_npz(start)
    monkeypatch.chdir(start)
    cfg = RunConfig(method="map", data="pixels.npz", data_root="roots", steps=4,
                    hyper={"lr": 1e-2})
    assert cfg.data == str(data) and cfg.data_root == str(start / "roots")
    out = run.fit(cfg, "run")
    recorded = yaml.safe_load((start / "run" / "config.yaml").read_text())
    assert recorded["data"] == str(data)
    assert recorded["data_kwargs"] == {"scale_uint8": True, "standardize": False}
    report = (start / "run" / "report.md").read_text()
    assert f"--config {start / 'run' / 'config.yaml'} --out NEW_DIR" in report

    monkeypatch.chdir(elsewhere)  # evaluate, load and reproduce from another folder
    again = run.reevaluate(start / "run")  # loads the run (load_run) from here
    assert again["accuracy"] == out.metrics["accuracy"]
    ds = run.load_dataset(RunConfig.from_dict(recorded, "config.yaml"))
    x = torch.cat([ds.x_train, ds.x_test])
    assert float(x.min()) == 0.0 and float(x.max()) == 1.0  # uint8 pixels scaled on load


def test_the_recorded_scaling_is_what_a_reload_applies(tmp_path):
    data = _pixels_npz(tmp_path)
    off = RunConfig(method="map", data=str(data), data_kwargs={"scale_uint8": False})
    assert off.data_kwargs == {"scale_uint8": False, "standardize": False}
    with pytest.warns(InputScaleWarning):
        assert float(run.load_dataset(off).x_train.max()) == 255.0
    scaled = RunConfig(method="map", data=str(data), data_kwargs={"standardize": True})
    x = run.load_dataset(scaled).x_train.double()
    assert abs(float(x.mean())) < 1e-5
    named = RunConfig(method="map", data="digits")  # named data sets are left as given
    assert (named.data, named.data_kwargs) == ("digits", {})


def test_a_run_recorded_before_the_scaling_options_reads_back_unscaled(tmp_path):
    """A config.yaml without scale_uint8 was written when files were never scaled: its run
    is read back (evaluate, load, resume) with the raw inputs it was trained on."""
    data = _pixels_npz(tmp_path)
    folder = tmp_path / "old"
    folder.mkdir()
    stored = RunConfig(method="map", data=str(data), steps=4).to_dict()
    stored["data_kwargs"] = {}  # as an older bdlkit wrote it
    (folder / "config.yaml").write_text(yaml.safe_dump(stored))
    cfg = run.read_config(folder)
    assert cfg.data_kwargs == {"scale_uint8": False, "standardize": False}
    with pytest.warns(InputScaleWarning):
        assert float(run.load_dataset(cfg).x_train.max()) == 255.0
