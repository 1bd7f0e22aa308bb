"""The ``bdlkit`` command line, end to end on the embedded ``digits`` data set: run
directories, resume, divergence and evaluate (its parsing and ``--config`` files:
``test_cli_parsing.py``).

Every run is short (<= 60 steps of a 64-100-10 MLP, except the divergence tests, which
stop within a few dozen steps). A finished SGLD run is built once per module and copied
before a test changes it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

from bdlkit import data
from bdlkit.cli import main
from bdlkit.engine.checkpoint import list_checkpoints, load_checkpoint
from bdlkit.runs.yaml_files import load_yaml
from cli_helpers import error_line, fit

PNG = b"\x89PNG\r\n\x1a\n"
ACCEPTANCE = ["fit", "--method", "sgld", "--model", "mlp", "--data", "digits", "--steps", "60",
              "--seed", "0", "--out", "{out}", "--no-progress"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """The acceptance command's run directory, with its exit code and stdout."""
    out = tmp_path_factory.mktemp("acceptance") / "run"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        rc = main([a.format(out=out) for a in ACCEPTANCE])
    return out, rc, stdout.getvalue()


@pytest.fixture
def run_copy(finished_run, tmp_path):
    """A private copy of the finished run, safe to modify."""
    dst = tmp_path / "run"
    shutil.copytree(finished_run[0], dst)
    return dst


