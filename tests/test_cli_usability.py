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
from bdlkit.cli import main
from bdlkit.core.errors import InputError
from cli_helpers import importable_package
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
    assert "uci/<name> (boston" in str(info.value) and "bdlkit list" in str(info.value)


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
    from bdlkit.engine import runner
    from bdlkit.runs import console

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    original = runner.tqdm
    with console.fit_progress(Terminal()):
        assert runner.tqdm is original
    with console.fit_progress(io.StringIO()):
        assert runner.tqdm is not original
        assert runner.tqdm.keywords == {"mininterval": console.NON_TTY_MININTERVAL}
    assert runner.tqdm is original
    monkeypatch.setenv("TQDM_MININTERVAL", "1")
    with console.fit_progress(io.StringIO()):
        assert runner.tqdm is original


# ---------------------------------------------------------------- 4. --model pkg.mod:Name
NET = '''
import math
from torch import nn


class Tiny(nn.Module):
    def __init__(self, input_shape, out_features, width=3):
        super().__init__()
        self.input_shape, self.width = tuple(input_shape), width
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), width),
                                  nn.Tanh(), nn.Linear(width, out_features))

    def forward(self, x):
        return self.body(x)


def not_a_module(input_shape, out_features):
    return "a string"


SIZE = 3
'''


@pytest.fixture
def user_package(tmp_path, monkeypatch):
    """``mypkg.net`` (``Tiny``, ``not_a_module``, ``SIZE``) importable from tmp_path."""
    yield from importable_package(tmp_path, monkeypatch, "mypkg", NET)


def test_python_api_builds_a_users_network(user_package):
    net = models.build_for_data("mypkg.net:Tiny", (8, 8), 10, width=5)
    assert net.input_shape == (8, 8) and net.width == 5
    assert models.build_model("mypkg.net:Tiny", input_shape=(4,), out_features=2).width == 3


def test_fit_and_evaluate_a_users_network(user_package, tmp_path, capsys):
    out = tmp_path / "r"
    argv = ["fit", "--method", "map", "--model", "mypkg.net:Tiny", "--model-kwargs",
            '{"width": 4}', "--data", "digits", "--steps", "5", "--out", str(out),
            "--no-progress"]
    assert main(argv) == 0
    config = (out / "config.yaml").read_text()
    assert "mypkg.net:Tiny" in config and "width: 4" in config
    assert main(["evaluate", str(out)]) == 0
    assert "accuracy" in capsys.readouterr().out


@pytest.mark.parametrize("model, needles", [
    ("nopkg_xyz.net:Tiny", ["cannot import module 'nopkg_xyz.net'", "PYTHONPATH",
                            "evaluated"]),
    ("mypkg.net:Tinny", ["has no attribute 'Tinny'", "did you mean Tiny?"]),
    ("mypkg.net:SIZE", ["'SIZE'", "int", "not a class or function"]),
    ("mypkg.net:not_a_module", ["returned a str", "not a torch.nn.Module"]),
    ("mypkg.net:", ["package.module:Name"]),
])
def test_a_bad_users_network_is_one_line(model, needles, user_package, tmp_path, capsys):
    rc = _run(["fit", "--method", "map", "--model", model, "--out", str(tmp_path / "r"),
               *QUICK])
    _assert_one_error_line(rc, capsys.readouterr().err, [f"--model {model}", *needles])


def test_a_users_constructor_failing_is_one_line(user_package, tmp_path, capsys):
    rc = _run(["fit", "--method", "map", "--model", "mypkg.net:Tiny", "--model-kwargs",
               '{"depth": 2}', "--out", str(tmp_path / "r"), *QUICK])
    _assert_one_error_line(rc, capsys.readouterr().err,
                           ["--model mypkg.net:Tiny", "depth", "TypeError",
                            "Name(input_shape, out_features, **model_kwargs)"])


def test_a_users_package_in_the_current_folder_needs_no_pythonpath(tmp_path, monkeypatch):
    """Issue 43, own data 7: ``--model herepkg.net:Tiny`` from the folder holding herepkg/,
    with neither that folder nor '' on sys.path (the ``bdlkit`` script's case)."""
    package = tmp_path / "here" / "herepkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "net.py").write_text(NET)
    monkeypatch.chdir(tmp_path / "here")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    try:
        net = models.build_for_data("herepkg.net:Tiny", (8, 8), 10, width=5)
        assert net.width == 5 and sys.path[-1] == str(tmp_path / "here")
    finally:
        for name in ("herepkg.net", "herepkg"):
            sys.modules.pop(name, None)
    monkeypatch.chdir(tmp_path)  # not here: the message says where it looked
    with pytest.raises(InputError, match="in the current folder, installed, or its folder on "
                       "PYTHONPATH"):
        models.build_for_data("herepkg2.net:Tiny", (8, 8), 10)


def test_cli_misspelt_data_option_is_one_line_with_a_suggestion(tmp_path, capsys):
    csv = tmp_path / "moons.csv"
    csv.write_text("a,b,label\n" + "".join(f"{i},{-i},{i % 2}\n" for i in range(20)))
    rc = _run(["fit", "--method", "map", "--data", str(csv), "--data-kwargs",
               '{"tsk": "classification"}', "--out", str(tmp_path / "r"), *QUICK])
    _assert_one_error_line(rc, capsys.readouterr().err, [
        "unknown data option 'tsk'", "did you mean 'task'?", "valid options: task, "])
    rc = _run(["fit", "--method", "map", "--data", "digits", "--standardize",
               "--out", str(tmp_path / "r"), *QUICK])
    _assert_one_error_line(rc, capsys.readouterr().err, [
        "unknown data option 'standardize' for digits", "an option of .npz/.csv files"])


def test_cli_standardize_is_recorded_with_the_files_other_data_options(tmp_path):
    import yaml

    csv = tmp_path / "wide.csv"
    csv.write_text("a,b,t\n" + "".join(f"{100 * i},{i % 7},{i * 0.5}\n" for i in range(30)))
    config = tmp_path / "exp.yaml"
    config.write_text(f"method: map\ndata: {csv}\ndata_kwargs: {{test_fraction: 0.5}}\n")
    assert main(["fit", "--config", str(config), "--standardize", "--out",
                 str(tmp_path / "r"), *QUICK]) == 0
    recorded = yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())
    assert recorded["data_kwargs"] == {"scale_uint8": True, "standardize": True,
                                       "test_fraction": 0.5}
