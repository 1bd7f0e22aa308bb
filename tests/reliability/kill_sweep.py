"""Helpers of the kill -9 sweep (``test_kill_sweep*.py``; issue 19 acceptance).

A ``bdlkit`` command runs in a subprocess (:data:`KILLER`) that stops itself in one of
three ways, chosen by environment variables:

* ``step``: send a signal (SIGKILL or SIGINT) from a method's ``step`` when
  ``state.step`` equals a step number, as :mod:`cli_helpers` does for SIGKILL;
* ``write``: SIGKILL inside :func:`bdlkit.core.serialization.atomic_write_bytes`, after the
  temporary file is written and fsynced, before it is renamed over its target, on the
  n-th write of a file whose name matches a pattern (a checkpoint);
* ``call``: SIGKILL on entry to the n-th call of a module-level function (1-based; for
  ``bdlkit meta-train``, whose outer steps have no state object with a ``.step``).

The interrupted run is then resumed and compared with an uninterrupted run of the same
command (:func:`assert_same_fit`, :func:`assert_same_meta_train`). Uninterrupted runs are
built once per test session and shared by the pytest-xdist workers (:func:`baseline`).
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from filelock import FileLock

from bdlkit.core.serialization import load_tensors_with_metadata
from bdlkit.engine.checkpoint import latest_checkpoint, load_checkpoint
from bdlkit.engine.runlog import read_log

KILLER = r"""
import importlib, os, re, signal, sys
mode = os.environ["SWEEP_MODE"]
at = int(os.environ.get("SWEEP_AT", "-1"))
if mode == "step":
    cls = getattr(importlib.import_module(os.environ["SWEEP_MODULE"]), os.environ["SWEEP_NAME"])
    sig = signal.Signals[os.environ["SWEEP_SIGNAL"]]
    inner = cls.step
    def step(self, state, batch):
        if state.step == at:
            os.kill(os.getpid(), sig)
        return inner(self, state, batch)
    cls.step = step
elif mode == "write":
    import bdlkit.core.serialization as serialization
    target, seen = re.compile(os.environ["SWEEP_TARGET"]), [0]
    def replace(src, dst, *args, **kwargs):
        if target.fullmatch(os.path.basename(os.fspath(dst))):
            seen[0] += 1
            if seen[0] == at:
                os.kill(os.getpid(), signal.SIGKILL)
        return os.replace(src, dst, *args, **kwargs)
    class Os:  # the os module as bdlkit.core.serialization sees it, with replace patched
        def __getattr__(self, name):
            return getattr(os, name)
    Os.replace = staticmethod(replace)
    serialization.os = Os()
elif mode == "call":
    module = importlib.import_module(os.environ["SWEEP_MODULE"])
    name, calls = os.environ["SWEEP_NAME"], [0]
    inner = getattr(module, name)
    def call(*args, **kwargs):
        calls[0] += 1
        if calls[0] == at:
            os.kill(os.getpid(), signal.SIGKILL)
        return inner(*args, **kwargs)
    setattr(module, name, call)
elif mode != "none":
    raise SystemExit(f"unknown SWEEP_MODE {mode!r}")
from bdlkit.cli import main
sys.exit(main(sys.argv[1:]))
"""

#: the SIGKILLed process's return code as subprocess reports it
KILLED = -signal.SIGKILL
#: atomic_write_bytes' temporary file of a checkpoint (``.step-<t>.safetensors.<8>.tmp``)
STALE_CHECKPOINT = re.compile(r"^\.step-\d+\.safetensors\.[a-z0-9_]{8}\.tmp$")


def bdlkit(*argv: str, mode: str = "none", cwd: Path | None = None, timeout: float = 300,
           **how: str | int) -> subprocess.CompletedProcess:
    """``bdlkit *argv`` in a subprocess under :data:`KILLER`, in folder ``cwd`` (``how``:
    module, name, signal, at, target: the ``SWEEP_*`` variables of ``mode``)."""
    # one intra-op thread, as tests/algorithms/vi/test_flow_network.py: once, under the full
    # suite's load at 2 threads, a resumed run's mutual_information differed from the
    # uninterrupted run's by 2.5e-15 (every other metric equal); not reproduced alone
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SWEEP_MODE": mode,
           **{f"SWEEP_{k.upper()}": str(v) for k, v in how.items()}}
    return subprocess.run([sys.executable, "-W", "ignore", "-c", KILLER, *argv], env=env,
                          check=False, capture_output=True, text=True, timeout=timeout, cwd=cwd)


def checkpoint_name(step: int) -> str:
    """The pattern of checkpoint ``step``'s file name (``step-<9 digits>.safetensors``)."""
    return rf"step-{step:09d}\.safetensors"


