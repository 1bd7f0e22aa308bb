"""The documentation site: its strict build catches what it promises to catch, and its
pages keep up with the package (every module in the API reference, every data set on the
data-set page and in the README). ``make docs`` builds the real site."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bdlkit.data import DATASETS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
needs_sphinx = pytest.mark.skipif(importlib.util.find_spec("sphinx") is None,
                                  reason="the docs extra (sphinx) is not installed")

GOOD_MODULE = ('"""A module whose docstrings render: see :func:`probe_function`."""\n\n'
               'def probe_function(x: int) -> int:\n'
               '    """Return ``x``.\n\n    Args:\n        x: any integer.\n    """\n'
               '    return x\n')
BAD_MODULE = '"""A module whose docstring does not render: |oops| is no substitution."""\n'


def _build(tmp_path: Path, page: str, module: str) -> subprocess.CompletedProcess:
    """A one-page site with docs/conf.py's settings and the same strict flags as make docs."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(DOCS / "conf.py", src / "conf.py")
    (src / "index.md").write_text(page)
    (tmp_path / "probe_module.py").write_text(module)
    env = {"PATH": "", "PYTHONPATH": f"{tmp_path}:{ROOT / 'src'}", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-n", "-q", "-b", "html",
         str(src), str(tmp_path / "html")],
        env=env, capture_output=True, text=True, timeout=300, check=False)


def _page(body: str) -> str:
    return "# Probe\n\n```{eval-rst}\n.. automodule:: probe_module\n```\n\n" + body + "\n"


@needs_sphinx
def test_a_correct_page_builds(tmp_path):
    proc = _build(tmp_path, _page("See {func}`probe_module.probe_function`."),
                  GOOD_MODULE)
    assert proc.returncode == 0, proc.stderr


@needs_sphinx
def test_a_broken_cross_reference_fails_the_build(tmp_path):
    proc = _build(tmp_path, _page("See {func}`probe_module.no_such_function`."), GOOD_MODULE)
    assert proc.returncode != 0
    assert "no_such_function" in proc.stderr and "not found" in proc.stderr


@needs_sphinx
def test_a_broken_link_between_pages_fails_the_build(tmp_path):
    proc = _build(tmp_path, _page("See [the missing page](missing.md)."), GOOD_MODULE)
    assert proc.returncode != 0 and "missing.md" in proc.stderr


@needs_sphinx
def test_a_docstring_that_does_not_render_fails_the_build(tmp_path):
    proc = _build(tmp_path, _page(""), BAD_MODULE)
    assert proc.returncode != 0 and "oops" in proc.stderr


def _public_modules() -> list[str]:
    """Every module of the package the API reference must show: not the benchmark
    suites (layer 7), the CLI, or private modules."""
    names = []
    for path in sorted((ROOT / "src" / "bdlkit").rglob("*.py")):
        parts = path.relative_to(ROOT / "src").with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if "bench" in parts or parts[-1].startswith("cli") or any(p.startswith("_") for p in parts):
            continue
        names.append(".".join(parts))
    return names


def test_the_api_reference_shows_every_public_module():
    documented = set()
    for page in (DOCS / "api").glob("*.md"):
        for line in page.read_text().splitlines():
            if line.startswith(".. automodule:: "):
                documented.add(line.split()[-1])
    missing = [m for m in _public_modules() if m not in documented]
    assert not missing, f"add to docs/api/*.md: {missing}"


def test_every_module_has_a_docstring():
    bare = [p for p in (ROOT / "src" / "bdlkit").rglob("*.py")
            if p.stat().st_size and ast.get_docstring(ast.parse(p.read_text())) is None]
    assert not bare, bare


@pytest.mark.parametrize("page", ["docs/datasets.md", "README.md"])
def test_every_shipped_data_set_is_described(page):
    text = (ROOT / page).read_text()
    missing = [name for name in DATASETS if f"`{name}`" not in text]
    assert not missing, f"{page} does not describe {missing}"


def test_the_docs_and_the_package_do_not_point_outside_the_checkout():
    """Data come from a data root the user gives, never a sibling folder of a checkout."""
    offenders = [p for folder in ("docs", "src") for p in (ROOT / folder).rglob("*")
                 if p.suffix in (".md", ".py") and "_build" not in p.parts
                 and "../shared" in p.read_text()]
    assert not offenders, offenders
