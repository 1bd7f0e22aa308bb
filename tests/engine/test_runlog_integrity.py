"""log.jsonl damage is detected, never silently carried or shortened (issue 45, item 4).

Each line carries a digest chained to the line before it, and each checkpoint records the
digest of the last line it has seen (:mod:`bdlkit.engine.runlog`). A run of 30 steps that
logs every 2 steps and checkpoints every 10 "dies" after logging step 24 (a callback
raising a BaseException: no checkpoint, as a kill -9), so its log holds 12 lines, the
last two after its newest checkpoint (step 20); then its log is damaged and it resumes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bdlkit.algorithms import get_method
from bdlkit.cli import main
from bdlkit.core.errors import CorruptFileError
from bdlkit.engine import checkpointing
from bdlkit.engine.runlog import DIGEST, LogWriter, read_log
from bdlkit.engine.runner import Runner

STEPS, LOG_EVERY, CHECKPOINT_EVERY, DIES_AFTER = 30, 2, 10, 24


class Killed(BaseException):
    """Stands for the process dying: not an Exception, so no callback error, no checkpoint."""


def _runner(blr, run_dir: Path, callbacks=None) -> Runner:
    model, data, _, _ = blr
    algorithm = get_method("map").build(model, lr=1e-2)
    return Runner(algorithm, data, steps=STEPS, seed=0, batch_size=16, run_dir=run_dir,
                  log_every=LOG_EVERY, checkpoint_every=CHECKPOINT_EVERY, callbacks=callbacks)


def _die_after_24(event) -> None:
    if event.step == DIES_AFTER:
        raise Killed


def _killed_run(blr, run_dir: Path) -> Path:
    with pytest.raises(Killed):
        _runner(blr, run_dir, [_die_after_24]).fit()
    assert len(_lines(run_dir)) == DIES_AFTER // LOG_EVERY
    return run_dir


def _lines(run_dir: Path) -> list[str]:
    return (run_dir / "log.jsonl").read_text().splitlines()


def _write_lines(run_dir: Path, lines: list[str]) -> None:
    (run_dir / "log.jsonl").write_text("".join(line + "\n" for line in lines))


def _without_times(entries: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if k != "time_s"} for e in entries]


@pytest.fixture
def uninterrupted(blr, tmp_path) -> list[dict]:
    _runner(blr, tmp_path / "whole").fit()
    return _without_times(read_log(tmp_path / "whole" / "log.jsonl"))


def test_item4_every_line_carries_a_digest_chained_to_the_line_before(blr, tmp_path):
    lines = [json.loads(line) for line in _lines(_killed_run(blr, tmp_path / "run"))]
    digests = [line[DIGEST] for line in lines]
    assert all(isinstance(d, str) and len(d) == 16 for d in digests)
    assert len(set(digests)) == len(digests)


def test_item4_a_number_edited_in_place_is_refused_on_resume(blr, tmp_path):
    run_dir = _killed_run(blr, tmp_path / "run")
    lines = _lines(run_dir)
    entry = json.loads(lines[2])
    entry["log_prob"] += 1.0  # still a valid number
    lines[2] = json.dumps(entry)
    _write_lines(run_dir, lines)
    with pytest.raises(CorruptFileError, match=r"log\.jsonl line 3 \(step 6\) does not match"
                       r".*--overwrite"):
        _runner(blr, run_dir).fit(resume=True)


def test_item4_a_line_made_invalid_is_refused_not_skipped(blr, tmp_path):
    run_dir = _killed_run(blr, tmp_path / "run")
    lines = _lines(run_dir)
    lines[3] = lines[3][:20]  # cut in the middle: no longer JSON
    _write_lines(run_dir, lines)
    with pytest.raises(CorruptFileError, match=r"log\.jsonl line 4 is not valid JSON"):
        _runner(blr, run_dir).fit(resume=True)


@pytest.mark.parametrize(("removed", "found"), [
    (slice(4, 5), r"line 5 \(step 12\) does not match its digest"),
    (slice(9, None), r"ends before the line the checkpoint records as its last")],
    ids=["a-line-inside", "the-lines-from-the-checkpoint's-last-on"])
def test_item4_a_removed_line_is_refused(blr, tmp_path, removed, found):
    """A line removed inside the log breaks the next line's digest; a log cut short of
    the last line the checkpoint has seen (step 20) no longer reaches its digest."""
    run_dir = _killed_run(blr, tmp_path / "run")
    lines = _lines(run_dir)
    del lines[removed]
    _write_lines(run_dir, lines)
    with pytest.raises(CorruptFileError, match=rf"log\.jsonl {found}"):
        _runner(blr, run_dir).fit(resume=True)


def test_item4_a_missing_log_is_refused_when_the_checkpoint_has_seen_lines(blr, tmp_path):
    run_dir = _killed_run(blr, tmp_path / "run")
    (run_dir / "log.jsonl").unlink()
    with pytest.raises(CorruptFileError, match=r"log\.jsonl is missing"):
        _runner(blr, run_dir).fit(resume=True)


def test_item4_damage_after_the_checkpoint_is_replaced_by_the_resume(blr, tmp_path,
                                                                    uninterrupted):
    """The lines after step 20 are recomputed anyway: a damaged one (or one cut by the
    crash) there does not stop the resume, which ends with the uninterrupted run's log."""
    run_dir = _killed_run(blr, tmp_path / "run")
    lines = _lines(run_dir)
    lines[-1] = "{not json"
    _write_lines(run_dir, lines)
    _runner(blr, run_dir).fit(resume=True)
    assert _without_times(read_log(run_dir / "log.jsonl")) == uninterrupted
    assert all(DIGEST in json.loads(line) for line in _lines(run_dir))


