"""Command-line usability (issue 20 item 6): did-you-mean for misspelt method, model and
data names, the ``py.typed`` marker, a throttled progress bar when stderr is not a
terminal, and ``--model package.module:Name`` networks of the user's own."""

from __future__ import annotations

import importlib.resources
import io
import os
import re
import subprocess
import sys

import pytest

from bdlkit import algorithms, data, models
from bdlkit.core.errors import InputError
from test_cli_errors import _assert_one_error_line, _run

QUICK = ["--steps", "2", "--no-progress"]


# ---------------------------------------------------------------- 1. did you mean ...?
def test_python_api_suggests_the_closest_method_model_and_data_set():
    with pytest.raises(InputError, match=r"unknown method 'scorevi' \(did you mean score_vi\?\)"
                       ) as info:
        algorithms.get_method("scorevi")
    assert all(name in str(info.value) for name in algorithms.METHODS)  # still listed
    for build in (lambda: models.build_model("mpl"),
                  lambda: models.build_for_data("mpl", (64,), 10)):
        with pytest.raises(InputError, match=r"unknown model 'mpl' \(did you mean mlp\?\)"
                           ) as info:
            build()
        assert all(name in str(info.value) for name in models.MODELS)
    with pytest.raises(InputError, match=r"unknown data set 'digts' \(did you mean digits\?\)"
                       ) as info:
        data.load("digts")
    assert "uci/boston" in str(info.value)


def test_no_suggestion_for_a_name_like_nothing_and_paths_keep_their_message(tmp_path):
    with pytest.raises(InputError) as info:
        algorithms.get_method("zzzzzz")
    assert "did you mean" not in str(info.value) and "valid methods" in str(info.value)
    with pytest.raises(FileNotFoundError) as missing:
        data.load(str(tmp_path / "digts.npz"))
    assert "did you mean" not in str(missing.value)


@pytest.mark.parametrize("option, value, needle", [
    ("--method", "scorevi", "did you mean score_vi?"),
    ("--model", "mpl", "did you mean mlp?"),
    ("--data", "digts", "did you mean digits?"),
])
def test_cli_misspelt_name_is_one_line_with_a_suggestion(option, value, needle, tmp_path,
                                                         capsys):
    argv = ["fit", *(["--method", "map"] if option != "--method" else []), option, value,
            "--out", str(tmp_path / "r"), *QUICK]
    rc = _run(argv)
    _assert_one_error_line(rc, capsys.readouterr().err, [needle, repr(value)])


def test_cli_misspelt_method_with_its_options_names_the_method(tmp_path, capsys):
    rc = _run(["fit", "--method", "scorevi", "--lr", "0.1", "--out", str(tmp_path / "r"),
               *QUICK])
    _assert_one_error_line(rc, capsys.readouterr().err, ["did you mean score_vi?"])


# ---------------------------------------------------------------- 2. py.typed
def test_the_package_is_marked_typed():
    marker = importlib.resources.files("bdlkit") / "py.typed"
    assert marker.is_file()


# ---------------------------------------------------------------- 3. progress in a pipe
def _updates(stderr: str) -> list[str]:
    """The progress bar's states: tqdm separates its redraws with carriage returns."""
    return [part for part in re.split(r"[\r\n]", stderr) if "it/s" in part or "?it" in part]


def test_piped_fit_writes_a_few_progress_updates_not_one_per_step(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TQDM_")}
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "bdlkit.cli", "fit", "--method", "map",
         "--steps", "200", "--data", "digits", "--model-kwargs", '{"hidden": [8]}',
         "--out", str(tmp_path / "r")],
        env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300,
        check=False)
    assert proc.returncode == 0, proc.stderr
    updates = _updates(proc.stderr)
    assert 1 <= len(updates) <= 5, updates
    assert "200/200" in updates[-1]  # the final state is still written


def test_progress_is_untouched_on_a_terminal_or_with_tqdm_mininterval_set(monkeypatch):
    from bdlkit import cli
    from bdlkit.engine import runner

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    original = runner.tqdm
    with cli._progress_for_stream(Terminal()):
        assert runner.tqdm is original
    with cli._progress_for_stream(io.StringIO()):
        assert runner.tqdm is not original
        assert runner.tqdm.keywords == {"mininterval": cli.NON_TTY_MININTERVAL}
    assert runner.tqdm is original
    monkeypatch.setenv("TQDM_MININTERVAL", "1")
    with cli._progress_for_stream(io.StringIO()):
        assert runner.tqdm is original
