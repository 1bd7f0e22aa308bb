"""A fast start: ``import bdlkit`` and ``bdlkit --help`` without torch, the public names
imported on first use, and the entry point's command list equal to the full parser's."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

import bdlkit
from bdlkit import cli_commands


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    return set(done.stdout.split())


def test_import_bdlkit_loads_no_torch():
    loaded = _modules_after("import bdlkit")
    assert "torch" not in loaded and "numpy" not in loaded


def test_top_level_help_loads_no_torch():
    code = ("from bdlkit.cli_commands import main\ntry:\n    main(['--help'])\n"
            "except SystemExit as e:\n    assert e.code == 0")
    loaded = _modules_after(code)
    assert "torch" not in loaded and "bdlkit.cli" not in loaded


@pytest.mark.parametrize("name", bdlkit.__all__)
def test_every_public_name_resolves_to_its_defining_object(name):
    value = getattr(bdlkit, name)
    if name in bdlkit._LAZY:  # noqa: SLF001 (the table under test)
        module = importlib.import_module(bdlkit._LAZY[name])  # noqa: SLF001
        assert value is (module if module.__name__.endswith("." + name)
                         else getattr(module, name))
    assert name in dir(bdlkit)


def test_a_subpackage_is_an_attribute_after_a_plain_import():
    names = ("problems", "diagnostics", "evaluation", "runs", "engine", "families")
    code = "import bdlkit\n" + "".join(f"print(bdlkit.{n}.__name__)\n" for n in names)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == [f"bdlkit.{n}" for n in names]


def test_infer_stays_the_function_after_its_module_is_imported():
    importlib.import_module("bdlkit.infer")
    assert callable(bdlkit.infer) and bdlkit.infer.__name__ == "infer"


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Targt'"):
        bdlkit.Targt  # noqa: B018


def test_the_full_parser_has_the_entry_points_commands_and_help():
    from bdlkit.cli import build_parser

    parser = build_parser()[0]
    sub = next(a for a in parser._actions  # noqa: SLF001
               if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    assert list(sub.choices) == list(cli_commands.COMMANDS)
    helps = {c.dest: c.help for c in sub._choices_actions}  # noqa: SLF001
    assert helps == cli_commands.COMMANDS


def test_a_misspelt_command_is_one_line_with_a_suggestion(capsys):
    with pytest.raises(SystemExit) as info:
        cli_commands.main(["fti", "--method", "sgld"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "did you mean 'fit'?" in err and err.count("\n") == 1


def test_no_command_is_one_line_naming_the_help(capsys):
    with pytest.raises(SystemExit) as info:
        cli_commands.main([])
    assert info.value.code == 2
    assert "bdlkit --help" in capsys.readouterr().err


def test_a_command_goes_to_the_full_command_line(capsys):
    assert cli_commands.main(["list"]) == 0
    assert "methods:" in capsys.readouterr().out