def test_item4_a_log_of_an_older_bdlkit_without_digests_still_resumes(blr, tmp_path,
                                                                      monkeypatch,
                                                                      uninterrupted):
    """Lines without digests and checkpoints without a log digest (an older bdlkit) are
    read unchecked; the resume rewrites the lines it keeps with digests."""
    with monkeypatch.context() as patch:  # the checkpoints record no log_digest
        patch.setattr(checkpointing, "LOG_DIGEST", "not-the-log-digest")
        run_dir = _killed_run(blr, tmp_path / "run")
    old = [json.loads(line) for line in _lines(run_dir)]
    _write_lines(run_dir, [json.dumps({k: v for k, v in e.items() if k != DIGEST})
                           for e in old])
    _runner(blr, run_dir).fit(resume=True)
    assert _without_times(read_log(run_dir / "log.jsonl")) == uninterrupted
    assert all(DIGEST in json.loads(line) for line in _lines(run_dir))


def test_item4_a_line_without_a_digest_after_digested_ones_is_refused(tmp_path):
    path = tmp_path / "log.jsonl"
    LogWriter(path, [{"step": 1, "log_prob": -1.0}]).append({"step": 2, "log_prob": -0.5})
    path.write_text(path.read_text() + '{"step": 3, "log_prob": -0.25}\n')
    with pytest.raises(CorruptFileError, match=r"line 3 has no digest"):
        read_log(path)


def test_item4_only_a_cut_last_line_is_skipped(tmp_path):
    path = tmp_path / "log.jsonl"
    log = LogWriter(path, [{"step": 1, "log_prob": -1.0}])
    log.append({"step": 2, "log_prob": -0.5})
    whole = path.read_text()
    path.write_text(whole + '{"step": 3, "log_p')  # a crash while writing line 3
    assert [e["step"] for e in read_log(path)] == [1, 2]
    path.write_text(whole + '{"step": 3, "log_p\n')  # ... but a newline after it: damage
    with pytest.raises(CorruptFileError, match=r"line 3 is not valid JSON"):
        read_log(path)


# ------------------------------------------------------------------ bdlkit evaluate
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(["fit", "--method", "map", "--out", str(out), "--steps", "3",
                 "--log-every", "1", "--no-progress"]) == 0
    return out


def test_item4_evaluate_names_an_edited_line_in_one_line(finished_run, tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    lines = _lines(run_dir)
    lines[1] = lines[1].replace('"step": 2', '"step": 2, "extra": 1')
    _write_lines(run_dir, lines)
    capsys.readouterr()
    assert main(["evaluate", str(run_dir), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bdlkit: error: ")
    assert f"{run_dir}/log.jsonl line 2 (step 2) does not match" in err[0]
    assert "--overwrite" in err[0]
