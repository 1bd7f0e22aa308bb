"""The tutorials (``tutorials/*.py``) run at their CI size and hold their assertion.

Each script asserts one outcome of its own (an interval's coverage, a sampler beating the
majority class, R-hat flagging a short run); this test runs it as a user would, in a fresh
process, and fails on a non-zero exit. The issue's budget is 2 minutes per tutorial."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "tutorials").glob("*.py"))
BUDGET_S = 120
#: tutorials of more than about 20 s at their small size: `make test-slow` runs them
LONG = ("gpu_and_processes", "l2e_sampler", "own_model")


def test_every_tutorial_has_a_page_that_shows_its_script():
    assert SCRIPTS, "no tutorials found"
    index = (ROOT / "docs" / "tutorials" / "index.md").read_text()
    for script in SCRIPTS:
        page = ROOT / "docs" / "tutorials" / f"{script.stem}.md"
        assert page.is_file(), f"{script.name} has no page {page}"
        assert f"../../tutorials/{script.name}" in page.read_text(), page
        assert re.search(rf"^{script.stem}$", index, re.M), f"{page.name} not in the toctree"


@pytest.mark.parametrize("script", [pytest.param(s, marks=pytest.mark.slow) if s.stem in LONG
                                    else s for s in SCRIPTS], ids=[s.stem for s in SCRIPTS])
def test_tutorial_runs_at_its_small_size(script, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, str(script), "--small", "--out", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=BUDGET_S, check=False)
    assert proc.returncode == 0, f"{script.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
