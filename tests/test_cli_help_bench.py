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
@pytest.mark.slow
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


def _fake_digits(calls: list):
    """digits.run without fitting: one row per method asked for (long names included)."""
    def run(out: Path, *, seed: int, steps: int, command: str | None, methods=None, **_):
        calls.append({"methods": methods, "steps": steps, "command": command})
        return [{"method": m, "kind": algorithms.kind_of(m), "accuracy": 0.9, "nll": 0.3,
                 "ece": 0.02, "train_s": 1.0, "eval_s": 0.5} for m in methods]
    return run


def test_demo_prints_an_aligned_table_without_the_weak_methods(tmp_path, monkeypatch, capsys):
    from bdlkit.bench.demo import WEAK_ON_NETWORKS

    calls: list = []
    monkeypatch.setattr(digits, "run", _fake_digits(calls))
    assert main(["demo", "--steps", "30", "--out", str(tmp_path / "demo")]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = [line for line in lines if line.startswith("|")]
    assert [c.strip() for c in table[0].strip("|").split("|")][:5] == [
        "method", "kind", "accuracy", "NLL", "ECE"]
    bars = {tuple(i for i, ch in enumerate(line) if ch == "|") for line in table}
    assert len(bars) == 1  # every row's columns line up, meta_sgmcmc and all
    shown = [line.split("|")[1].strip() for line in table[2:]]
    assert shown == sorted(m for m in algorithms.METHODS
                           if m not in digits.SKIP and m not in WEAK_ON_NETWORKS)
    assert "meta_sgmcmc" in shown and calls[0]["methods"] == shown
    assert calls[0]["steps"] == 30
    text = "\n".join(lines)
    assert "--all" in text
    for method, reason in WEAK_ON_NETWORKS.items():  # left out, each with its reason
        assert f"{method}: {reason}" in text

    assert main(["demo", "--steps", "30", "--all", "--out", str(tmp_path / "demo")]) == 0
    lines = capsys.readouterr().out.splitlines()
    shown = [line.split("|")[1].strip() for line in lines if line.startswith("|")][2:]
    assert set(WEAK_ON_NETWORKS) <= set(shown) and calls[1]["command"].endswith("--all")
    for method, reason in WEAK_ON_NETWORKS.items():  # shown, each with its reason
        assert f"{method}: {reason}" in "\n".join(lines)
