"""Runner callbacks: what they see, how a failing one stops the run, TensorBoard and the CLI."""

from __future__ import annotations

import builtins
import subprocess
import sys

import numpy as np
import pytest
import torch

from bdlkit import infer
from bdlkit.algorithms import get_method
from bdlkit.cli import main
from bdlkit.core.serialization import state_to_tensors
from bdlkit.engine.callbacks import CallbackError, Hooks, LogEvent, TensorBoardLogger
from bdlkit.engine.checkpoint import latest_checkpoint, load_checkpoint
from bdlkit.engine.runlog import read_log
from bdlkit.engine.runner import Runner

STEPS = 30


def _runner(blr, run_dir=None, callbacks=None, **kw):
    model, data, _, _ = blr
    algorithm = get_method("map").build(model, lr=1e-2)
    options = {"log_every": 5, "checkpoint_every": 10, **kw}
    return Runner(algorithm, data, steps=STEPS, seed=0, batch_size=16, run_dir=run_dir,
                  callbacks=callbacks, **options)


def _log(run_dir):
    """log.jsonl's entries, their digests checked and left out (as bdlkit reads them)."""
    return read_log(run_dir / "log.jsonl")


def _norm(params):
    """An ``eval_fn``: the weights' norm, logged as ``eval/norm``."""
    return {"norm": float(params["weight"].norm())}


