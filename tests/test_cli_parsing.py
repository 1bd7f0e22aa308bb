"""The ``bdlkit`` command line's parsing, end to end on the embedded ``digits`` data set:
unknown names and misspelt options (one ``bdlkit: error:`` line, exit status 2, nothing
written) and ``--config`` files (their values, the command line over them, their errors).

Split from ``test_cli.py`` (which keeps the run directory, resume, divergence and evaluate
tests around one finished run); every run here is short (<= 20 steps of a 64-100-10 MLP).
"""

from __future__ import annotations

import json

import pytest

from bdlkit import algorithms, models
from bdlkit.cli import main
from bdlkit.runs.yaml_files import load_yaml
from cli_helpers import error_line, fit


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize("bad, extra, method, valid", [
    ("sgdl", (), "sgdl", algorithms.METHODS),
    ("mlpp", ("--model", "mlpp"), "sgld", models.MODELS),
], ids=["method", "model"])
def test_an_unknown_method_or_model_lists_valid_names(tmp_path, capsys, bad, extra, method,
                                                      valid):
    assert fit(tmp_path / "r", *extra, method=method) == 2
    line = error_line(capsys.readouterr().err)
    assert line.startswith("bdlkit: error:") and f"'{bad}'" in line
    for name in valid:
        assert name in line
    assert not (tmp_path / "r").exists()


def test_unknown_data_set_lists_valid_names(tmp_path, capsys):
    assert fit(tmp_path / "r", "--data", "digitz") == 2
    err = capsys.readouterr().err
    assert "bdlkit: error:" in err and "'digitz'" in err
    for name in ("digits", "mnist", "notmnist", "uci/<name> (boston", "bdlkit list"):
        assert name in err
    assert "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_misspelled_option_suggests(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["fit", "--method", "sgld", "--stpes", "5", "--out", str(tmp_path / "r")])
    assert info.value.code == 2
    assert "did you mean --steps" in capsys.readouterr().err


def test_misspelled_method_option_suggests(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["fit", "--method", "sgld", "--lrr", "0.1", "--steps", "5",
              "--out", str(tmp_path / "r")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "did you mean --lr" in err and "--lrr" in err


def test_method_option_of_another_method_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["fit", "--method", "sgld", "--optimizer", "sgd", "--steps", "5",
              "--out", str(tmp_path / "r")])
    assert info.value.code == 2
    assert "--optimizer" in capsys.readouterr().err


def test_abbreviated_options_are_refused(tmp_path):
    with pytest.raises(SystemExit):
        main(["fit", "--method", "sgld", "--step", "3", "--out", str(tmp_path / "r")])


@pytest.mark.parametrize("argv, needle", [
    (["fit", "--steps", "5", "--out", "x"], "--method is required"),
    (["fit", "--method", "sgld", "--steps", "5"], "--out DIR is required"),
])
def test_missing_required_option(argv, needle, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert needle in capsys.readouterr().err


def test_steps_and_epochs_conflict(tmp_path, capsys):
    assert fit(tmp_path / "r", "--epochs", "1") == 2
    assert "exactly one of steps or epochs" in error_line(capsys.readouterr().err)


# ---------------------------------------------------------------------- --config files
def test_misspelled_key_in_config_file(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text("method: sgld\nstesp: 20\n")
    assert main(["fit", "--config", str(path), "--out", str(tmp_path / "r")]) == 2
    line = error_line(capsys.readouterr().err)
    assert "'stesp'" in line and "did you mean 'steps'" in line and str(path) in line
    assert not (tmp_path / "r").exists()


def test_misspelled_hyperparameter_in_config_file(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text("method: sgld\nsteps: 20\nhyper: {lrr: 0.1}\n")
    assert main(["fit", "--config", str(path), "--out", str(tmp_path / "r")]) == 2
    line = error_line(capsys.readouterr().err)
    assert "'lrr'" in line and "did you mean 'lr'" in line


def test_invalid_config_file(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text("method: sgld\nsteps: [20\n")
    assert main(["fit", "--config", str(path), "--out", str(tmp_path / "r")]) == 2
    assert "not valid YAML" in error_line(capsys.readouterr().err)
    missing = tmp_path / "missing.yaml"
    assert main(["fit", "--config", str(missing), "--out", str(tmp_path / "r")]) == 2
    assert "does not exist" in error_line(capsys.readouterr().err)


def test_config_file_values_are_used(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text("method: sgld\nsteps: 12\nseed: 3\nlog_every: 4\nbatch_size: 64\n"
                    "hyper: {lr: 0.05}\n")
    out = tmp_path / "r"
    assert main(["fit", "--config", str(path), "--out", str(out), "--no-progress"]) == 0
    cfg = load_yaml(out / "config.yaml")
    assert (cfg["method"], cfg["steps"], cfg["seed"], cfg["log_every"], cfg["batch_size"]) == (
        "sgld", 12, 3, 4, 64)
    assert cfg["hyper"]["lr"] == 0.05
    capsys.readouterr()


def test_command_line_overrides_config_file(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text("method: sgld\nsteps: 12\nseed: 3\nlog_every: 4\nbatch_size: 64\n"
                    "hyper: {lr: 0.05}\n")
    out = tmp_path / "r"
    argv = ["fit", "--config", str(path), "--steps", "8", "--seed", "1", "--lr", "0.02",
            "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    cfg = load_yaml(out / "config.yaml")
    assert (cfg["steps"], cfg["seed"], cfg["hyper"]["lr"]) == (8, 1, 0.02)  # command line
    assert (cfg["log_every"], cfg["batch_size"]) == (4, 64)  # file
    steps = [json.loads(line)["step"] for line in (out / "log.jsonl").read_text().splitlines()]
    assert steps == [4, 8]
    capsys.readouterr()


def test_config_file_scientific_notation_lr(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text("method: sgld\nsteps: 6\nlog_every: 3\nhyper: {lr: 1e-3}\n")
    out = tmp_path / "r"
    rc = main(["fit", "--config", str(path), "--out", str(out), "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    assert load_yaml(out / "config.yaml")["hyper"]["lr"] == 0.001


def test_command_line_length_replaces_the_config_files(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text("method: map\nsteps: 500\nlog_every: 1\n")
    out = tmp_path / "r"
    assert main(["fit", "--config", str(path), "--epochs", "1", "--out", str(out),
                 "--no-progress"]) == 0
    cfg = load_yaml(out / "config.yaml")
    assert cfg["epochs"] == 1 and cfg["steps"] is None
