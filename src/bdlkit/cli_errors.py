"""How the ``bdlkit`` command line reports what goes wrong.

- Bad input (an :class:`~bdlkit.core.errors.InputError`, or the ``ValueError``,
  ``TypeError`` and ``OSError`` that bdlkit's checks and the file system raise for it)
  is one line, ``bdlkit: error: <message>``, naming the option or file and the fix; exit
  status 2. Argument parsing errors look the same
  (:class:`~bdlkit.cli_commands.OneLineParser`).
- An interrupted run says how to resume it (exit 128 + signal, or 130); a run whose
  density or parameters became NaN says so (exit 1), and so does a data-parallel replica
  that stops because another rank of its chain refused or stopped the run
  (``bdlkit: stopped: ...``, exit 1).
- Any other exception is a bug in bdlkit: its traceback, then one line saying so and
  asking for a report (exit 1).

``BDLKIT_DEBUG=1`` re-raises instead (for a debugger, or the full traceback of bad input).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from bdlkit.cli_commands import one_line
from bdlkit.core.errors import InputError, NonFiniteError, ReplicaStopped
from bdlkit.engine.signals import Interrupted
from bdlkit.runs.config import ConfigValueError, parse_value

INPUT_ERRORS = (InputError, ValueError, TypeError, OSError)
INTERNAL_HINT = ("this is a bug in bdlkit, not in your input; please report it with the "
                 "command line and the traceback above (BDLKIT_DEBUG=1 re-raises it)")


def option_type(kind: str, name: str) -> Callable[[str], Any]:
    """The argparse ``type`` of option ``name``: ``"int"``/``"float"`` text parsed as
    :func:`~bdlkit.runs.config.parse_value` does (NaN and inf refused), ``"json"`` a JSON
    value; a bad value is an argparse error saying what the option needs."""
    def convert(text: str) -> Any:
        if kind == "json":
            try:
                return json.loads(text)
            except ValueError as err:
                raise argparse.ArgumentTypeError(
                    f"must be JSON, e.g. '{{\"hidden\": [200]}}', got {text!r} ({err})") from None
        default = {"int": 0, "float": 0.0}.get(kind, kind)
        return method_value(text, default, name)

    convert.__name__ = kind
    return convert


def method_value(text: str, default: Any, name: str) -> Any:
    """``text`` parsed for an option whose default is ``default``; an argparse error if bad."""
    try:
        return parse_value(text, default, name)
    except ConfigValueError as err:
        raise argparse.ArgumentTypeError(err.problem) from None


def relabel(err: ConfigValueError, on_command_line: set[str],
            config_file: str | None) -> ConfigValueError:
    """``err`` naming its value where the user wrote it: ``--seed ...`` when it came from
    the command line (``on_command_line``: its keys, ``hyper.lr`` for ``--lr``), else
    ``<config file>: key 'seed' ...``."""
    if err.key in on_command_line or config_file is None:
        return err.relabel(err.option)
    return err.relabel(f"{config_file}: key {err.key!r}")


def run_guarded(command: str, args: argparse.Namespace, body: Callable[[], int]) -> int:
    """``body()``, with what it raises reported as the module docstring says."""
    try:
        return body()
    except Interrupted as err:
        return _interrupted(command, err)
    except KeyboardInterrupt:
        run_dir = getattr(args, "resume", None) or getattr(args, "out", None)
        hint = (f"; if the run had started, `bdlkit fit --resume {run_dir}` continues from its "
                "newest checkpoint") if command == "fit" and run_dir else ""
        print(f"\nbdlkit: interrupted{hint}", file=sys.stderr)
        return 130
    except (NonFiniteError, ReplicaStopped) as err:
        print(f"bdlkit: stopped: {one_line(err)}", file=sys.stderr)
        return 1
    except INPUT_ERRORS as err:
        if os.environ.get("BDLKIT_DEBUG"):
            raise
        print(f"bdlkit: error: {one_line(err)}", file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 - a bug: show it, and say it is one
        if os.environ.get("BDLKIT_DEBUG"):
            raise
        traceback.print_exc()
        print(f"bdlkit: internal error ({type(err).__name__}): {INTERNAL_HINT}",
              file=sys.stderr)
        return 1


def _interrupted(command: str, err: Interrupted) -> int:
    run_dir = err.checkpoint.parent.parent if err.checkpoint else None
    print(f"\nbdlkit: {err}", file=sys.stderr)
    if command == "reference":
        print("resume with the same `bdlkit reference ...` command: finished chains are "
              "reused and interrupted ones continue", file=sys.stderr)
    elif run_dir is not None:
        print(f"resume with: bdlkit fit --resume {run_dir}", file=sys.stderr)
    return 128 + int(err.signum)
