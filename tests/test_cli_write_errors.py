"""Where a run cannot be written, one line says why and how to go on (issue 45, smaller
items): ``--out`` naming a regular file, and a full disk (``[Errno 28]``), which used to
name neither the file nor the resume. In-process through ``bdlkit.cli.main``, as
``tests/test_cli_errors.py``.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest

from bdlkit.cli import main
from bdlkit.core import serialization
from bdlkit.engine.checkpoint import latest_checkpoint

QUICK = ["fit", "--method", "map", "--steps", "3", "--checkpoint-every", "1",
         "--log-every", "1", "--no-progress"]


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bdlkit: error: "), err
    return err[0]


def test_out_naming_a_regular_file_says_it_is_a_file_not_resume(tmp_path, capsys):
    path = tmp_path / "notes.txt"
    path.write_text("mine\n")
    assert main([*QUICK, "--out", str(path)]) == 2
    line = _one_error_line(capsys)
    assert line == (f"bdlkit: error: --out {path} is a file, not a folder: choose another "
                    "--out (a new folder)")
    assert path.read_text() == "mine\n"


def _disk_full_at(monkeypatch, name: str) -> None:
    """The atomic writer's rename of a file called ``name`` fails as on a full disk (an
    ``OSError`` with errno ENOSPC and no file name, as ``write`` and ``fsync`` raise it)."""
    class Os:  # the os module as bdlkit.core.serialization sees it
        def __getattr__(self, attr):
            return getattr(os, attr)

        @staticmethod
        def replace(src, dst):
            if Path(dst).name == name:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return os.replace(src, dst)

    monkeypatch.setattr(serialization, "os", Os())


def test_a_full_disk_names_the_file_and_the_resume(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        _disk_full_at(patch, "step-000000002.safetensors")
        assert main([*QUICK, "--out", str(out)]) == 2
    line = _one_error_line(capsys)
    assert line == (f"bdlkit: error: no space left on the device writing "
                    f"{out}/checkpoints/step-000000002.safetensors: free some space, then "
                    f"`bdlkit fit --resume {out}` continues from its newest checkpoint")
    assert not [p for p in (out / "checkpoints").iterdir() if p.name.endswith(".tmp")]
    assert latest_checkpoint(out / "checkpoints").name == "step-000000001.safetensors"


def test_a_full_disk_before_any_checkpoint_says_to_start_again(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    _disk_full_at(monkeypatch, "step-000000001.safetensors")
    assert main([*QUICK, "--out", str(out)]) == 2
    line = _one_error_line(capsys)
    assert re.fullmatch(rf"bdlkit: error: no space left on the device writing "
                        rf"{re.escape(str(out))}/checkpoints/step-000000001\.safetensors: free "
                        r"some space, then run the command again with --overwrite \(.*\)", line)


def test_a_full_disk_while_appending_to_the_log_names_it(tmp_path, monkeypatch):
    """log.jsonl is appended line by line, outside the atomic writer: it is named too."""
    from bdlkit.engine import runlog

    log = runlog.LogWriter(tmp_path / "log.jsonl", [])

    def no_space(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "open", no_space)
    with pytest.raises(OSError, match=r"No space left on device: '.*log\.jsonl'"):
        log.append({"step": 1, "log_prob": -1.0})
