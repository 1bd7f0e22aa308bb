"""``bdlkit meta-train meta-sgmcmc``: a tiny run's files, bit-exact resumption, refused
resumptions and the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bdlkit import cli
from bdlkit.core import meta_run
from bdlkit.core.serialization import load_tensors_with_metadata
from bdlkit.l2e.tasks import available_families
from bdlkit.meta_sgmcmc import Constants, init_meta_params, load_meta_params
from bdlkit.meta_sgmcmc import meta_train as mt
from bdlkit.meta_sgmcmc.meta_train import MetaTrainConfig, meta_train

TINY = dict(chains=3, unrolls=2, unroll_steps=6, tbptt=3, loss_every=2, batch_size=32,
            families=("teacher-mlp",))
TIMING = ("seconds",)  # the only history fields that may differ between two runs


def _history(out: Path) -> list[dict]:
    return [{k: v for k, v in h.items() if k not in TIMING}
            for h in json.loads((out / "history.json").read_text())]


def _assert_same_run(a: Path, b: Path) -> None:
    """The same meta-parameter file and checkpoint byte for byte (bdlkit writes the
    safetensors header with sorted keys), and the same history up to timing."""
    for name in ("meta_params.safetensors", meta_run.CHECKPOINT):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
        ta, ma = load_tensors_with_metadata(a / name)
        tb, mb = load_tensors_with_metadata(b / name)
        assert ma == mb, name
        assert set(ta) == set(tb) and all(torch.equal(ta[k], tb[k]) for k in ta), name
    assert _history(a) == _history(b)
    assert json.loads((a / "config.json").read_text()) == \
        json.loads((b / "config.json").read_text())


def test_the_tiny_families_are_available():
    assert "teacher-mlp" in available_families()
    assert MetaTrainConfig(**TINY).families == ("teacher-mlp",)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """2 epochs x 2 unrolls uninterrupted (4 outer steps, about 0.5 s)."""
    out = tmp_path_factory.mktemp("meta") / "full"
    summary = meta_train(out, MetaTrainConfig(epochs=2, **TINY), echo=None, command="test")
    assert summary["steps"] == 4
    return out


def test_a_run_writes_its_outputs_and_loadable_meta_parameters(full_run):
    for name in meta_run.OUTPUTS:
        assert (full_run / name).is_file(), name
    pre = load_meta_params(full_run / "meta_params.safetensors")
    assert pre.constants == Constants()
    assert pre.info["outer_steps"] == "4" and pre.info["command"] == "test"
    init = init_meta_params(torch.Generator().manual_seed(0))
    change = max((pre.meta[k] - init[k]).abs().max().item() for k in init)
    assert change > 1e-4  # four Adam steps moved φ
    history = json.loads((full_run / "history.json").read_text())
    assert [(h["epoch"], h["unroll"]) for h in history] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(h["meta_loss"] is not None and h["dropped_windows"] == 0 for h in history)
    assert not any(h["restarted"] for h in history)
    tensors, meta = load_tensors_with_metadata(full_run / meta_run.CHECKPOINT)
    assert {"phi", "adam_m", "adam_v", "adam_t", "chain_theta", "chain_p"} <= set(tensors)
    assert tensors["chain_theta"].shape[0] == 3 and meta["steps"] == "4"
    config = json.loads((full_run / "config.json").read_text())
    assert config["chains"] == 3 and config["command"] == "test"


def test_more_epochs_resume_to_the_uninterrupted_run(full_run, tmp_path):
    """epochs is resumable: 1 epoch, then the same folder with 2, equals 2 straight."""
    out = tmp_path / "cut"
    assert meta_train(out, MetaTrainConfig(epochs=1, **TINY), echo=None,
                      command="test")["steps"] == 2
    assert meta_train(out, MetaTrainConfig(epochs=2, **TINY), echo=None,
                      command="test")["steps"] == 4
    _assert_same_run(out, full_run)


def test_a_crash_mid_epoch_resumes_bit_exactly(full_run, tmp_path, monkeypatch):
    """A crash in the second unroll of the first epoch (after the checkpoint of step 0,
    which holds the chains of the continuation unroll); the rerun continues from those
    chains and ends where the uninterrupted run ends."""
    out = tmp_path / "crash"
    inner = mt.unroll
    calls = []

    def crash(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("simulated crash")
        return inner(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(mt, "unroll", crash)
        with pytest.raises(RuntimeError, match="simulated crash"):
            meta_train(out, MetaTrainConfig(epochs=2, **TINY), echo=None, command="test")
    tensors, meta = load_tensors_with_metadata(out / meta_run.CHECKPOINT)
    assert meta["steps"] == "1" and "chain_theta" in tensors
    said = []
    assert meta_train(out, MetaTrainConfig(epochs=2, **TINY), echo=said.append,
                      command="test")["steps"] == 4
    assert said[0].startswith("resuming meta-training from outer step 1")
    _assert_same_run(out, full_run)


def test_a_budget_stops_between_outer_steps_and_the_rerun_finishes(tmp_path):
    out = tmp_path / "budget"
    summary = meta_train(out, MetaTrainConfig(epochs=2, budget_minutes=1e-9, **TINY),
                         echo=None)
    assert summary == {"steps": 0, "final_meta_loss": None, "out": str(out)}
    # budget_minutes is resumable too
    assert meta_train(out, MetaTrainConfig(epochs=1, **TINY), echo=None)["steps"] == 2


@pytest.mark.parametrize("change", [
    {"chains": 4}, {"unroll_steps": 10}, {"lr": 1e-3}, {"seed": 1},
    {"constants": Constants(d_max=500.0)},
])
def test_changed_options_are_not_resumed(tmp_path, change):
    out = tmp_path / "run"
    meta_train(out, MetaTrainConfig(epochs=1, **TINY), echo=None)
    before = (out / "meta_params.safetensors").read_bytes()
    cfg = MetaTrainConfig(epochs=1, **{**TINY, **change})
    with pytest.raises(ValueError, match="other options .*--overwrite") as info:
        meta_train(out, cfg, echo=None)
    assert list(change)[0] in str(info.value) and str(out) in str(info.value)
    assert (out / "meta_params.safetensors").read_bytes() == before  # nothing touched
    summary = meta_train(out, cfg, overwrite=True, echo=None)  # --overwrite starts afresh
    assert summary["steps"] == 2
    assert json.loads((out / "history.json").read_text())[0]["step"] == 0


def test_tbptt_equal_to_loss_every_trains(tmp_path):
    cfg = MetaTrainConfig(epochs=1, **{**TINY, "tbptt": 3, "loss_every": 3})
    assert meta_train(tmp_path / "run", cfg, echo=None)["steps"] == 2
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert all(h["meta_loss"] is not None for h in history)


@pytest.mark.parametrize("bad, needle", [
    ({"chains": 1}, "chains must be >= 2"),
    ({"unroll_steps": 0}, "unroll_steps must be an integer >= 1"),
    ({"tbptt": 2.5}, "tbptt must be an integer"),
    ({"lr": 0.0}, "lr must be a finite number > 0"),
    ({"beta1": 1.0}, "beta1 must be in"),
    ({"families": ("cifar-resnet",)}, "families"),
    ({"families": ()}, "families"),
])
def test_config_validation(bad, needle):
    with pytest.raises(ValueError, match=needle):
        MetaTrainConfig(**{**TINY, **bad})


CLI_TINY = ["--epochs", "1", "--unrolls", "2", "--unroll-steps", "6", "--chains", "3",
            "--tbptt", "3", "--loss-every", "2", "--batch-size", "32",
            "--families", "teacher-mlp"]


def _main(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as exit_:  # argparse's own errors
        return int(exit_.code)


def test_cli_meta_train_runs_and_resumes(tmp_path, capsys):
    out = tmp_path / "cli"
    assert _main(["meta-train", "meta-sgmcmc", "--out", str(out), *CLI_TINY]) == 0
    printed = capsys.readouterr().out
    assert "meta-training: 2 outer steps" in printed
    assert f"{out}/meta_params.safetensors" in printed
    config = json.loads((out / "config.json").read_text())
    assert config["command"].startswith("bdlkit meta-train meta-sgmcmc --out")
    assert config["chains"] == 3 and config["families"] == ["teacher-mlp"]
    load_meta_params(out / "meta_params.safetensors")
    more = [a if a != "1" else "2" for a in CLI_TINY]  # --epochs 2
    assert _main(["meta-train", "meta-sgmcmc", "--out", str(out), *more]) == 0
    assert "meta-training: 4 outer steps" in capsys.readouterr().out


@pytest.mark.parametrize("argv, needles", [
    (["--chains", "1"], ["chains must be >= 2"]),
    (["--chains", "x"], ["--chains", "'x'"]),
    (["--families", "nope"], ["families", "nope"]),
    (["--step-mult", "-1"], ["step_mult", "> 0"]),
    (["--unroll-steps", "0"], ["unroll_steps"]),
])
def test_cli_bad_options_are_one_line_exit_2(tmp_path, capsys, argv, needles):
    rc = _main(["meta-train", "meta-sgmcmc", "--out", str(tmp_path / "bad"), *argv])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2, err
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith("bdlkit: error:"), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert not (tmp_path / "bad" / "checkpoint.safetensors").exists()


def test_cli_refuses_a_changed_resume_in_one_line(tmp_path, capsys):
    out = tmp_path / "cli"
    assert _main(["meta-train", "meta-sgmcmc", "--out", str(out), *CLI_TINY]) == 0
    capsys.readouterr()
    changed = [a if a != "3" else "4" for a in CLI_TINY]  # --chains 4 (and --tbptt 4)
    rc = _main(["meta-train", "meta-sgmcmc", "--out", str(out), *changed])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and "Traceback" not in err and len(lines) == 1, err
    assert "other options" in lines[0] and "--overwrite" in lines[0]
