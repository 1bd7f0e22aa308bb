"""What the ``bdlkit`` command line says when a command stops before its end, and what it
kept: each message names the run folder, its last checkpoint and the command that
continues it (:func:`bdlkit.runs.launch.resume_command`: the ``torchrun`` form for a run of
several processes).

- Ctrl-C or SIGTERM during a run's steps: :class:`~bdlkit.engine.signals.Interrupted`,
  after a checkpoint (:func:`interrupted`);
- Ctrl-C or SIGTERM anywhere else (:func:`stopped`): ``bdlkit evaluate`` says which of the
  run folder's files it had rewritten (:func:`folder_state`, taken before it starts);
- another process of a multi-process run was lost: :class:`~bdlkit.core.errors.PeerLost`,
  one line (:func:`peer_lost`).

``torchrun`` SIGTERMs the other ranks as soon as one exits: a SIGTERM that arrives while
an ``Interrupted`` or a ``PeerLost`` is being raised is reported as that one
(:func:`stopped`).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from pathlib import Path

from bdlkit.core.errors import PeerLost
from bdlkit.engine.checkpoint import latest_checkpoint
from bdlkit.engine.signals import Interrupted, SignalStop
from bdlkit.runs.launch import chain_folders, processes, resume_command

#: a file's state as :func:`folder_state` records it: (modification time in ns, size)
FileState = tuple[int, int]


def run_folder(command: str, args: argparse.Namespace) -> str | None:
    """The run folder a ``fit`` (``--resume R`` or ``--out R``) or ``evaluate R`` works on."""
    if command == "fit":
        return args.resume or args.out
    return args.run_dir if command == "evaluate" else None


def interrupted(command: str, args: argparse.Namespace, err: Interrupted) -> int:
    """A run stopped by Ctrl-C/SIGTERM after a checkpoint: where it is and how to go on."""
    print(f"\nbdlkit: {err}", file=sys.stderr)
    if command == "reference":
        print("resume with the same `bdlkit reference ...` command: finished chains are "
              "reused and interrupted ones continue", file=sys.stderr)
    elif err.checkpoint is not None:
        run_dir = run_folder(command, args) or err.checkpoint.parent.parent
        print(f"resume with: {resume_command(run_dir)}", file=sys.stderr)
    return 128 + int(err.signum)


def stopped(command: str, args: argparse.Namespace, err: KeyboardInterrupt,
            before: dict[str, FileState] | None) -> int:
    """A command stopped at once by Ctrl-C or SIGTERM (outside a run's steps), or while it
    was raising the stop it reports then; ``before``: the run folder's :func:`folder_state`
    when ``evaluate`` started."""
    first = raised_over(err)
    if isinstance(first, Interrupted):
        return interrupted(command, args, first)
    if isinstance(first, PeerLost):
        return peer_lost(command, args, first)
    signum = err.signum if isinstance(err, SignalStop) else signal.SIGINT
    by = f" by {signal.Signals(signum).name}"
    folder = run_folder(command, args)
    if command == "evaluate" and folder is not None and before is not None:
        changed = [name for name, state in folder_state(folder).items()
                   if before.get(name) != state]
        kept = (f"nothing in {folder} was changed" if not changed else
                f"{', '.join(changed)} in {folder} were rewritten, the rest is the earlier "
                "evaluation's")
        print(f"\nbdlkit: evaluation of {folder} interrupted{by}: {kept}; run `bdlkit "
              f"evaluate {shlex.quote(str(folder))}` (with the same options) again",
              file=sys.stderr)
    elif command == "fit" and folder is not None:
        print(f"\nbdlkit: interrupted{by}; if the run had started, `{resume_command(folder)}` "
              "continues from its newest checkpoint", file=sys.stderr)
    else:
        print(f"\nbdlkit: interrupted{by}", file=sys.stderr)
    return 128 + int(signum)


def folder_state(folder: str | Path) -> dict[str, FileState]:
    """The files directly in ``folder`` (what ``evaluate`` rewrites: metrics, report,
    figures; not hidden ones), by name, with their modification time and size."""
    try:
        found = [p for p in Path(folder).iterdir() if p.is_file() and p.name[0] != "."]
        return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(found)}
    except OSError:  # no folder (evaluate refuses it) or a file removed meanwhile
        return {}


def raised_over(err: BaseException) -> BaseException | None:
    """The :class:`Interrupted` or :class:`~bdlkit.core.errors.PeerLost` that was being
    raised when ``err`` was (the launcher's SIGTERM arriving meanwhile), if any."""
    for _ in range(8):
        err = err.__context__
        if err is None or isinstance(err, (Interrupted, PeerLost)):
            return err
    return None


def peer_lost(command: str, args: argparse.Namespace, err: PeerLost) -> int:
    """One line: the lost rank, this rank's chain's last checkpoint and the torchrun command
    that resumes the run."""
    folder = run_folder(command, args)
    if command == "fit" and folder is not None:
        chains, data_parallel = chain_folders(folder), processes(folder)[0]
        chain = chains[min(err.rank // max(1, data_parallel), len(chains) - 1)]
        newest = latest_checkpoint(chain / "checkpoints")
        then = (f"last checkpoint {newest}; resume with: {resume_command(folder)}" if newest
                else "no checkpoint was written yet: start the run again (the same torchrun "
                "command, with --overwrite)")
    elif command == "meta-train":
        then = ("run the same torchrun command again: meta-training continues from the last "
                "checkpoint in its --out folder")
    else:
        then = "run the same command again"
    print(f"bdlkit: stopped: {err}; {then}", file=sys.stderr)
    return 1
