"""The whole-run section of ``bench efficiency``: where a ``bdlkit fit`` user's time goes.

One ``bdlkit fit --method sgld --model mlp --data digits --steps N`` (:data:`FIT_ARGS`,
batch 128, the MLP 64-100-10 of the ``runner`` suite) runs as a fresh Python process
through the command's own entry point (``python -m bdlkit``'s, run by :mod:`runpy`: a
benchmark sits below the command line and does not import it), at the suite's thread count, into a temporary folder. The process
records the wall-clock time at the boundaries of the run's phases by wrapping, without
changing them, the functions the command calls (:func:`child`):

* start-up: the interpreter and ``import torch`` (the floor of any command that trains),
  then bdlkit's imports and the command line, up to the data;
* data: :func:`bdlkit.runs.directory.load_dataset` (load, digest, checks);
* set-up: the model, the method, the run folder and ``config.yaml``;
* training: :meth:`bdlkit.Runner.fit` (the steps, ``log.jsonl``, the draws, checkpoints);
* evaluation: :func:`bdlkit.runs.directory.evaluate_result` (BMA predictive, metrics,
  diagnostics, plots, ``report.md``);
* the rest: the time between these phases and the command's closing lines.

Then, in the same process, warm, the same algorithm takes the same number of steps on the
same minibatches in a bare loop (:func:`.runner_overhead.bare_loop`): ``total / bare`` is
what the whole command costs over the steps alone, ``(training - bare) / N`` the runner's
cost per step, and the phases outside training are the fixed cost of a run.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: the method and the command line of the timed run (``--steps``, ``--seed``,
#: ``--threads`` and ``--out`` are added)
FIT_METHOD = "sgld"
FIT_ARGS = ("--model", "mlp", "--data", "digits", "--batch-size", "128", "--no-progress")
#: steps of the run: quick and full
FIT_STEPS = {True: 300, False: 1000}
#: the child process: its first lines record the spawn-side marks before any import
CHILD_CODE = ("import sys, time; marks = {'started': time.time()}; import torch; "
              "marks['torch'] = time.time(); "
              "from bdlkit.bench.efficiency_fit import child; child(marks, sys.argv[1:])")
#: (phase, from mark, to mark), in the order of the run
PHASES = (
    ("start-up: interpreter and import torch", "spawn", "torch"),
    ("start-up: bdlkit's imports and the command line", "torch", "data_start"),
    ("data: load and check digits", "data_start", "data_end"),
    ("set-up: model, method, run folder", "data_end", "training_start"),
    ("training: Runner.fit", "training_start", "training_end"),
    ("evaluation: predictive, metrics, plots, report", "evaluation_start", "evaluation_end"),
)
#: the time outside :data:`PHASES` up to the command's return
REST = "the rest: between the phases, closing lines"


def run(steps: int, seed: int, threads: int, timeout_s: float = 900.0) -> dict[str, Any]:
    """Time one ``bdlkit fit`` of ``steps`` steps in a fresh process (module docstring):
    ``{"rows", "steps", "total_s", "bare_loop_s", "per_step_overhead_ms", "fixed_s",
    "ratios", "status", "command"}``; a run that fails gives its reason in ``status``."""
    import bdlkit

    with tempfile.TemporaryDirectory() as tmp:
        argv = ["fit", "--method", FIT_METHOD, *FIT_ARGS, "--steps", str(steps),
                "--seed", str(seed), "--threads", str(threads), "--out", str(Path(tmp) / "run")]
        env = dict(os.environ)
        src = str(Path(bdlkit.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        spawn = time.time()
        try:
            proc = subprocess.run([sys.executable, "-c", CHILD_CODE, *argv], check=False,
                                  env=env, capture_output=True, text=True, timeout=timeout_s,
                                  cwd=tmp)
        except subprocess.TimeoutExpired:
            return _failed(argv, f"timed out after {timeout_s:.0f} s")
    lines = proc.stdout.strip().splitlines()
    try:
        marks = json.loads(lines[-1]) if proc.returncode == 0 and lines else None
    except json.JSONDecodeError:
        marks = None
    if marks is None:
        tail = " ".join(proc.stderr.strip().splitlines()[-1:])[:200]
        return _failed(argv, f"failed (exit {proc.returncode}): {tail}")
    return summary({**marks, "spawn": spawn}, steps, argv)


def summary(marks: dict[str, float], steps: int, argv: list[str]) -> dict[str, Any]:
    """The phases' rows and the whole-run figures from the marks of one run."""
    total = marks["main_end"] - marks["spawn"]
    bare = marks["bare_loop_s"]
    rows = [{"phase": name, "seconds": marks[b] - marks[a]} for name, a, b in PHASES]
    rows.append({"phase": REST, "seconds": total - sum(r["seconds"] for r in rows)})
    training = marks["training_end"] - marks["training_start"]
    rows.insert(5, {"phase": "  of which the bare step loop (same steps, warm)",
                    "seconds": bare})
    rows.append({"phase": "total", "seconds": total})
    for row in rows:
        row["share"] = row["seconds"] / total
        row["bare_steps"] = row["seconds"] / (bare / steps)  # the phase in bare steps
    return {"rows": rows, "steps": steps, "status": "ok", "command": _command(argv),
            "total_s": total, "bare_loop_s": bare, "fixed_s": total - training,
            "per_step_overhead_ms": 1e3 * (training - bare) / steps,
            "ratios": {"fit:whole run/bare loop": total / bare,
                       "fit:training/bare loop": training / bare}}


