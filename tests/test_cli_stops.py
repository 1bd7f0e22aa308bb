"""What ``bdlkit`` says when a command is stopped (:mod:`bdlkit.cli_stops`; issue 45, item
7's interrupted data-parallel run and the smaller item "SIGTERM during ``evaluate`` exits
143 silently").

Each case runs ``bdlkit.cli`` in-process; the stop is a real SIGTERM raised from inside the
command (a test handler catches one that nothing else would, so that no test kills its
worker), or the runner's :class:`Interrupted` after a checkpoint.
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

import pytest
import yaml

from bdlkit.cli import main
from bdlkit.cli_errors import run_guarded
from bdlkit.core.serialization import save_json
from bdlkit.engine.signals import Interrupted
from bdlkit.runs import directory


@pytest.fixture
def sigterm_guard():
    """SIGTERM raises here when no one else handles it; the handler before is restored."""
    def handler(signum, frame):
        raise AssertionError("SIGTERM reached the test's own handler")

    before = signal.signal(signal.SIGTERM, handler)
    yield handler
    signal.signal(signal.SIGTERM, before)


@pytest.fixture
def evaluated(tmp_path: Path) -> Path:
    """A folder as an earlier ``bdlkit evaluate`` left it (what the stop leaves alone)."""
    run = tmp_path / "R"
    run.mkdir()
    (run / "metrics.json").write_text('{"accuracy": 0.9}')
    (run / "report.md").write_text("# report\n")
    return run


def _sigterm_after(write: bool):
    """``reevaluate`` that (optionally) rewrites metrics.json, then receives SIGTERM."""
    def reevaluate(run_dir, **kwargs):
        if write:
            save_json(Path(run_dir) / "metrics.json", {"accuracy": 0.5})
        signal.raise_signal(signal.SIGTERM)
        raise AssertionError("SIGTERM did not stop the evaluation")
    return reevaluate


def test_sigterm_during_evaluate_is_one_line_saying_nothing_changed(
        sigterm_guard, evaluated, monkeypatch, capsys):
    monkeypatch.setattr(directory, "reevaluate", _sigterm_after(write=False))
    assert main(["evaluate", str(evaluated), "--no-progress"]) == 143
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0] == (f"bdlkit: evaluation of {evaluated} interrupted by SIGTERM: nothing in "
                        f"{evaluated} was changed; run `bdlkit evaluate {evaluated}` (with the "
                        "same options) again")
    assert signal.getsignal(signal.SIGTERM) is sigterm_guard  # the handler is restored


def test_sigterm_during_evaluate_names_the_files_it_had_rewritten(
        sigterm_guard, evaluated, monkeypatch, capsys):
    monkeypatch.setattr(directory, "reevaluate", _sigterm_after(write=True))
    assert main(["evaluate", str(evaluated), "--no-progress"]) == 143
    err = capsys.readouterr().err
    assert f"metrics.json in {evaluated} were rewritten" in err and "report.md" not in err


def _data_parallel_run(tmp_path: Path) -> Path:
    run = tmp_path / "R"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"method": "sgld", "data_parallel": 2}))
    return run


def test_interrupted_data_parallel_run_says_the_torchrun_resume_command(tmp_path, capsys):
    run = _data_parallel_run(tmp_path)
    checkpoint = run / "checkpoints" / "step-000000026.safetensors"

    def body() -> int:
        raise Interrupted(26, checkpoint, signal.SIGTERM)

    assert run_guarded("fit", argparse.Namespace(resume=None, out=str(run)), body) == 143
    err = capsys.readouterr().err
    assert f"interrupted by SIGTERM after step 26; checkpoint {checkpoint}" in err
    assert err.rstrip().endswith(
        f"resume with: torchrun --nproc-per-node 2 -m bdlkit fit --resume {run}")


def test_sigterm_before_a_data_parallel_resume_started_says_the_torchrun_command(
        sigterm_guard, tmp_path, capsys):
    run = _data_parallel_run(tmp_path)

    def body() -> int:
        signal.raise_signal(signal.SIGTERM)
        return 0

    assert run_guarded("fit", argparse.Namespace(resume=str(run), out=None), body) == 143
    err = capsys.readouterr().err
    assert (f"bdlkit: interrupted by SIGTERM; if the run had started, `torchrun "
            f"--nproc-per-node 2 -m bdlkit fit --resume {run}` continues") in err


def test_one_process_run_keeps_the_plain_resume_command(tmp_path, capsys):
    run = tmp_path / "R"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"method": "sgld"}))

    def body() -> int:
        raise Interrupted(3, run / "checkpoints" / "step-000000003.safetensors")

    assert run_guarded("fit", argparse.Namespace(resume=None, out=str(run)), body) == 130
    assert capsys.readouterr().err.rstrip().endswith(f"resume with: bdlkit fit --resume {run}")


def test_the_launchers_sigterm_while_interrupted_is_raised_keeps_the_checkpoint_message(
        sigterm_guard, tmp_path, capsys):
    """torchrun SIGTERMs a writer whose replica exited first: the writer still names its
    checkpoint and the resume command, not a bare "interrupted"."""
    run = _data_parallel_run(tmp_path)
    checkpoint = run / "checkpoints" / "step-000000026.safetensors"

    def body() -> int:
        try:
            raise Interrupted(26, checkpoint, signal.SIGTERM)
        finally:
            signal.raise_signal(signal.SIGTERM)

    assert run_guarded("fit", argparse.Namespace(resume=None, out=str(run)), body) == 143
    err = capsys.readouterr().err
    assert f"checkpoint {checkpoint}" in err and "torchrun --nproc-per-node 2" in err
