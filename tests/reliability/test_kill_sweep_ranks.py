"""Kill sweep, data parallel (issue 45, item 7): ``torchrun --nproc-per-node 2 -m bdlkit fit``
with one rank SIGKILLed at a random step, or SIGTERMed.

Every surviving rank's stderr (torchrun ``--redirects``: one file per rank) holds exactly one
``bdlkit:`` line, no traceback and no "internal error": the lost rank, the last checkpoint
and the torchrun resume command. That very command then continues the run, which ends
byte-identical to an uninterrupted torchrun run of the same command (:mod:`kill_sweep`'s
comparisons). A SIGTERM to one rank stops both after a common checkpoint, and each names
it (the replica too: it used to say "no run_dir: nothing saved").

Each case is three torchrun launches of two ranks on the CPU (gloo), about 10 s each on
two cores: slow. The fast checks of the same messages are ``tests/distributed/
test_peer_lost.py`` and ``tests/test_cli_stops.py``.
"""

from __future__ import annotations

import os
import random
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from kill_sweep import EVERY, KILLER, Method, assert_same_fit, baseline, between_checkpoints

#: sgld, 60 steps of 2 ranks x 64 rows, checkpoints every 10, 20 draws kept
SGLD = Method("sgld", "bdlkit.algorithms.sgmcmc.sgld", "SGLD", 60,
              ("--burnin", "20", "--thin", "2"), burnin=20)
#: the kill sweep's KILLER on the rank SWEEP_RANK only (the others run the plain command)
RANK_KILLER = ("import os\nif os.environ.get('RANK') != os.environ.get('SWEEP_RANK'):\n"
               "    os.environ['SWEEP_MODE'] = 'none'\n" + KILLER)
RESUME = re.compile(r"resume with: (torchrun .*)$", re.M)


def torchrun(args: list[str], cwd: Path, **how: str | int) -> subprocess.CompletedProcess:
    """``torchrun *args`` (as after ``torchrun`` on a command line) in folder ``cwd``, each
    rank's output in ``cwd/logs``; ``how``: the ``SWEEP_*`` variables of the killer."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
           **{f"SWEEP_{k.upper()}": str(v) for k, v in how.items()}}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--log-dir", str(cwd / "logs"), "--redirects", "3", *args],
                          cwd=cwd, env=env, text=True, capture_output=True, timeout=300,
                          check=False)


def killed_rank(fit: list[str], cwd: Path, **how: str | int) -> subprocess.CompletedProcess:
    """``torchrun --nproc-per-node 2 -m bdlkit *fit`` whose rank ``how["rank"]`` stops itself
    (:data:`RANK_KILLER`)."""
    (cwd / "killer.py").write_text(RANK_KILLER)
    return torchrun(["--nproc-per-node", "2", str(cwd / "killer.py"), *fit], cwd,
                    mode="step", module=SGLD.module, name=SGLD.cls, **how)


def rank_stderr(cwd: Path, rank: int) -> str:
    (found,) = (cwd / "logs").glob(f"*/attempt_0/{rank}/stderr.log")
    return found.read_text()


def explain(done: subprocess.CompletedProcess, cwd: Path) -> str:
    ranks = "".join(f"\n--- rank {r} stderr\n{rank_stderr(cwd, r)[-3000:]}" for r in (0, 1))
    return f"exit {done.returncode}\n$ {shlex.join(done.args)}\n{done.stderr[-3000:]}{ranks}"


def resume_with_the_printed_command(line: str, run: Path, cwd: Path) -> None:
    command = RESUME.search(line).group(1)
    assert command == f"torchrun --nproc-per-node 2 -m bdlkit fit --resume {run}"
    again = torchrun(shlex.split(command)[1:], cwd)
    assert again.returncode == 0, explain(again, cwd)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    def build(folder: Path) -> None:
        done = torchrun(["--nproc-per-node", "2", "-m", "bdlkit", *SGLD.fit(folder / "run")],
                        folder)
        assert done.returncode == 0, explain(done, folder)

    return baseline(tmp_path_factory, "sgld-torchrun-2", build) / "run"


@pytest.mark.slow
@pytest.mark.parametrize("killed", [1, 0])
def test_a_torchrun_rank_killed_is_one_line_with_the_torchrun_resume_command(
        uninterrupted, tmp_path, killed):
    kill_at = between_checkpoints(random.Random(f"issue-45/rank-{killed}"), SGLD.steps)
    run, survivor = tmp_path / "run", 1 - killed
    done = killed_rank(SGLD.fit(run), tmp_path, signal="SIGKILL", at=kill_at, rank=killed)
    assert done.returncode != 0, explain(done, tmp_path)
    err = rank_stderr(tmp_path, survivor)
    lines = [line for line in err.splitlines() if line.startswith("bdlkit")]
    assert len(lines) == 1, explain(done, tmp_path)
    assert "Traceback" not in err and "internal error" not in err, err
    assert lines[0].startswith(f"bdlkit: stopped: rank {killed} of this run was lost")
    newest = run / "checkpoints" / f"step-{kill_at // EVERY * EVERY:09d}.safetensors"
    assert f"last checkpoint {newest};" in lines[0]
    resume_with_the_printed_command(lines[0], run, tmp_path)
    assert_same_fit(run, uninterrupted, draws=SGLD.draws)


@pytest.mark.slow
def test_sigterm_to_one_rank_stops_both_naming_the_checkpoint(uninterrupted, tmp_path):
    at = between_checkpoints(random.Random("issue-45/sigterm"), SGLD.steps)
    run = tmp_path / "run"
    done = killed_rank(SGLD.fit(run), tmp_path, signal="SIGTERM", at=at, rank=1)
    assert done.returncode != 0, explain(done, tmp_path)
    checkpoint = run / "checkpoints" / f"step-{at + 1:09d}.safetensors"
    for rank in (0, 1):  # the writer, and its replica that received the SIGTERM
        err = rank_stderr(tmp_path, rank)
        assert f"interrupted by SIGTERM after step {at + 1}; checkpoint {checkpoint}" in err, (
            explain(done, tmp_path))
        assert "no run_dir" not in err and "Traceback" not in err
    resume_with_the_printed_command(rank_stderr(tmp_path, 1), run, tmp_path)
    assert_same_fit(run, uninterrupted, draws=SGLD.draws)
