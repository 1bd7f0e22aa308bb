"""Exceptions and warning categories shared across bdlkit (kept free of imports so any
module can raise them). The warning categories let a user filter one kind of warning,
e.g. ``warnings.simplefilter("ignore", bdlkit.core.errors.NotConvergedWarning)``."""

from __future__ import annotations

import sys
from pathlib import Path


class InputError(ValueError):
    """Input bdlkit refuses: a data file, option, configuration or saved file it cannot use.

    The message names the file or option and the fix. The command line prints it as one
    line and exits with status 2; the loaders and parsers raise it (or a subclass) for any
    bad input, never another exception."""


class DataError(InputError):
    """A data set breaks a contract: shapes across splits, labels, sizes or value range."""


class CorruptFileError(InputError):
    """A bdlkit file could not be read back (truncated, corrupt, edited or from another run)."""


class NonFiniteError(FloatingPointError):
    """The log density or the parameters became NaN or infinite during inference."""


class ReplicaStopped(RuntimeError):
    """A data-parallel replica stops because another rank of its chain refused or stopped
    the run; that rank's message says why."""


class PeerLost(RuntimeError):
    """Another process of a multi-process run ended (killed, out of memory, crashed) or
    stopped answering while this one waited for it in a collective (an all-reduce,
    broadcast or barrier of ``torch.distributed``). Not a bug in bdlkit, and nothing is
    lost that the run's last checkpoint holds: the command line reports it as one line
    naming the lost rank, the last checkpoint and the ``torchrun`` command that resumes
    the run (``docs/distributed.md``).

    Args:
        rank: this process's global rank.
        lost: the global ranks of which one was lost (a single one when that is knowable:
            the other rank of a group of two; empty when unknown).
        detail: what the communication backend said (e.g. gloo's "Connection closed by
            peer [127.0.0.1]:37504").
    """

    def __init__(self, rank: int, lost: tuple[int, ...] = (), detail: str = "") -> None:
        self.rank, self.lost, self.detail = rank, tuple(lost), detail
        who = ("another rank" if not lost else f"rank {lost[0]}" if len(lost) == 1
               else "one of ranks " + ", ".join(str(r) for r in lost))
        said = f" ({detail})" if detail else ""
        super().__init__(f"{who} of this run was lost while rank {rank} waited for it: its "
                         f"process ended (killed, out of memory or crashed; its own output "
                         f"says why) or stopped answering{said}")

    def __reduce__(self) -> tuple:  # picklable, e.g. from a worker process
        return (PeerLost, (self.rank, self.lost, self.detail))


class RecoveryWarning(UserWarning):
    """bdlkit recovered from damage: a damaged or diverged checkpoint was set aside and the
    run continues from an earlier one (the message names both files)."""


class VIWarning(UserWarning):
    """A VI run finished but its approximation should not be trusted as it is."""


class DataWarning(UserWarning):
    """A data set loads but looks wrong for training as it is: values far from unit scale,
    classes that never occur in the training labels, or a single training class."""


class DefaultsWarning(UserWarning):
    """Said before a run: one of bdlkit's defaults is known not to serve this problem (a
    method on a kind of problem it fails on, inputs far from the unit scale the defaults
    assume). The message names the evidence (``bdlkit bench defaults``) and the fix."""


class InputScaleWarning(DataWarning, DefaultsWarning):
    """Training inputs far from the unit scale bdlkit's defaults assume (a data warning
    that is also a defaults warning)."""


class PointEstimateWarning(VIWarning):
    """A VI run's σ barely moved from ``init_std``: q is still close to a point estimate."""


class NotConvergedWarning(VIWarning):
    """A VI run's approximation was still moving over its last quarter of steps."""


def caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning raised here at the first frame outside
    bdlkit (the user's line), however deep inside the package it is raised (Python 3.11
    has no ``warnings.warn(skip_file_prefixes=...)``)."""
    package = str(Path(__file__).resolve().parent.parent)
    frame, level = sys._getframe(1), 1  # the frame that calls warnings.warn
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(package):
        frame, level = frame.f_back, level + 1
    return level
