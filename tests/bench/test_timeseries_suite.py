"""The timeseries suite: a tiny plan end to end, and its verdict rules on made-up records."""

from __future__ import annotations

import json
import math

import pytest

from bdlkit.bench import timeseries
from bdlkit.bench import timeseries_report as report


def record(task, label, seed, **values):
    return {"task": task, "label": label, "seed": seed, "status": "ok", **values}


def claim(records, key):
    return next(v for v in report.verdicts(records) if v["claim"] == key)


@pytest.mark.slow
def test_tiny_plan_end_to_end(tmp_path):
    plan = timeseries.Plan(("ili-24",), seeds=2,
                           rows=("koopa", "map", "advi", "score_vi"), steps=15,
                           max_windows=64)
    records = timeseries.run(tmp_path, plan=plan)
    assert len(records) == 8 and all(r["status"] == "ok" for r in records), records
    results = json.loads((tmp_path / "results.json").read_text())
    rows = {(r["task"], r["label"]): r for r in results["rows"]}
    assert set(rows) == {("ili-24", label) for label in plan.rows}
    for row in rows.values():
        assert row["seeds"] == 2 and math.isfinite(row["crps"]) and "mse_std" in row
    # score_vi at its default follows advi's iterates: the control the report names
    assert abs(rows[("ili-24", "score_vi")]["mse"] - rows[("ili-24", "advi")]["mse"]) < 1e-3
    text = (tmp_path / "report.md").read_text()
    assert "## Verdicts" in text and "forecast-ili-24-koopa.png" in text
    assert (tmp_path / "plots" / "forecast-ili-24-score_vi.png").is_file()
    assert "score_vi beats ELBO-VI" in (tmp_path / "results.md").read_text()


def paired_records(diffs_by_task, metrics=("mse", "mae", "nll")):
    recs = []
    for task, diffs in diffs_by_task.items():
        for seed, d in enumerate(diffs):
            recs.append(record(task, "advi", seed, **{m: 1.0 for m in metrics}))
            recs.append(record(task, "score_vi", seed, **{m: 1.0 + d for m in metrics}))
    return recs


def test_supported_needs_most_cells_better_and_none_worse():
    better = [-0.10, -0.11, -0.09]
    recs = paired_records({"a": better, "b": better})
    assert claim(recs, "score_vi_vs_advi")["verdict"] == "supported"
    recs = paired_records({"a": better, "b": [0.10, 0.11, 0.09]})  # worse on half
    assert claim(recs, "score_vi_vs_advi")["verdict"] == "inconclusive"
    recs = paired_records({"a": [0.10, 0.11, 0.09], "b": [0.1, -0.1, 0.0]})
    assert claim(recs, "score_vi_vs_advi")["verdict"] == "not supported"


def test_rounding_sized_differences_are_ties():
    """Same-sign differences of 1e-9 have a tiny SE; they are still not a method."""
    recs = paired_records({"a": [-1e-9, -2e-9, -1.5e-9]})
    cells = claim(recs, "score_vi_vs_advi")["cells"]
    assert {c["outcome"] for c in cells.values()} == {"tied"}


def test_a_failed_seed_makes_the_claim_inconclusive_not_a_smaller_sample():
    recs = paired_records({"a": [-0.10, -0.11, -0.09]})
    recs[-1]["status"] = "error: NonFiniteError: ..."  # score_vi's third seed failed
    assert claim(recs, "score_vi_vs_advi")["verdict"].startswith("inconclusive (runs missing")
    rows = {r["label"]: r for r in report.summarize(recs)}
    assert rows["score_vi"]["status"].startswith("error") and rows["score_vi"]["seeds"] == 2


def test_one_seed_or_missing_rows_are_never_a_verdict():
    recs = [record("a", "advi", 0, mse=1.0, mae=1.0, nll=1.0),
            record("a", "score_vi", 0, mse=0.5, mae=0.5, nll=0.5)]
    assert claim(recs, "score_vi_vs_advi")["verdict"] == "inconclusive"
    assert claim(recs, "score_vi_vs_koopa")["verdict"].startswith("inconclusive (runs missing")


@pytest.mark.parametrize(("diffs", "outcome"), [([-1.0, -1.1, -0.9], "better"),
                                                ([1.0, 1.1, 0.9], "worse"),
                                                ([-1.0, 1.0, 0.1], "tied"),
                                                ([-1.0, -1.5, -0.2], "tied")])
def test_compare_uses_students_t(diffs, outcome):
    """[-1, -1.5, -0.2]: mean −0.9, SE 0.38: beyond 2 SE but not t_{0.975, 2} = 4.30 SE."""
    assert report.compare(diffs)[0] == outcome
