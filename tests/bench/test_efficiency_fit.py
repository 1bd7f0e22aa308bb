"""The whole-run section of ``bench efficiency``: one ``bdlkit fit`` split into its phases,
against the same steps of a bare loop."""

import json

import pytest

from bdlkit.bench import efficiency_fit
from bdlkit.engine.runner import Runner
from bdlkit.runs import directory

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
ARGV = ["fit", "--method", "sgld", "--steps", "10", "--threads", "1", "--out", "TMP"]
#: a run's marks: 1 s of start-up, 0.5 s of data, 0.25 s of set-up, 2 s of training
#: (0.5 s of it the bare loop's 10 steps), 1 s of evaluation, 0.25 s around them
MARKS = {"spawn": 100.0, "started": 100.05, "torch": 100.5, "data_start": 101.0,
         "data_end": 101.5, "training_start": 101.75, "training_end": 103.75,
         "evaluation_start": 103.875, "evaluation_end": 104.875, "main_end": 105.0,
         "bare_loop_s": 0.5}


def test_the_summary_splits_the_whole_run_into_its_phases():
    run = efficiency_fit.summary(MARKS, 10, ARGV)
    rows = {r["phase"]: r for r in run["rows"]}
    assert list(rows)[:2] == [p[0] for p in efficiency_fit.PHASES[:2]]
    assert rows["total"]["seconds"] == run["total_s"] == 5.0 and rows["total"]["share"] == 1
    assert rows["training: Runner.fit"]["seconds"] == 2.0
    assert rows[efficiency_fit.REST]["seconds"] == pytest.approx(0.25)  # the gaps, the end
    parts = [r["seconds"] for name, r in rows.items()
             if name != "total" and not name.startswith("  of which")]
    assert sum(parts) == pytest.approx(5.0)
    assert run["per_step_overhead_ms"] == pytest.approx(150.0)  # (2 - 0.5) s / 10 steps
    assert run["fixed_s"] == pytest.approx(3.0) and run["bare_loop_s"] == 0.5
    assert run["ratios"] == {"fit:whole run/bare loop": 10.0, "fit:training/bare loop": 4.0}
    assert rows["data: load and check digits"]["bare_steps"] == pytest.approx(10.0)
    assert run["command"].endswith("--threads 1 --out TMP")
    text = efficiency_fit.section(run)
    assert "5.00 s in all" in text and "150.000 ms per step" in text
    assert "| evaluation: predictive, metrics, plots, report |" in text


def test_a_run_that_fails_gives_its_reason(monkeypatch):
    monkeypatch.setattr(efficiency_fit, "CHILD_CODE", "import sys; sys.exit('no data here')")
    run = efficiency_fit.run(3, seed=0, threads=1)
    assert run["status"] == "failed (exit 1): no data here" and run["rows"] == []
    assert run["ratios"] == {} and run["total_s"] is None
    assert efficiency_fit.section(run).endswith(": failed (exit 1): no data here")
    assert efficiency_fit.section(None) == ""


def test_the_child_times_a_real_fit_and_leaves_the_functions_as_they_were(tmp_path, capsys):
    originals = directory.load_dataset, directory.evaluate_result, Runner.fit
    marks = {"started": 0.0, "torch": 0.0}
    argv = ["fit", "--method", "sgld", *efficiency_fit.FIT_ARGS, "--steps", "3", "--seed", "0",
            "--threads", "1", "--out", str(tmp_path / "run")]
    efficiency_fit.child(marks, argv)
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed == marks
    order = ["data_start", "data_end", "training_start", "training_end", "evaluation_start",
             "evaluation_end", "main_end"]
    assert [marks[k] for k in order] == sorted(marks[k] for k in order)
    assert 0 < marks["bare_loop_s"] < marks["training_end"] - marks["training_start"]
    assert (tmp_path / "run" / "metrics.json").is_file()
    assert (directory.load_dataset, directory.evaluate_result, Runner.fit) == originals


@pytest.mark.slow
def test_a_whole_run_as_a_fresh_process(tmp_path):
    run = efficiency_fit.run(5, seed=0, threads=1)
    assert run["status"] == "ok" and run["steps"] == 5 and run["total_s"] > run["fixed_s"] > 0
    assert run["ratios"]["fit:whole run/bare loop"] > 1


def test_the_suite_reports_the_whole_run_with_its_ratios(tmp_path, monkeypatch):
    from bdlkit.bench import efficiency

    calls = []
    monkeypatch.setattr(efficiency_fit, "run", lambda steps, seed, threads: calls.append(
        (steps, seed, threads)) or efficiency_fit.summary(MARKS, steps, ARGV))
    efficiency.run(tmp_path, models=("mlp",), methods=("torch_sgd",), steps=1, repeats=1,
                   warmup=1, memory=False, echo=False, shared_warm_up=False,
                   denormal_rounds=0, fit_steps=10, seed=3)
    assert calls == [(10, 3, 1)]  # the suite's thread count (one_thread)
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["fit"]["total_s"] == 5.0
    assert result["ratios"]["fit:whole run/bare loop"] == 10.0
    assert "## Whole run: `bdlkit fit` on the digits MLP (10 steps" in (
        tmp_path / "results.md").read_text()