def explain(proc: subprocess.CompletedProcess) -> str:
    return (f"exit {proc.returncode}\n$ bdlkit {shlex.join(proc.args[5:])}\n--- stdout\n"
            f"{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-6000:]}")


def baseline(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``build(folder)`` fills, built once per test session: a pytest-xdist
    worker that finds another building it waits for it and reuses it."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the workers of one session
    folder = root / "kill-sweep-baselines" / name
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{folder}.lock"):
        if not (folder / ".complete").exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed earlier
            folder.mkdir()
            build(folder)
            (folder / ".complete").touch()
    return folder


# ------------------------------------------------------------------ comparisons
def log_lines(run: Path) -> list[dict]:
    """``log.jsonl``'s entries without their ``time_s`` (their digests, which cover it,
    checked and left out by :func:`read_log`)."""
    lines = read_log(run / "log.jsonl")
    for line in lines:
        line.pop("time_s", None)
    return lines


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def final_state(run: Path) -> tuple[int, dict[str, torch.Tensor]]:
    ckpt = load_checkpoint(latest_checkpoint(run / "checkpoints"))
    return ckpt.step, ckpt.state


def assert_equal_tensors(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor],
                         what: str) -> None:
    assert sorted(got) == sorted(want), f"{what}: other tensors"
    differ = [k for k in want if not (got[k].dtype == want[k].dtype and got[k].shape ==
                                      want[k].shape and torch.equal(got[k], want[k]))]
    assert not differ, f"{what}: tensors differ from the uninterrupted run's: {differ}"


def assert_same_lists(got: Sequence, want: Sequence, what: str) -> None:
    for i, (a, b) in enumerate(zip(got, want, strict=False)):
        assert a == b, f"{what}: entry {i} differs:\n  resumed:       {a}\n  uninterrupted: {b}"
    assert len(got) == len(want), f"{what}: {len(got)} entries, not {len(want)}"


def assert_same_fit(run: Path, ref: Path, *, draws: bool) -> None:
    """``run`` (interrupted, then resumed) ends as the uninterrupted ``ref``: the same
    metrics.json bytes, log.jsonl entries but for time_s, final checkpoint state tensors
    and, for a sampler (``draws``), the same files under samples/."""
    assert (run / "metrics.json").read_bytes() == (ref / "metrics.json").read_bytes(), (
        f"metrics.json differs:\n  resumed:       {(run / 'metrics.json').read_text()[:600]}"
        f"\n  uninterrupted: {(ref / 'metrics.json').read_text()[:600]}")
    assert_same_lists(log_lines(run), log_lines(ref), "log.jsonl")
    (step, state), (ref_step, ref_state) = final_state(run), final_state(ref)
    assert step == ref_step
    assert_equal_tensors(state, ref_state, f"final checkpoint (step {step}) state")
    if draws:
        got, want = files(run / "samples"), files(ref / "samples")
        assert sorted(got) == sorted(want), f"samples/ holds {sorted(got)}, not {sorted(want)}"
        differ = [name for name in want if got[name] != want[name]]
        assert not differ, f"samples/ files differ from the uninterrupted run's: {differ}"


