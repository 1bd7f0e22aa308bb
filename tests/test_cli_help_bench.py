"""The ``bdlkit`` command line: help, ``list``, ``bench`` and ``demo``."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from bdlkit import algorithms, bench, data, models
from bdlkit.bench import digits
from bdlkit.cli import main
from bdlkit.runs.yaml_files import load_yaml


# ---------------------------------------------------------------------- help and list
def test_fit_method_help_shows_method_options(capsys):
    with pytest.raises(SystemExit) as info:
        main(["fit", "--method", "sgld", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "--lr" in out and "options of method 'sgld'" in out
    assert "--steps" in out and "--resume" in out


@pytest.mark.parametrize("method", sorted(algorithms.METHODS))
def test_every_method_has_a_fit_help_without_option_clashes(method, capsys):
    # a method option named like a RunConfig option (e.g. batch_size) would crash argparse
    with pytest.raises(SystemExit) as info:
        main(["fit", "--method", method, "--help"])
    assert info.value.code == 0
    assert f"options of method '{method}'" in capsys.readouterr().out


@pytest.mark.parametrize("command", [
    "fit", "evaluate", "compare", "bench", "list", "demo",
])
def test_every_subcommand_help_has_an_example(command, capsys):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "example" in out.lower()
    assert f"bdlkit {command}" in out


def test_top_level_help_has_examples(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("fit", "evaluate", "bench", "list", "demo"):
        assert command in out
    assert "bdlkit fit --method" in out


def test_list_prints_every_component(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for heading in ("methods:", "models:", "datasets:", "benchmark suites:"):
        assert heading in out
    names = [*algorithms.METHODS, *models.MODELS, *data.DATASETS, *bench.SUITES]
    for name in names:
        assert re.search(rf"^\s+{re.escape(name)}\s", out, re.MULTILINE), name
    for name in algorithms.METHODS:
        assert algorithms.kind_of(name) in out


# ---------------------------------------------------------------------- bench and demo
def test_bench_digits_suite(tmp_path):
    # `bdlkit bench digits --quick` (300 steps per method) took 11-29 s here, so the
    # suite runs directly with 30 steps.
    out = tmp_path / "bench"
    rows = digits.run(out, steps=30, echo=False)
    methods = sorted(m for m in algorithms.METHODS if m not in digits.SKIP)
    assert [r["method"] for r in rows] == methods
    results = json.loads((out / "results.json").read_text())
    assert results["suite"] == "digits" and results["steps"] == 30 and results["seed"] == 0
    assert [r["method"] for r in results["rows"]] == methods
    for row in results["rows"]:
        assert 0 <= row["accuracy"] <= 1 and 0 <= row["ece"] <= 1 and row["nll"] > 0
        assert set(digits.COLUMNS) <= set(row)  # timing columns included
    table = (out / "results.md").read_text()
    assert (out / "report.md").read_text() == table
    for column in digits.COLUMNS:
        assert column in table
    for method in methods:
        assert f"| {method} |" in table
        run_dir = out / "runs" / method
        assert (run_dir / "metrics.json").exists() and (run_dir / "config.yaml").exists()
        expected = max(2, round(30 * digits.FRACTION.get(method, 1.0)))
        assert load_yaml(run_dir / "config.yaml")["steps"] == expected
    assert sorted(p.name for p in (out / "runs").iterdir()) == methods


def _fake_suite(calls: list):
    def suite(out: Path, *, quick: bool, seed: int, command: str | None, echo: bool):
        calls.append({"out": out, "quick": quick, "seed": seed, "command": command})
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.md").write_text("| method |\n| fake |\n")
        return []
    return suite


def test_bench_command_runs_the_suite_and_prints_results(tmp_path, monkeypatch, capsys):
    calls: list = []
    monkeypatch.setitem(bench.SUITES, "digits", _fake_suite(calls))
    out = tmp_path / "b"
    assert main(["bench", "digits", "--quick", "--seed", "4", "--out", str(out)]) == 0
    assert len(calls) == 1
    assert calls[0]["out"] == out and calls[0]["quick"] is True and calls[0]["seed"] == 4
    assert "| fake |" in capsys.readouterr().out


def test_bench_command_records_the_command_given_to_main(tmp_path, monkeypatch, capsys):
    calls: list = []
    monkeypatch.setitem(bench.SUITES, "digits", _fake_suite(calls))
    monkeypatch.setattr(sys, "argv", ["python", "-m", "pytest", "tests/test_cli.py"])
    out = tmp_path / "b"
    assert main(["bench", "digits", "--quick", "--out", str(out)]) == 0
    command = calls[0]["command"]
    assert command is None or ("bench digits" in command and str(out) in command), command


def test_bench_unknown_suite(tmp_path, capsys):
    assert main(["bench", "nope", "--out", str(tmp_path / "b")]) == 2
    line = [x for x in capsys.readouterr().err.splitlines() if x.startswith("bdlkit: ")][-1]
    assert "'nope'" in line
    for name in bench.SUITES:
        assert name in line


def test_demo_prints_a_table(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--steps", "30", "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    lines = stdout.splitlines()
    header = next(line for line in lines if line.split()[:1] == ["method"])
    for column in ("accuracy", "NLL", "ECE"):
        assert column in header.split()
    from bdlkit.bench.digits import SKIP

    for method in (m for m in algorithms.METHODS if m not in SKIP):
        row = next(line for line in lines if line.split()[:1] == [method])
        accuracy, nll, ece = (float(v) for v in row.split()[1:4])
        assert 0 <= accuracy <= 1 and nll > 0 and 0 <= ece <= 1
    assert (out / "report.md").exists()
    assert json.loads((out / "results.json").read_text())["steps"] == 30
