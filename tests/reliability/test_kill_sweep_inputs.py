"""Kill -9 sweep, the inputs the run record pins (issue 45 acceptance, items 2 and 9).

A ``bdlkit fit`` run SIGKILLed at a random step is resumed with an input changed: at
another thread count (``--threads``), or after one value of its data file changed. Each
resume is refused with one line naming what differs and the fix, and writes nothing; the
resume the fix describes then ends byte-identical to the uninterrupted run
(:mod:`kill_sweep`). The steps are drawn by ``random.Random`` with fixed seeds.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from kill_sweep import (
    DRAWS,
    KILLED,
    METHODS,
    Method,
    assert_same_fit,
    baseline,
    bdlkit,
    between_checkpoints,
    explain,
    files,
    fit_baseline,
    resume,
)

from bdlkit.core.lock import LOCK_NAME

SGLD = METHODS["sgld"]


def _rng(case: str) -> random.Random:
    return random.Random(f"issue-45/{case}")


def _killed(method: Method, run: Path, case: str) -> None:
    """``method``'s run into ``run``, SIGKILLed at a random step between checkpoints."""
    kill_at = between_checkpoints(_rng(case), method.steps)
    killed = bdlkit(*method.fit(run), mode="step", module=method.module, name=method.cls,
                    signal="SIGKILL", at=kill_at)
    assert killed.returncode == KILLED, explain(killed)


def _run_files(run: Path) -> dict[str, bytes]:
    """The run's files but the lock's (a killed holder's is taken over and cleared)."""
    return {k: v for k, v in files(run).items() if not k.startswith(LOCK_NAME)}


def _refused(run: Path, *argv: str) -> str:
    """``bdlkit *argv`` on the killed ``run``: exit 2, one line, nothing written."""
    before = _run_files(run)
    refused = bdlkit(*argv)
    assert refused.returncode == 2, explain(refused)
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bdlkit: error: "), explain(refused)
    assert _run_files(run) == before, "the refused command changed the run folder"
    return lines[0]


@pytest.mark.slow
def test_resume_at_another_thread_count_is_refused_with_the_fix(tmp_path_factory, tmp_path):
    """Killed at 1 thread (the sweep's OMP_NUM_THREADS=1) and resumed at 2, a run used to
    match neither uninterrupted run; now the resume is refused, and a resume without
    --threads runs at the recorded count and ends as the uninterrupted run."""
    ref = fit_baseline(tmp_path_factory, SGLD)
    run = tmp_path / "run"
    _killed(SGLD, run, "sgld/threads")
    line = _refused(run, "fit", "--resume", str(run), "--threads", "2", "--no-progress")
    assert "--threads 2, but the run's checkpoints were written with threads: 1" in line
    assert "resume without --threads" in line
    assert f"bdlkit fit --resume {run} --threads 2 --accept threads (" in line
    resume(run)
    assert_same_fit(run, ref, draws=SGLD.draws)


def _save_data(path: Path, shift: float = 0.0) -> None:
    """300 rows of 8 features in 3 classes; ``shift`` added to one value."""
    rng = np.random.default_rng(45)
    x = rng.normal(size=(300, 8)).astype(np.float32)
    y = (x[:, :3].argmax(axis=1)).astype(np.int64)
    x[7, 2] += shift
    np.savez(path, x=x, y=y)


@pytest.mark.slow
def test_a_changed_data_file_is_refused(tmp_path_factory, tmp_path):
    """A run killed on a user .npz whose file then changed in one value used to resume
    with exit 0 and other shards and metrics; now resume and evaluate are refused naming
    the file and the recorded digest, and with the file restored the resume ends as the
    uninterrupted run."""
    def method(data: Path) -> Method:
        return Method("sgld", SGLD.module, SGLD.cls, 120, ("--data", str(data), *DRAWS),
                      burnin=40)

    def build(folder: Path) -> None:
        _save_data(folder / "data.npz")
        done = bdlkit(*method(folder / "data.npz").fit(folder / "run"))
        assert done.returncode == 0, explain(done)

    ref = baseline(tmp_path_factory, "sgld-npz", build) / "run"
    data, run = tmp_path / "data.npz", tmp_path / "run"
    _save_data(data)
    original = data.read_bytes()
    _killed(method(data), run, "sgld/data")
    _save_data(data, shift=0.5)
    for argv in (("fit", "--resume", str(run), "--no-progress"), ("evaluate", str(run))):
        line = _refused(run, *argv)
        assert f"data file {data} has changed" in line, line
        recorded = (run / "config.yaml").read_text().split("data_sha256: ")[1].split()[0]
        assert f"the run recorded {recorded}" in line and "restore the file" in line, line
    data.write_bytes(original)
    resume(run)
    assert_same_fit(run, ref, draws=True)
