"""How the ``bdlkit`` command line reports what goes wrong.

- Bad input (an :class:`~bdlkit.core.errors.InputError`, or the ``ValueError``,
  ``TypeError`` and ``OSError`` that bdlkit's checks and the file system raise for it)
  is one line, ``bdlkit: error: <message>``, naming the option or file and the fix; exit
  status 2. Argument parsing errors look the same
  (:class:`~bdlkit.cli_commands.OneLineParser`); a full disk names the file it could not
  write and how to go on (:func:`no_space`).
- An interrupted run says how to resume it (exit 128 + signal, or 130): SIGTERM stops a
  command as Ctrl-C does (:mod:`bdlkit.cli_stops`: the ``torchrun`` resume command for a
  run of several processes; what an interrupted ``evaluate`` had changed). A run whose
  density or parameters became NaN says so (exit 1), and so does a data-parallel replica
  that stops because another rank of its chain refused or stopped the run, or because
  another rank's process was lost (``bdlkit: stopped: ...``, exit 1: the lost rank, the
  last checkpoint and the resume command).
- Any other exception is a bug in bdlkit: its traceback, then one line saying so and
  asking for a report (exit 1).

``BDLKIT_DEBUG=1`` re-raises instead (for a debugger, or the full traceback of bad input).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bdlkit import cli_stops
from bdlkit.cli_commands import one_line
from bdlkit.core.errors import InputError, NonFiniteError, PeerLost, ReplicaStopped
from bdlkit.engine.checkpoint import latest_checkpoint
from bdlkit.engine.signals import Interrupted, stops_raise
from bdlkit.runs import launch
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
    folder = cli_stops.run_folder(command, args) if command == "evaluate" else None
    before = cli_stops.folder_state(folder) if folder is not None else None
    with stops_raise() as ending:
        try:
            try:
                return body()
            finally:
                ending()  # from here on no launcher's SIGTERM cuts the report short
        except Interrupted as err:
            return cli_stops.interrupted(command, args, err)
        except KeyboardInterrupt as err:
            return cli_stops.stopped(command, args, err, before)
        except PeerLost as err:
            return cli_stops.peer_lost(command, args, err)
        except (NonFiniteError, ReplicaStopped) as err:
            print(f"bdlkit: stopped: {one_line(err)}", file=sys.stderr)
            return 1
        except INPUT_ERRORS as err:
            if os.environ.get("BDLKIT_DEBUG"):
                raise
            message = (no_space(command, args, err) if isinstance(err, OSError)
                       and err.errno == errno.ENOSPC else one_line(err))
            print(f"bdlkit: error: {message}", file=sys.stderr)
            return 2
        except Exception as err:  # noqa: BLE001 - a bug: show it, and say it is one
            if os.environ.get("BDLKIT_DEBUG"):
                raise
            traceback.print_exc()
            print(f"bdlkit: internal error ({type(err).__name__}): {INTERNAL_HINT}",
                  file=sys.stderr)
            return 1


def no_space(command: str, args: argparse.Namespace, err: OSError) -> str:
    """The line for a full disk (``[Errno 28]``): the file that could not be written and
    how to go on once space is freed (a ``fit`` with a checkpoint: the command that resumes
    it, :func:`bdlkit.runs.launch.resume_command`)."""
    where = f" writing {err.filename}" if err.filename else ""
    then = "run the command again"
    if command == "fit" and (getattr(args, "resume", None) or getattr(args, "out", None)):
        run_dir = Path(args.resume or args.out)
        saved = any(latest_checkpoint(folder / "checkpoints") is not None
                    for folder in launch.chain_folders(run_dir))
        then = (f"`{launch.resume_command(run_dir)}` continues from its newest checkpoint"
                if saved else f"run the command again with --overwrite ({run_dir} "
                "has no checkpoint yet)")
    elif command == "evaluate":
        then = f"run `bdlkit evaluate {args.run_dir}` again"
    return f"no space left on the device{where}: free some space, then {then}"