def assert_same_meta_train(run: Path, ref: Path) -> None:
    """A resumed ``bdlkit meta-train`` folder ends as the uninterrupted one: the same
    checkpoint and meta-parameters (tensors and metadata), config.json and history.json but
    for each step's ``seconds``."""
    for name in ("checkpoint.safetensors", "meta_params.safetensors"):
        (got, got_meta), (want, want_meta) = (load_tensors_with_metadata(r / name)
                                              for r in (run, ref))
        assert_equal_tensors(got, want, name)
        assert got_meta == want_meta, f"{name}: metadata {got_meta} != {want_meta}"
    assert (run / "config.json").read_bytes() == (ref / "config.json").read_bytes()

    def history(folder: Path) -> list[dict]:
        steps = json.loads((folder / "history.json").read_text())
        return [{k: v for k, v in h.items() if k != "seconds"} for h in steps]

    assert_same_lists(history(run), history(ref), "history.json")


# ------------------------------------------------------------------ the runs
EVERY = 10  # --checkpoint-every of every fit run
COMMON = ("--model", "mlp", "--data", "digits", "--model-kwargs", '{"hidden": [8]}',
          "--batch-size", "64", "--seed", "0", "--no-progress",
          "--checkpoint-every", str(EVERY), "--log-every", "5")
#: sampler draws: 220 kept before the cap of 150 (the oldest 70 dropped, a whole shard among
#: them), so the run ends with shards 1-3 of at most 64 draws each
DRAWS = ("--burnin", "40", "--thin", "2", "--max-samples", "150")


@dataclass(frozen=True)
class Method:
    """One ``bdlkit fit`` command of the sweep and the class whose ``step`` is patched."""

    name: str
    module: str
    cls: str
    steps: int
    options: tuple[str, ...] = ()
    burnin: int | None = None  # a sampler's: draws are kept after it

    @property
    def draws(self) -> bool:
        return self.burnin is not None

    def fit(self, out: Path) -> list[str]:
        return ["fit", "--method", self.name, *COMMON, "--steps", str(self.steps),
                *self.options, "--out", str(out)]


METHODS = {m.name: m for m in (
    Method("sgld", "bdlkit.algorithms.sgmcmc.sgld", "SGLD", 480, DRAWS, burnin=40),
    Method("sghmc", "bdlkit.algorithms.sgmcmc.sghmc", "SGHMC", 480, DRAWS, burnin=40),
    # full batch: 150 draws after 50 steps of step-size adaptation
    Method("hmc", "bdlkit.algorithms.mcmc.hmc", "HMC", 200,
           ("--num-leapfrog", "4", "--adapt-steps", "50", "--burnin", "50",
            "--thin", "1", "--max-samples", "150"), burnin=50),
    Method("score_vi", "bdlkit.algorithms.vi.score_vi", "ScoreVI", 60),
    Method("advi", "bdlkit.algorithms.vi.advi", "ADVI", 60),
    Method("ivon", "bdlkit.algorithms.vi.ivon", "IVON", 60),
    Method("ensemble", "bdlkit.algorithms.point.ensemble", "Ensemble", 60,
           ("--members", "3")),
    Method("map", "bdlkit.algorithms.point.map", "MAP", 60),
)}

#: a tiny ``bdlkit meta-train l2e`` (6 outer steps of 2 antithetic pairs, 12 inner steps,
#: checkpoints after steps 2, 4 and 6); rerunning it with the same --out resumes it. Every
#: run is ``--out meta`` in its own folder, so the recorded command is the same
META_STEPS, META_EVERY = 6, 2
META_TRAIN = ("meta-train", "l2e", "--outer-steps", str(META_STEPS), "--families",
              "teacher-mlp", "--inner-steps", "12", "--sample-window", "6", "--num-samples",
              "3", "--population", "2", "--batch-size", "32", "--checkpoint-every",
              str(META_EVERY), "--seed", "0")


def fit_baseline(tmp_path_factory, method: Method) -> Path:
    """The uninterrupted run of ``method``'s command (built once per session)."""
    def build(folder: Path) -> None:
        done = bdlkit(*method.fit(folder / "run"))
        assert done.returncode == 0, explain(done)

    return baseline(tmp_path_factory, method.name, build) / "run"


