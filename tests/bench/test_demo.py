"""``bdlkit demo``: its table, the methods it runs and the digits suite on a subset of them
(``tests/test_cli_help_bench.py`` runs the command with the suite replaced)."""

from __future__ import annotations

import json

from bdlkit import algorithms
from bdlkit.bench import demo, digits


def test_the_table_stays_aligned_for_any_name_length():
    rows = [{"method": name, "kind": "sampler", "accuracy": 0.9, "nll": 90.49, "ece": 0.02,
             "train_s": 12.5, "eval_s": 0.4}
            for name in ("map", "fisher_vi", "meta_sgmcmc", "a_plug_in_with_a_long_name")]
    lines = demo.table(rows).splitlines()
    assert len(lines) == 2 + len(rows)
    assert len({tuple(i for i, ch in enumerate(line) if ch == "|") for line in lines}) == 1
    assert "90.4900" in lines[2] and "a_plug_in_with_a_long_name" in lines[-1]


def test_the_weak_methods_are_left_out_unless_asked_for():
    default, every = demo.methods(), demo.methods(include_weak=True)
    assert set(demo.WEAK_ON_NETWORKS) <= set(algorithms.METHODS)
    assert not set(default) & set(demo.WEAK_ON_NETWORKS)
    assert set(every) - set(default) == set(demo.WEAK_ON_NETWORKS)
    assert all(line.count("\n") == 0 for line in demo.WEAK_ON_NETWORKS.values())


def test_the_digits_suite_runs_only_the_methods_given(tmp_path, monkeypatch):
    monkeypatch.setattr(digits, "warm_up", lambda: None)  # untimed steps, not needed here
    out = tmp_path / "demo"
    rows = digits.run(out, steps=2, methods=["map"])
    assert [r["method"] for r in rows] == ["map"]
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["map"]
    assert [r["method"] for r in json.loads((out / "results.json").read_text())["rows"]] == [
        "map"]
    report = (out / "report.md").read_text()
    assert "`fisher_vi`" not in report and "`ensemble`" not in report  # notes of runs only