def section(whole_run: dict[str, Any] | None) -> str:
    """The whole-run section of results.md ("" when it did not run)."""
    from bdlkit.runs import figures as report

    if not whole_run:
        return ""
    head = (f"\n## Whole run: `bdlkit fit` on the digits MLP ({whole_run['steps']} steps, "
            "one fresh process)\n\n`" + whole_run["command"] + "`")
    if whole_run["status"] != "ok":
        return f"{head}: {whole_run['status']}"
    return "\n".join([
        f"{head}: {whole_run['total_s']:.2f} s in all, against "
        f"{whole_run['bare_loop_s']:.3f} s for the same steps of a bare loop "
        f"(`fit:whole run/bare loop`); the runner adds "
        f"{whole_run['per_step_overhead_ms']:.3f} ms per step (log, draws, checkpoints) and "
        f"the run {whole_run['fixed_s']:.2f} s outside training (start-up, data, set-up, "
        "evaluation).\n",
        report.markdown_table(whole_run["rows"], floatfmt=".4g"),
        "\n`share`: of the whole run's wall time; `bare_steps`: the phase's time in steps of "
        "the bare loop. Each phase is timed in the process, around the function the command "
        "calls for it (module `bdlkit.bench.efficiency_fit`)."])


def child(marks: dict[str, float], argv: list[str]) -> None:
    """Child-process entry: run ``bdlkit`` with ``argv`` through its entry point, the
    phases' functions wrapped to record when they start and end, then the bare loop of
    the run's own algorithm and minibatches; print the marks as one JSON line."""
    import torch

    from bdlkit.bench.runner_overhead import bare_loop
    from bdlkit.engine.runner import Runner
    from bdlkit.runs import directory

    runners: list[Runner] = []
    fit = Runner.fit

    def fit_and_keep(self: Runner, *args: Any, **kwargs: Any) -> Any:
        runners.append(self)
        return fit(self, *args, **kwargs)

    originals = directory.load_dataset, directory.evaluate_result, fit
    directory.load_dataset = _marked(marks, "data", directory.load_dataset)
    directory.evaluate_result = _marked(marks, "evaluation", directory.evaluate_result)
    Runner.fit = _marked(marks, "training", fit_and_keep)  # type: ignore[method-assign]
    try:
        code = _entry_point(argv)
        marks["main_end"] = time.time()
    finally:  # the functions as they were (the process goes on with the bare loop)
        directory.load_dataset, directory.evaluate_result, Runner.fit = originals
    if code != 0 or not runners:
        raise SystemExit(f"bdlkit {' '.join(argv)} exited with {code}")
    runner = runners[0]
    torch.set_num_threads(int(argv[argv.index("--threads") + 1]))  # fit restored its own
    start = time.perf_counter()
    bare_loop(runner.algorithm, runner.batches, runner.total, runner.seed)
    marks["bare_loop_s"] = time.perf_counter() - start
    print(json.dumps(marks), flush=True)


def _marked(marks: dict[str, float], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, recording ``name_start`` and ``name_end`` (wall clock) around its call."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        marks[f"{name}_start"] = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            marks[f"{name}_end"] = time.time()

    return wrapper


def _entry_point(argv: list[str]) -> Any:
    """``python -m bdlkit ARGV`` in this process (:mod:`runpy`); its exit code."""
    saved = sys.argv
    sys.argv = ["bdlkit", *argv]
    try:
        runpy.run_module("bdlkit", run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        return 0 if stop.code is None else stop.code
    finally:
        sys.argv = saved
    return 0


def _command(argv: list[str]) -> str:
    shown = argv[:argv.index("--out")]
    return "bdlkit " + " ".join(shown) + " --out TMP"


def _failed(argv: list[str], why: str) -> dict[str, Any]:
    return {"rows": [], "steps": None, "status": why, "command": _command(argv),
            "total_s": None, "bare_loop_s": None, "fixed_s": None,
            "per_step_overhead_ms": None, "ratios": {}}


__all__ = ["FIT_ARGS", "FIT_METHOD", "FIT_STEPS", "PHASES", "child", "run", "section",
           "summary"]
