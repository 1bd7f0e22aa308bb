"""Run folders cannot nest, and the lock covers the folder tree it guards (issue 45, item 3).

A run used to be created inside another run's ``checkpoints/`` or ``samples/``, and an
``--overwrite`` of the outer run deleted the inner one under its writer. Now every writer
(``fit --out``, ``Runner(run_dir=...)``, ``reference``) refuses a folder inside a run
folder or holding one, and ``--overwrite`` deletes nothing whose lock another process
holds. The chains a chain-groups run (``OUT/chain-<g>``) or a reference
(``DIR/chains/chain-<c>``) is made to hold, and a plain folder of runs (``runs/``), stay
allowed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bdlkit.algorithms import get_method
from bdlkit.cli import main
from bdlkit.core.lock import (
    HOLDER_NAME,
    LOCK_NAME,
    REFERENCE_MARKER,
    FolderBusyError,
    NestedRunError,
    check_not_nested,
    run_lock,
)
from bdlkit.engine.runner import Runner
from bdlkit.runs import out_folder, reference
from bdlkit.runs.config import RunConfig

QUICK = ["--method", "sgld", "--steps", "2", "--no-progress"]


def _run_folder(path: Path) -> Path:
    """A run folder as ``bdlkit fit`` leaves it (its marker, config.yaml, checkpoints/)."""
    (path / "checkpoints").mkdir(parents=True)
    (path / "samples").mkdir()
    (path / out_folder.RUN_MARKER).write_text("written by bdlkit\n")
    (path / "config.yaml").write_text("method: sgld\n")
    (path / "log.jsonl").write_text("")
    return path


def _runner(blr, run_dir: Path) -> Runner:
    model, data, _, _ = blr
    return Runner(get_method("map").build(model, lr=1e-2), data, steps=4, seed=0,
                  batch_size=16, run_dir=run_dir, log_every=2)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bdlkit: error: "), err
    return err[0]


@pytest.mark.parametrize("inside", ["checkpoints/inner", "samples/inner", "inner"])
def test_item3_fit_out_inside_another_run_folder_is_refused(tmp_path, capsys, inside):
    outer = _run_folder(tmp_path / "outer")
    assert main(["fit", *QUICK, "--out", str(outer / inside)]) == 2
    line = _one_error_line(capsys)
    assert f"is inside the run folder {outer.resolve()}" in line and "cannot nest" in line
    assert not (outer / inside).exists()


def test_item3_runner_run_dir_inside_a_run_is_refused(blr, tmp_path):
    _runner(blr, tmp_path / "outer").fit()  # a Python run folder: its lock marks it
    with pytest.raises(NestedRunError, match="inside the run folder .*outer"):
        _runner(blr, tmp_path / "outer" / "checkpoints" / "inner").fit()
    assert not (tmp_path / "outer" / "checkpoints" / "inner").exists()


def test_item3_a_plain_folder_of_runs_stays_a_parent_but_is_no_run(blr, tmp_path, capsys):
    """``runs/`` holding runs (what ``bdlkit compare runs/*`` reads) takes new runs; a run
    in ``runs/`` itself is refused, naming a run it holds and where to put the new one."""
    runs = tmp_path / "runs"
    _runner(blr, runs / "a").fit()
    _runner(blr, runs / "b").fit()
    with pytest.raises(NestedRunError, match=r"runs holds the run folder .*runs/a .*e\.g\. "
                                             r".*runs/<name>"):
        _runner(blr, runs).fit()
    assert not (runs / "log.jsonl").exists()
    assert main(["fit", *QUICK, "--out", str(runs), "--overwrite"]) == 2
    assert "holds the run folder" in _one_error_line(capsys)


def test_item3_overwrite_of_a_run_holding_a_nested_run_deletes_nothing(tmp_path, capsys):
    """A run nested by an older bdlkit: the outer run's --overwrite would delete it."""
    outer = _run_folder(tmp_path / "outer")
    inner = _run_folder(outer / "checkpoints" / "inner")
    assert main(["fit", *QUICK, "--out", str(outer), "--overwrite"]) == 2
    line = _one_error_line(capsys)
    assert f"holds the run folder {inner.resolve()}" in line and "move" in line
    assert (inner / "config.yaml").is_file() and (outer / "config.yaml").is_file()


def test_item3_overwrite_keeps_a_subtree_another_process_is_writing(tmp_path):
    """The chains of a chain-groups run's OUT: --overwrite of OUT while another process
    writes chain-1 is refused naming that process, and deletes nothing."""
    out = out_folder.prepare_out(tmp_path / "out", False)
    _run_folder(out / "chain-0")
    chain = _run_folder(out / "chain-1")
    entries = (*out_folder.RUN_ENTRIES, "chain-0", "chain-1")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import json, os, time
        from filelock import FileLock  # as run_lock takes it (without importing torch)
        lock = FileLock({str(chain / LOCK_NAME)!r}, timeout=0, thread_local=False)
        lock.acquire()
        holder = {{"pid": os.getpid(), "host": "here", "purpose": "a test writing chain-1",
                  "command": "python -c ...", "since": "now"}}
        open({str(chain / HOLDER_NAME)!r}, "w").write(json.dumps(holder))
        print("held", flush=True)
        time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderBusyError, match=rf"chain-1 is being written by another "
                           rf"process \(PID {holder.pid}.*a test writing chain-1.*--overwrite"):
            out_folder.prepare_out(out, True, entries=entries)
        assert (chain / "config.yaml").is_file() and (out / "chain-0").is_dir()
    finally:
        holder.kill()
        holder.wait()
    out_folder.prepare_out(out, True, entries=entries)  # the dead holder's lock: taken over
    assert not (out / "chain-1").exists()


def test_item3_a_run_replacing_a_chain_groups_run_takes_its_chains_away(tmp_path):
    """Else the new run folder would hold the old run's chains: a nested run."""
    out = out_folder.prepare_out(tmp_path / "out", False)
    _run_folder(out / "chain-0")
    (out / "mine.txt").write_text("a user's file stays\n")
    out_folder.prepare_out(out, True)  # as `bdlkit fit --out out --overwrite` (one process)
    assert sorted(p.name for p in out.iterdir()) == [out_folder.RUN_MARKER, "mine.txt"]
    check_not_nested(out)


def test_item3_the_chains_a_run_is_made_to_hold_stay_allowed(tmp_path):
    out = out_folder.prepare_out(tmp_path / "out", False)  # a chain-groups run's OUT
    with run_lock(out / "chain-0"):
        pass
    with pytest.raises(NestedRunError, match="inside the run folder .*chain-0"):
        check_not_nested(out / "chain-0" / "checkpoints" / "x")
    with pytest.raises(NestedRunError, match="inside the run folder .*out"):
        check_not_nested(out / "other")
    ref = tmp_path / "ref"
    with run_lock(ref):  # a reference writing its chains
        (ref / REFERENCE_MARKER).write_text("")
        with run_lock(ref / "chains" / "chain-3"):
            pass
        with pytest.raises(NestedRunError, match="inside the run folder .*ref"):
            check_not_nested(ref / "chains" / "extra")
    check_not_nested(ref)  # its own chains below it


def test_item3_a_reference_inside_a_run_folder_is_refused(tmp_path):
    outer = _run_folder(tmp_path / "outer")
    cfg = RunConfig(**reference.with_defaults({"method": "hmc", "model": "mlp",
                                                "data": "digits", "steps": 4}))
    with pytest.raises(NestedRunError, match="inside the run folder"):
        reference.build(cfg, outer / "samples" / "ref", chains=2)
    assert not (outer / "samples" / "ref").exists()
