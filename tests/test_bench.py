"""Benchmark suites run end to end (tiny sizes) and write their JSON and Markdown."""

import json

from bdlkit import bench
from bdlkit.bench import runner_overhead


def test_runner_suite_reports_overhead_and_leaves_the_chain_unchanged(tmp_path):
    rows = runner_overhead.run(tmp_path, steps=30, repeats=1, echo=False)
    assert [r["mode"] for r in rows] == ["bare", "memory", "run_dir"]
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["same_final_state"] is True and result["command"].startswith("bdlkit bench")
    assert rows[0]["ratio"] == 1.0 and all(r["seconds"] > 0 for r in rows)
    assert "| mode |" in (tmp_path / "results.md").read_text()


def test_every_suite_is_described():
    assert set(bench.SUITES) == set(bench.DESCRIPTIONS) >= {"digits", "runner", "diagnostics"}


def test_diagnostics_suite_matches_arviz(tmp_path):
    from bdlkit.bench import diagnostics_speed

    rows = diagnostics_speed.run(tmp_path, coords=60, arviz_coords=20, draws=100, echo=False)
    assert [r["diagnostic"] for r in rows] == ["rhat (rank)", "ess (bulk)"]
    assert all(r["max_abs_diff"] < 1e-6 and r["speedup"] > 0 for r in rows)
