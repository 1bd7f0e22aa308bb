"""The ``startup`` suite: fresh-process wall times with goals, written as JSON and Markdown."""

from __future__ import annotations

import json

import pytest

from bdlkit.bench import startup


def test_the_suite_times_each_command_and_judges_the_goal(tmp_path, monkeypatch):
    monkeypatch.setattr(startup, "COMMANDS", (
        ("pass", ("-c", "pass"), 60.0),
        ("import torch (floor)", ("-c", "pass"), None),
        ("sleep", ("-c", "import time; time.sleep(0.3)"), 0.01),
    ))
    rows = startup.run(tmp_path / "s", repeats=2)
    by = {r["command"]: r for r in rows}
    assert by["pass"]["meets_goal"] is True and by["sleep"]["meets_goal"] is False
    assert by["import torch (floor)"]["meets_goal"] is None
    assert by["sleep"]["min_s"] >= 0.3 and by["sleep"]["ratio_to_torch"] > 1
    written = json.loads((tmp_path / "s" / "results.json").read_text())
    assert written["repeats"] == 2 and len(written["rows"]) == 3
    assert "| sleep" in (tmp_path / "s" / "results.md").read_text()


def test_a_failing_command_is_not_timed():
    with pytest.raises(RuntimeError, match="failed"):
        startup.wall_times(("-c", "import sys; sys.exit(3)"), 1)
