"""``bdlkit`` command lines run in a subprocess that kills itself with SIGKILL when a chosen
method reaches a chosen step (the kill -9 resume tests), and a short in-process ``fit`` with
its error line (test_cli.py, test_cli_parsing.py); ``from cli_helpers import ...``."""

import os
import subprocess
import sys
from pathlib import Path

KILLER = """
import importlib, os, signal, sys
cls = getattr(importlib.import_module(os.environ["KILL_MODULE"]), os.environ["KILL_CLASS"])
inner = cls.step
def step(self, state, batch):
    if state.step == int(os.environ["KILL_AT"]):
        os.kill(os.getpid(), signal.SIGKILL)
    return inner(self, state, batch)
cls.step = step
from bdlkit.cli import main
sys.exit(main(sys.argv[1:]))
"""

#: a short fit: 20 steps, logged every 5, no progress bar
FIT_QUICK = ["--steps", "20", "--log-every", "5", "--no-progress"]


def fit(out: Path, *extra: str, method: str = "sgld") -> int:
    """``bdlkit fit --method METHOD --out OUT`` with :data:`FIT_QUICK` and ``extra``, in
    process: the exit status."""
    from bdlkit.cli import main  # here: the kill -9 tests' importers need no CLI in process

    return main(["fit", "--method", method, "--out", str(out), *FIT_QUICK, *extra])


def error_line(err: str) -> str:
    """The last ``bdlkit: ...`` line of ``err`` (there must be one)."""
    lines = [line for line in err.splitlines() if line.startswith("bdlkit: ")]
    assert lines, err
    return lines[-1]


def run_cli(*argv: str, method: tuple[str, str], kill_at: int | None = None,
            timeout: float = 300, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess:
    """``bdlkit *argv``; ``method`` = (module, class) whose step ``kill_at`` (if given)
    kills the process."""
    env = {**os.environ, **(env or {}), "KILL_MODULE": method[0], "KILL_CLASS": method[1],
           "KILL_AT": str(-1 if kill_at is None else kill_at)}
    return subprocess.run([sys.executable, "-W", "ignore", "-c", KILLER, *argv], env=env,
                          check=False, capture_output=True, text=True, timeout=timeout)


def importable_package(root, monkeypatch, name: str, source: str):
    """``name.net`` holding ``source``, importable (from ``root/pkgs``) until the generator is
    closed: yields ``"name.net"`` (a pytest fixture's body: ``yield from``)."""
    package = root / "pkgs" / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "net.py").write_text(source)
    monkeypatch.syspath_prepend(str(root / "pkgs"))
    yield f"{name}.net"
    for module in (f"{name}.net", name):
        sys.modules.pop(module, None)
