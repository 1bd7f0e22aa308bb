"""``bdlkit compare``: several run folders' metrics in one table, a JSON file and a figure.

The run folders are written here as ``bdlkit fit`` leaves them (``config.yaml`` from a
RunConfig, ``metrics.json`` with the evaluation's keys), so no run is fitted;
``tests/test_cli.py`` compares a fitted one through the command line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bdlkit.bench import l2e_report
from bdlkit.cli import main
from bdlkit.core.errors import InputError
from bdlkit.core.serialization import save_json
from bdlkit.runs import compare
from bdlkit.runs.config import RunConfig
from bdlkit.runs.yaml_files import save_yaml

PNG = b"\x89PNG\r\n\x1a\n"


def write_run(folder: Path, method: str, metrics: dict, data: str = "mnist") -> Path:
    folder.mkdir(parents=True)
    save_yaml(folder / "config.yaml",
              RunConfig(method=method, model="mlp", data=data, steps=10).to_dict())
    save_json(folder / "metrics.json", metrics)
    return folder


def classification(accuracy: float, draws: int, **extra) -> dict:
    return {"accuracy": accuracy, "nll": 0.3, "ece": 0.02, "brier": 0.1, "num_test": 1000,
            "num_draws": draws, "diagnostics": {}, "health": {}, **extra}


@pytest.fixture
def mnist_runs(tmp_path):
    """sghmc (OOD evaluated, one failed check), advi and an ensemble (no OOD)."""
    return [
        write_run(tmp_path / "sghmc", "sghmc", classification(
            0.91, 100, ood_auroc=0.93, ood_aupr=0.9, ood_data="notmnist",
            health={"rhat": "...", "ess": "..."})),
        write_run(tmp_path / "advi", "advi", classification(0.92, 32)),
        write_run(tmp_path / "ensemble", "ensemble", classification(
            0.94, 5, corruptions={"blur": {"1": {"accuracy": 0.5}},
                                  "mean": {"accuracy": 0.7, "nll": 1.0, "ece": 0.1}})),
    ]


def test_rows_say_what_each_run_was_and_how_many_draws_it_averaged(mnist_runs):
    rows = compare.compare(mnist_runs)
    assert [(r["run"], r["method"], r["data"], r["model"]) for r in rows] == [
        (str(p), m, "mnist", "mlp") for p, m in zip(mnist_runs, ("sghmc", "advi", "ensemble"))]
    assert [r["draws"] for r in rows] == [100, 32, 5]
    assert [r["accuracy"] for r in rows] == [0.91, 0.92, 0.94]
    assert [r["ood_auroc"] for r in rows] == [0.93, None, None]
    assert [r["corr_accuracy"] for r in rows] == [None, None, 0.7]
    assert [r["health"] for r in rows] == ["failed: ess, rhat", "ok", "ok"]


def test_the_table_has_the_bench_columns_and_a_dash_for_a_missing_metric(mnist_runs):
    text = compare.markdown(compare.compare(mnist_runs))
    lines = text.splitlines()
    header = [h.strip() for h in lines[0].strip("|").split("|")]
    for column in ("run", "method", "data", "draws", "accuracy", "NLL", "ECE", "OOD AUROC",
                   "corr. acc.", "health"):
        assert column in header
    assert "RMSE" not in header  # no regression run: no regression column
    cells = {r.split("|")[1].strip(): [c.strip() for c in r.strip("|").split("|")]
             for r in lines[2:5]}
    advi = dict(zip(header, cells[str(mnist_runs[1])]))
    assert advi["method"] == "advi" and advi["draws"] == "32" and advi["accuracy"] == "0.9200"
    assert advi["OOD AUROC"] == compare.DASH and advi["corr. acc."] == compare.DASH
    assert dict(zip(header, cells[str(mnist_runs[0])]))["OOD AUROC"] == "0.9300"
    assert len({len(line) for line in lines[:5]}) == 1  # aligned: every line as wide
    assert "--num-draws" in text  # the draws differ: the note says how to equalise them


def test_headers_are_those_of_the_bench_tables():
    bench = {key: header for key, header, _ in l2e_report.SUMMARY}
    ours = {c.key: c.header for c in (*compare.IDENTITY, *compare.METRICS)}
    shared = set(bench) & set(ours)
    assert {"method", "accuracy", "nll", "ece", "ood_auroc"} <= shared
    assert {k: ours[k] for k in shared} == {k: bench[k] for k in shared}
    assert ours["draws"] == next(h for k, h, _ in l2e_report.HEAD if k == "draws")


def test_a_classification_run_without_ood_still_shows_the_column(tmp_path):
    runs = [write_run(tmp_path / m, m, classification(0.9, 10)) for m in ("map", "sgld")]
    text = compare.markdown(compare.compare(runs))
    assert "OOD AUROC" in text.splitlines()[0]
    assert "RMSE" not in text
    assert text == compare.table(compare.compare(runs))  # measured alike: no notes


def test_regression_runs_show_their_metrics(tmp_path):
    regression = {"rmse": 0.5, "mae": 0.4, "nll": 1.1, "coverage_90": 0.88, "num_test": 50,
                  "num_draws": 32}
    runs = [write_run(tmp_path / "r", "advi", regression, data="yacht"),
            write_run(tmp_path / "c", "map", classification(0.9, 1), data="digits")]
    rows = compare.compare(runs)
    assert [r["task"] for r in rows] == ["regression", "classification"]
    text = compare.markdown(rows)
    assert {"RMSE", "90 % coverage", "accuracy"} <= set(
        h.strip() for h in text.splitlines()[0].split("|"))
    assert "different data sets" in text


def test_a_chain_groups_run_gives_a_row_per_chain(tmp_path):
    out = tmp_path / "chains"
    for g in (1, 0, 10):
        write_run(out / f"chain-{g}", "sghmc", classification(0.9 + g / 100, 20))
    save_json(out / "chains.json", {"chains": 3})
    rows = compare.compare([out])
    assert [r["run"] for r in rows] == [str(out / f"chain-{g}") for g in (0, 1, 10)]


def test_folders_that_are_not_finished_runs_are_refused_with_the_fix(tmp_path, mnist_runs):
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "empty").mkdir()
    bench = tmp_path / "bench"  # a bench suite's output: its runs are in runs/
    write_run(bench / "runs" / "map", "map", classification(0.9, 1))
    unfinished = mnist_runs[1]
    (unfinished / "metrics.json").unlink()
    (mnist_runs[2] / "metrics.json").write_text("[0.9]")
    cases = [(tmp_path / "nope", "no such folder"), (tmp_path / "notes.txt", "is a file"),
             (tmp_path / "empty", "not a bdlkit run folder (no config.yaml)"),
             (bench, f"not a run but holds run folders: compare them, e.g. `bdlkit compare "
                     f"{bench / 'runs'}/*`"),
             (mnist_runs[0].parent, f"`bdlkit compare {mnist_runs[0].parent}/*`"),
             (unfinished, f"no metrics.json: the run has not finished (`bdlkit fit --resume "
                          f"{unfinished}`)"),
             (mnist_runs[2], f"does not hold a mapping of metrics; `bdlkit evaluate "
                             f"{mnist_runs[2]}` writes it again")]
    for path, message in cases:
        with pytest.raises(InputError, match=re.escape(message)):
            compare.compare([mnist_runs[0], path])
    with pytest.raises(InputError, match="at least one run folder"):
        compare.compare([])


def test_write_gives_json_markdown_and_a_figure(tmp_path, mnist_runs):
    rows = compare.compare(mnist_runs)
    written = compare.write(rows, tmp_path / "cmp")
    assert [p.name for p in written][:2] == ["comparison.json", "comparison.md"]
    stored = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    assert stored["rows"] == json.loads(json.dumps(rows))
    assert stored["columns"]["ood_auroc"] == "OOD AUROC"
    assert compare.table(rows) in (tmp_path / "cmp" / "comparison.md").read_text()
    if len(written) == 3:  # matplotlib installed
        assert written[2].read_bytes().startswith(PNG)
    with pytest.raises(InputError, match="is a file"):
        compare.write(rows, tmp_path / "cmp" / "comparison.md")


def test_cli_prints_the_table_and_writes_with_out(tmp_path, mnist_runs, capsys):
    assert main(["compare", *map(str, mnist_runs), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "OOD AUROC" in out.splitlines()[0]
    assert str(mnist_runs[2]) in out and "comparison.json" in out
    assert (tmp_path / "o" / "comparison.md").is_file()
    assert main(["compare", str(mnist_runs[0]), str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "bdlkit: error:" in err and "no such folder" in err and "Traceback" not in err