def _same_state(a, b):
    sa, sb = state_to_tensors(a.state), state_to_tensors(b.state)
    assert set(sa) == set(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


class Recorder(Hooks):
    """Every hook call, in order; raises ``error`` from ``hook`` at ``step`` (if given)."""

    def __init__(self, hook=None, step=None, error=None):
        self.calls, self.hook, self.step, self.error = [], hook, step, error

    def _maybe_fail(self, hook, step):
        if hook == self.hook and (self.step is None or step == self.step):
            raise self.error

    def on_start(self, step, total):
        self.calls.append(("start", step, total))
        self._maybe_fail("on_start", step)

    def on_log(self, event):
        self.calls.append(("log", event.step, event.entry))
        self._maybe_fail("on_log", event.step)

    def on_end(self, result):
        self.calls.append(("end", result))
        self._maybe_fail("on_end", None)


def test_callables_and_hooks_see_each_logged_entry_and_the_result(blr, tmp_path):
    seen, hooks = [], Recorder()

    def grab(event):
        seen.append(event)
        event.entry["log_prob"] = 0.0  # a copy: the log and history keep theirs

    result = _runner(blr, tmp_path, [grab, hooks], eval_fn=_norm, eval_every=12).fit()
    log = _log(tmp_path)
    assert result.history == log
    assert [e["step"] for e in log] == [5, 10, 12, 15, 20, 24, 25, 30]
    assert all(isinstance(e, LogEvent) and e.total == STEPS and e.method == "map" for e in seen)
    assert [e.step for e in seen] == [e["step"] for e in log]
    assert hooks.calls[0] == ("start", 0, STEPS) and hooks.calls[-1] == ("end", result)
    assert [c[2] for c in hooks.calls[1:-1]] == log
    assert set(seen[2].scalars()) == {"log_prob", "eval/norm", "time_s"}
    assert seen[2].scalars()["time_s"] == log[2]["time_s"]


def test_a_failing_callback_stops_after_a_checkpoint_of_its_step_and_resume_is_exact(
        blr, tmp_path):
    full = _runner(blr, tmp_path / "full").fit()
    after = Recorder()
    failing = Recorder("on_log", 15, OSError("disk full"))
    with pytest.raises(CallbackError) as info:
        _runner(blr, tmp_path / "cut", [failing, after]).fit()
    err = info.value
    text = str(err)
    assert "Recorder" in text and "OSError: disk full" in text and "step 15 of 30" in text
    assert "fit(resume=True)" in text and f"--resume {tmp_path / 'cut'}" in text
    assert isinstance(err.__cause__, OSError) and err.step == 15
    assert load_checkpoint(latest_checkpoint(tmp_path / "cut" / "checkpoints")).step == 15
    assert err.checkpoint == latest_checkpoint(tmp_path / "cut" / "checkpoints")
    assert after.calls[-1][:2] == ("log", 15)  # the others still saw the step
    assert [e["step"] for e in _log(tmp_path / "cut")] == [5, 10, 15]

    again = Recorder()  # callbacks are not in the checkpoint: new ones, from step 15 again
    resumed = _runner(blr, tmp_path / "cut", [again]).fit(resume=True)
    _same_state(full, resumed)
    assert again.calls[0] == ("start", 15, STEPS)
    assert again.calls[1] == ("log", 15, failing.calls[-1][2])  # the entry it failed on
    assert [c[1] for c in again.calls[1:-1]] == [15, 20, 25, 30]
    strip = lambda log: [{k: v for k, v in e.items() if k != "time_s"} for e in log]  # noqa: E731
    assert strip(_log(tmp_path / "cut")) == strip(_log(tmp_path / "full"))


def test_a_failing_on_end_keeps_the_finished_run(blr, tmp_path):
    with pytest.raises(CallbackError, match="in on_end: the run finished all 30 steps") as info:
        _runner(blr, tmp_path, [Recorder("on_end", None, ValueError("bad"))]).fit()
    assert info.value.result is not None and "final checkpoint" in str(info.value)
    resumed = _runner(blr, tmp_path).fit(resume=True)  # no step run: the same Result
    _same_state(info.value.result, resumed)

    with pytest.raises(CallbackError, match="nothing was saved") as info:
        _runner(blr, None, [Recorder("on_end", None, ValueError("bad"))]).fit()
    assert len(info.value.result.history) == 6


def test_a_failing_callable_without_run_dir_and_a_failing_on_start(blr, tmp_path):
    def broken(event):
        raise KeyError("loss")

    with pytest.raises(CallbackError, match=r"test_callbacks\..*broken raised KeyError.*step 5 "
                       r"of 30.*no run_dir: nothing was saved"):
        _runner(blr, None, [broken]).fit()
    with pytest.raises(CallbackError, match="in on_start, before step 1: no step ran"):
        _runner(blr, tmp_path, [Recorder("on_start", 0, RuntimeError("no tracker"))]).fit()
    assert latest_checkpoint(tmp_path / "checkpoints") is None


def test_bad_callbacks_are_refused_by_name(blr):
    with pytest.raises(TypeError, match="callback 42 is neither callable nor has any of"):
        _runner(blr, None, [42])
    with pytest.raises(TypeError, match=r"takes a list of callbacks: pass \[callback\]"):
        _runner(blr, None, print)


def test_infer_passes_callbacks_to_the_runner(blr):
    model, data, _, _ = blr
    seen = []
    result = infer(model, "map", data=data, steps=12, log_every=4, callbacks=[seen.append])
    assert [e.entry for e in seen] == result.history and len(seen) == 3


# ------------------------------------------------------------------ TensorBoard
def _tensorboard_scalars(folder):
    """{tag: [(step, value), ...]} of the events files in ``folder``, as TensorBoard reads
    them (orphaned events of an earlier writer purged)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _log_scalars(log):
    """log.jsonl as {tag: [(step, value as float32), ...]}: what TensorBoard should hold."""
    tags = {k for e in log for k in e if k != "step"}
    return {t: [(e["step"], float(np.float32(e[t]))) for e in log if t in e] for t in tags}


def test_tensorboard_scalars_equal_the_log(blr, tmp_path):
    pytest.importorskip("tensorboard")
    _runner(blr, tmp_path / "run", [TensorBoardLogger(tmp_path / "tb")], eval_fn=_norm,
            eval_every=10).fit()
    found, log = _tensorboard_scalars(tmp_path / "tb"), _log(tmp_path / "run")
    assert set(found) == {"log_prob", "eval/norm", "time_s"}
    assert found == _log_scalars(log)


class Killed(BaseException):
    """Stands for the process dying: not an Exception, so no callback error, no checkpoint."""


def test_tensorboard_after_a_crash_and_resume_holds_each_step_once(blr, tmp_path):
    pytest.importorskip("tensorboard")

    def kill_at_23(event):
        if event.step == 23:
            raise Killed

    with TensorBoardLogger(tmp_path / "tb") as tb, pytest.raises(Killed):
        _runner(blr, tmp_path / "run", [tb, kill_at_23], log_every=1).fit()
    assert max(s for s, _ in _tensorboard_scalars(tmp_path / "tb")["log_prob"]) == 23
    _runner(blr, tmp_path / "run", [TensorBoardLogger(tmp_path / "tb")],
            log_every=1).fit(resume=True)  # from the checkpoint at step 20
    found, log = _tensorboard_scalars(tmp_path / "tb"), _log(tmp_path / "run")
    assert [s for s, _ in found["log_prob"]] == list(range(1, STEPS + 1))
    assert found["log_prob"] == _log_scalars(log)["log_prob"]


@pytest.mark.slow
def test_without_tensorboard_bdlkit_imports_and_the_logger_names_the_extra():
    code = ("import sys; sys.modules['tensorboard'] = None\n"
            "import bdlkit, bdlkit.cli, bdlkit.engine.callbacks as c\n"
            "assert 'torch.utils.tensorboard' not in sys.modules\n"
            "try:\n    c.TensorBoardLogger('tb')\n"
            "except ImportError as err:\n    print(err)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert "TensorBoardLogger" in out and "pip install 'bdlkit[tensorboard]'" in out


# ------------------------------------------------------------------ CLI
QUICK = ["fit", "--method", "map", "--steps", "20", "--log-every", "5", "--no-progress"]


def test_cli_fit_tensorboard_writes_the_logged_scalars_also_on_resume(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    run, tb = tmp_path / "run", tmp_path / "tb"
    assert main([*QUICK, "--out", str(run), "--tensorboard", str(tb)]) == 0
    assert _tensorboard_scalars(tb) == _log_scalars(_log(run))
    assert "tensorboard" not in (run / "config.yaml").read_text()  # not a run option
    assert main(["fit", "--resume", str(run), "--no-progress", "--tensorboard", str(tb)]) == 0


def test_cli_tensorboard_errors_are_one_line(tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main([*QUICK, "--out", str(tmp_path / "r1"), "--tensorboard", str(blocker)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"bdlkit: error: --tensorboard {blocker}: ") and "not a folder" in err
    assert not (tmp_path / "r1").exists()  # refused before the run

    real = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name.split(".")[0] == "tensorboard":
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    assert main([*QUICK, "--out", str(tmp_path / "r2"), "--tensorboard", "tb"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'bdlkit[tensorboard]'" in err and "Traceback" not in err
    assert not (tmp_path / "r2").exists()  # refused before the run


def test_cli_a_logger_failing_mid_run_says_how_to_resume(tmp_path, capsys, monkeypatch):
    pytest.importorskip("tensorboard")
    run, tb = tmp_path / "run", tmp_path / "tb"
    real = TensorBoardLogger.on_log

    def full_disk_at_10(self, event):
        if event.step == 10:
            raise OSError("No space left on device")
        real(self, event)

    with monkeypatch.context() as patch:
        patch.setattr(TensorBoardLogger, "on_log", full_disk_at_10)
        assert main([*QUICK, "--out", str(run), "--tensorboard", str(tb)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"bdlkit: error: --tensorboard {tb}: callback TensorBoardLogger")
    assert "No space left on device at step 10 of 20" in err and f"--resume {run}" in err
    assert main(["fit", "--resume", str(run), "--no-progress", "--tensorboard", str(tb)]) == 0
    assert _tensorboard_scalars(tb)["log_prob"] == _log_scalars(_log(run))["log_prob"]
