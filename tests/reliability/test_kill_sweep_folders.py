"""Kill sweep, run folders (issue 45 acceptance: a nested run folder is refused).

A ``bdlkit fit`` writing ``C/chain-0`` (a chain of a chain-groups run's folder ``C``, the
one place a run folder may sit inside another) is stopped by SIGSTOP in the middle of its
steps, holding its lock. Meanwhile, in processes of their own, a run inside it is refused
and an ``--overwrite`` of ``C`` is refused naming the writer, and nothing of the stopped
run is touched. The writer is then killed (kill -9: the kernel drops its lock), and
``--resume`` ends as the uninterrupted run (:mod:`kill_sweep`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from kill_sweep import KILLER, METHODS, assert_same_fit, bdlkit, explain, fit_baseline, resume

from bdlkit.runs import out_folder

SGLD = METHODS["sgld"]
STOP_AT = 15  # between the checkpoints at steps 10 and 20


def _stopped_writer(argv: list[str]) -> subprocess.Popen:
    """``bdlkit *argv`` stopped (SIGSTOP) when SGLD's step ``STOP_AT`` begins."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SWEEP_MODE": "step",
           "SWEEP_MODULE": SGLD.module, "SWEEP_NAME": SGLD.cls, "SWEEP_SIGNAL": "SIGSTOP",
           "SWEEP_AT": str(STOP_AT)}
    proc = subprocess.Popen([sys.executable, "-W", "ignore", "-c", KILLER, *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        proc.returncode = os.waitstatus_to_exitcode(status)
        pytest.fail(f"the writer ended (exit {proc.returncode}) before step {STOP_AT}:\n"
                    f"{proc.stderr.read()[-3000:]}")
    return proc


@pytest.mark.slow
def test_a_run_inside_a_run_being_written_and_an_overwrite_of_its_parent_are_refused(
        tmp_path_factory, tmp_path):
    ref = fit_baseline(tmp_path_factory, SGLD)
    folder = out_folder.prepare_out(tmp_path / "C", False)  # a chain-groups run's OUT
    chain = folder / "chain-0"
    writer = _stopped_writer(SGLD.fit(chain))
    try:
        before = sorted(p.relative_to(chain) for p in chain.rglob("*"))
        inner = chain / "checkpoints" / "inner"
        nested = bdlkit(*SGLD.fit(inner))
        assert nested.returncode == 2, explain(nested)
        assert f"is inside the run folder {chain.resolve()}" in nested.stderr, explain(nested)
        assert not inner.exists()
        overwrite = bdlkit(*SGLD.fit(folder), "--overwrite")
        assert overwrite.returncode == 2, explain(overwrite)
        assert (f"{chain} is being written by another process (PID {writer.pid}"
                in overwrite.stderr), explain(overwrite)
        assert sorted(p.relative_to(chain) for p in chain.rglob("*")) == before
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    resume(chain)  # the dead writer's lock is taken over
    assert_same_fit(chain, ref, draws=SGLD.draws)