# ---------------------------------------------------------------------- acceptance
def test_acceptance_run_directory(finished_run):
    out, rc, stdout = finished_run
    assert rc == 0
    assert f"run directory: {out}" in stdout

    values = json.loads((out / "metrics.json").read_text())
    for key in ("accuracy", "nll", "ece"):
        assert isinstance(values[key], float), key
        assert math.isfinite(values[key]), key
    assert 0.0 <= values["accuracy"] <= 1.0
    assert 0.0 <= values["ece"] <= 1.0
    assert values["nll"] > 0
    assert values["accuracy"] > 0.3  # 60 SGLD steps learn something (chance is 0.1)
    for key in ("accuracy", "nll", "ece"):
        assert key in stdout

    text = (out / "report.md").read_text()
    for key in ("accuracy", "nll", "ece"):
        assert key in text
    assert f"{values['accuracy']:.4f}" in text
    assert "sgld" in text and "digits" in text

    cfg = load_yaml(out / "config.yaml")
    assert cfg["method"] == "sgld" and cfg["model"] == "mlp" and cfg["data"] == "digits"
    assert cfg["steps"] == 60 and cfg["seed"] == 0
    assert isinstance(cfg["hyper"]["lr"], float)
    for key in ("burnin", "thin", "max_samples", "checkpoint_every"):
        assert isinstance(cfg[key], int), key
    assert 0 <= cfg["burnin"] < 60 and cfg["thin"] >= 1 and cfg["max_samples"] >= 1
    assert 1 <= cfg["checkpoint_every"] <= 60

    lines = (out / "log.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    steps = [e["step"] for e in entries]
    assert steps == sorted(set(steps)) and steps[-1] == 60
    assert steps == list(range(cfg["log_every"], 61, cfg["log_every"]))
    assert all(math.isfinite(e["log_prob"]) for e in entries)

    ckpts = sorted((out / "checkpoints").iterdir())
    assert len(ckpts) == 2  # the newest two: one damaged file is not fatal
    assert load_checkpoint(ckpts[-1]).step == 60

    manifest = json.loads((out / "samples" / "manifest.json").read_text())
    assert isinstance(manifest, dict)
    assert values["num_draws"] >= 1

    if importlib.util.find_spec("matplotlib") is not None:
        assert (out / "reliability.png").read_bytes().startswith(PNG)


def test_resume_of_finished_run_gives_identical_metrics(finished_run, run_copy, capsys):
    before = (finished_run[0] / "metrics.json").read_bytes()
    log = (run_copy / "log.jsonl").read_text()
    (run_copy / "metrics.json").unlink()
    assert main(["fit", "--resume", str(run_copy), "--no-progress"]) == 0
    assert (run_copy / "metrics.json").read_bytes() == before
    assert (run_copy / "log.jsonl").read_text() == log
    captured = capsys.readouterr()
    assert "accuracy" in captured.out
    # it says, in one line, that there was nothing to continue
    notes = [line for line in captured.err.splitlines() if "had already finished" in line]
    assert notes == [f"{run_copy} had already finished (60 of 60 steps): nothing to continue; "
                     f"evaluating it again (as `bdlkit evaluate {run_copy}` does)"]


def test_compare_puts_fitted_runs_side_by_side(finished_run, run_copy, capsys):
    values = json.loads((run_copy / "metrics.json").read_text())
    assert main(["compare", str(finished_run[0]), str(run_copy)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    row = dict(zip(header, (c.strip() for c in lines[3].strip("|").split("|"))))
    assert (row["run"], row["method"], row["data"], row["model"]) == (
        str(run_copy), "sgld", "digits", "mlp")
    assert row["draws"] == str(values["num_draws"])
    assert row["accuracy"] == f"{values['accuracy']:.4f}" and row["OOD AUROC"] == "-"


def test_evaluate_rewrites_identical_metrics(finished_run, run_copy, capsys):
    before = (finished_run[0] / "metrics.json").read_bytes()
    (run_copy / "metrics.json").write_text("{}")
    (run_copy / "report.md").unlink()
    assert main(["evaluate", str(run_copy)]) == 0
    assert (run_copy / "metrics.json").read_bytes() == before
    assert "accuracy" in (run_copy / "report.md").read_text()
    assert "accuracy" in capsys.readouterr().out


# ---------------------------------------------------------------------- run directories, resume, divergence
def test_existing_out_dir_needs_resume_or_overwrite(run_copy, capsys):
    before = (run_copy / "metrics.json").read_bytes()
    assert fit(run_copy) == 2
    line = error_line(capsys.readouterr().err)
    assert "--resume" in line and "--overwrite" in line and str(run_copy) in line
    assert (run_copy / "metrics.json").read_bytes() == before  # untouched

    assert fit(run_copy, "--overwrite") == 0
    cfg = load_yaml(run_copy / "config.yaml")
    assert cfg["steps"] == 20
    assert [p.name for p in list_checkpoints(run_copy / "checkpoints")] == [
        "step-000000018.safetensors", "step-000000020.safetensors"
    ]
    assert json.loads((run_copy / "log.jsonl").read_text().splitlines()[-1])["step"] == 20


def test_overwrite_refuses_a_folder_that_is_not_a_run(tmp_path, capsys):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("do not delete")
    (out / "sub").mkdir()
    (out / "sub" / "data.csv").write_text("1,2\n")
    assert fit(out, "--overwrite") == 2
    line = error_line(capsys.readouterr().err)
    assert "not written by bdlkit" in line and str(out) in line
    assert (out / "thesis.tex").read_text() == "do not delete"
    assert (out / "sub" / "data.csv").read_text() == "1,2\n"
    assert sorted(p.name for p in out.iterdir()) == ["sub", "thesis.tex"]


def test_overwrite_keeps_user_files_even_with_a_config_yaml(tmp_path, capsys):
    """A folder with its own config.yaml (many tools write one) is still not a run dir."""
    out = tmp_path / "project"
    (out / "src").mkdir(parents=True)
    (out / "src" / "main.py").write_text("print(1)")
    (out / "config.yaml").write_text("a: 1\n")
    assert fit(out, "--overwrite") == 2
    assert "not written by bdlkit" in error_line(capsys.readouterr().err)
    assert (out / "src" / "main.py").read_text() == "print(1)"


def test_overwrite_of_a_run_deletes_only_what_bdlkit_wrote(run_copy, capsys):
    (run_copy / "notes.txt").write_text("mine")
    assert fit(run_copy, "--overwrite") == 0
    assert (run_copy / "notes.txt").read_text() == "mine"
    assert (run_copy / ".bdlkit-run").is_file() and (run_copy / "metrics.json").is_file()


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    out = tmp_path / "file.txt"
    out.write_text("keep")
    assert fit(out) == 2
    assert fit(out, "--overwrite") == 2
    assert out.read_text() == "keep"
    capsys.readouterr()


def test_empty_existing_out_dir_is_used(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    assert fit(out) == 0
    assert (out / "metrics.json").exists()


def test_resume_refuses_other_options(run_copy, capsys):
    before = (run_copy / "metrics.json").read_bytes()
    assert main(["fit", "--resume", str(run_copy), "--steps", "100"]) == 2
    line = error_line(capsys.readouterr().err)
    assert "--resume" in line
    assert (run_copy / "metrics.json").read_bytes() == before


def test_resume_of_folder_without_checkpoint(run_copy, capsys):
    shutil.rmtree(run_copy / "checkpoints")
    assert main(["fit", "--resume", str(run_copy), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "no checkpoint" in error_line(err)
    assert "Traceback" not in err and "had already finished" not in err


def test_resume_of_folder_that_is_not_a_run(tmp_path, capsys):
    assert main(["fit", "--resume", str(tmp_path), "--no-progress"]) == 2
    assert "not a bdlkit run directory" in error_line(capsys.readouterr().err)


def test_corrupt_checkpoint_is_reported_clearly(run_copy, capsys):
    older, newest = list_checkpoints(run_copy / "checkpoints")
    raw = newest.read_bytes()
    newest.write_bytes(raw[: len(raw) // 2])
    assert main(["evaluate", str(run_copy)]) == 2
    err = capsys.readouterr().err
    line = error_line(err)
    assert line.startswith("bdlkit: error:")
    assert "corrupt" in line and newest.name in line and "--resume" in line
    assert "Traceback" not in err

    raw = older.read_bytes()
    older.write_bytes(raw[: len(raw) // 2])
    assert main(["fit", "--resume", str(run_copy), "--no-progress"]) == 2  # nothing to fall back on
    line = error_line(capsys.readouterr().err)
    assert "every checkpoint" in line and "damaged" in line and "--overwrite" in line


def test_evaluate_of_folder_that_is_not_a_run(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path / "nope")]) == 2
    assert "not a bdlkit run directory" in error_line(capsys.readouterr().err)


def test_divergence_names_step_method_and_lr(tmp_path, capsys):
    rc = main(["fit", "--method", "sgld", "--lr", "1e9", "--steps", "40", "--log-every", "5",
               "--out", str(tmp_path / "r"), "--no-progress"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = error_line(err)
    match = re.search(r"\bstep (\d+)", line)
    assert match and 1 <= int(match.group(1)) <= 40, line
    assert "sgld" in line and "lr" in line
    assert not (tmp_path / "r" / "metrics.json").exists()


def test_divergence_names_last_good_checkpoint(tmp_path, capsys):
    out = tmp_path / "r"
    rc = main(["fit", "--method", "sgld", "--lr", "10", "--checkpoint-every", "5",
               "--steps", "300", "--log-every", "5", "--out", str(out), "--no-progress"])
    assert rc == 1
    line = error_line(capsys.readouterr().err)
    step = int(re.search(r"\bstep (\d+)", line).group(1))
    match = re.search(r"last checkpoint with finite, bounded parameters is (\S+\.safetensors)",
                      line)
    assert match, line
    path = Path(match.group(1))
    assert path.parent == out / "checkpoints"
    ckpt = load_checkpoint(path)
    assert ckpt.step % 5 == 0 and 0 < ckpt.step < step
    assert all(torch.isfinite(t).all() for t in ckpt.state.values() if t.is_floating_point())


def test_resume_after_a_nan_stop_takes_a_smaller_lr_and_records_it(tmp_path, capsys):
    """Issue 19 item 6: after a NaN stop, `fit --resume DIR --lr X` continues from the last
    sane checkpoint with the smaller step size; config.yaml records the change."""
    out = tmp_path / "r"
    assert main(["fit", "--method", "sgld", "--lr", "10", "--checkpoint-every", "5",
                 "--steps", "60", "--log-every", "5", "--out", str(out), "--no-progress"]) == 1
    line = error_line(capsys.readouterr().err)
    kept = int(re.search(r"step-(\d+)\.safetensors \(later", line).group(1))
    for refused in (["--seed", "3"], ["--lr", "0.01", "--batch-size", "32"]):
        assert main(["fit", "--resume", str(out), *refused, "--no-progress"]) == 2
        assert "step size" in error_line(capsys.readouterr().err)
    assert main(["fit", "--resume", str(out), "--lr", "-1", "--no-progress"]) == 2
    assert "--lr" in error_line(capsys.readouterr().err)
    assert main(["fit", "--resume", str(out), "--lr", "0.001", "--no-progress"]) == 0
    cfg = load_yaml(out / "config.yaml")
    assert cfg["hyper"]["lr"] == 0.001
    assert cfg["changes"] == [{"step": kept, "option": "lr", "from": 10.0, "to": 0.001}]
    assert math.isfinite(json.loads((out / "metrics.json").read_text())["nll"])
    assert main(["evaluate", str(out)]) == 0  # the checkpoints after the change match it


# ---------------------------------------------------------------------- OOD evaluation
def _require(name: str, **kwargs):
    try:
        return data.load(name, **kwargs)
    except data.DataNotFoundError as err:
        pytest.skip(f"{name} data files are not available here: {err}")


def test_evaluate_ood_on_mnist(tmp_path, capsys):
    _require("mnist", train_size=200, test_size=100)
    _require("notmnist")
    out = tmp_path / "mnist"
    # test_size keeps evaluation fast (the default 9 800 test images take ~15 s)
    rc = main(["fit", "--method", "sgld", "--data", "mnist", "--data-kwargs",
               '{"train_size": 200, "test_size": 1000}', "--steps", "20", "--log-every", "5",
               "--out", str(out), "--no-progress"])
    assert rc == 0
    assert main(["evaluate", str(out), "--ood", "notmnist"]) == 0
    values = json.loads((out / "metrics.json").read_text())
    assert 0.0 <= values["ood_auroc"] <= 1.0
    assert values["ood_data"] == "notmnist"
    assert "AUROC" in capsys.readouterr().out  # the summary table
    assert "ood_auroc" in (out / "report.md").read_text()


def test_evaluate_ood_same_data_is_chance(run_copy, capsys):
    assert main(["evaluate", str(run_copy), "--ood", "digits"]) == 0
    values = json.loads((run_copy / "metrics.json").read_text())
    assert values["ood_auroc"] == pytest.approx(0.5)  # identical inputs: no separation
    assert values["ood_data"] == "digits"


def test_evaluate_ood_of_another_shape_is_refused(run_copy, capsys):
    _require("notmnist")
    before = (run_copy / "metrics.json").read_bytes()
    assert main(["evaluate", str(run_copy), "--ood", "notmnist"]) == 2
    line = error_line(capsys.readouterr().err)
    assert "shape" in line and "notmnist" in line and "(64,)" in line
    assert (run_copy / "metrics.json").read_bytes() == before


def test_files_get_the_usual_permissions(finished_run):
    mode = (finished_run[0] / "metrics.json").stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask


def test_bench_refuses_a_folder_it_did_not_write(tmp_path, capsys):
    (tmp_path / "report.md").write_text("my report")
    assert main(["bench", "runner", "--quick", "--out", str(tmp_path)]) == 2
    assert "not written by bdlkit" in error_line(capsys.readouterr().err)
    assert (tmp_path / "report.md").read_text() == "my report"