def meta_train_baseline(tmp_path_factory) -> Path:
    def build(folder: Path) -> None:
        done = bdlkit(*META_TRAIN, "--out", "meta", cwd=folder)
        assert done.returncode == 0, explain(done)

    return baseline(tmp_path_factory, "meta-train", build) / "meta"


# ------------------------------------------------------------------ the cases
def between_checkpoints(rng: random.Random, steps: int) -> int:
    """A random step strictly between two checkpoints, after the first: a run killed there
    has steps to redo after its newest checkpoint."""
    return rng.randrange(1, (steps - 1) // EVERY + 1) * EVERY + rng.randrange(1, EVERY)


def newest_step(run: Path) -> int | None:
    path = latest_checkpoint(run / "checkpoints")
    return None if path is None else load_checkpoint(path).step


def stale_temps(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.tmp") if p.is_file())


def resume(run: Path) -> None:
    again = bdlkit("fit", "--resume", str(run), "--no-progress")
    assert again.returncode == 0, explain(again)


def sigkill_at_step(method: Method, ref: Path, run: Path, kill_at: int) -> None:
    """SIGKILL when ``kill_at`` steps are done, ``--resume``: the uninterrupted run's results."""
    killed = bdlkit(*method.fit(run), mode="step", module=method.module, name=method.cls,
                    signal="SIGKILL", at=kill_at)
    assert killed.returncode == KILLED, explain(killed)
    assert not (run / "metrics.json").exists()
    assert newest_step(run) == kill_at // EVERY * EVERY
    resume(run)
    assert_same_fit(run, ref, draws=method.draws)


def sigkill_writing_checkpoint(method: Method, ref: Path, run: Path, step: int) -> None:
    """SIGKILL between writing checkpoint ``step``'s temporary file and renaming it:
    ``--resume`` continues from the previous checkpoint, removes the temporary file and
    ends as the uninterrupted run."""
    killed = bdlkit(*method.fit(run), mode="write", target=checkpoint_name(step), at=1)
    assert killed.returncode == KILLED, explain(killed)
    assert not (run / "metrics.json").exists()
    stale = stale_temps(run)
    assert [p.name for p in stale if STALE_CHECKPOINT.match(p.name)
            and p.name.startswith(f".step-{step:09d}.")] and len(stale) == 1, stale
    assert newest_step(run) == step - EVERY
    resume(run)
    assert not stale[0].exists(), f"{stale[0]} was left by the resume"
    assert stale_temps(run) == []
    assert_same_fit(run, ref, draws=method.draws)


def sigint_at_step(method: Method, ref: Path, run: Path, at: int) -> None:
    """SIGINT (Ctrl-C) while step ``at + 1`` runs: the run finishes that step, checkpoints,
    exits with 130; ``--resume`` ends with the uninterrupted run's shards (defect F11)."""
    stopped = bdlkit(*method.fit(run), mode="step", module=method.module, name=method.cls,
                     signal="SIGINT", at=at)
    assert stopped.returncode == 130, explain(stopped)
    assert not (run / "metrics.json").exists()
    assert newest_step(run) == at + 1
    resume(run)
    assert_same_fit(run, ref, draws=method.draws)


def meta_train(run: Path, **how: str | int) -> subprocess.CompletedProcess:
    """``bdlkit meta-train`` into ``run`` (``--out meta`` in its parent: ``run.name`` must
    be "meta", as the uninterrupted run's, for the same recorded command)."""
    assert run.name == "meta"
    return bdlkit(*META_TRAIN, "--out", "meta", cwd=run.parent, **how)


def rerun_meta_train(run: Path, expect_from: int) -> None:
    again = meta_train(run)
    assert again.returncode == 0, explain(again)
    if expect_from:
        assert f"resuming meta-training from outer step {expect_from}" in again.stdout, (
            explain(again))
