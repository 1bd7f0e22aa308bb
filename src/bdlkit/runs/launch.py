"""How a run folder is laid out across processes, and the one command that continues it.

A run of one process, or of N data-parallel processes, is one folder ``R``; a
``--chain-groups G`` run is ``OUT`` holding one run folder per chain, ``OUT/chain-g``
(:func:`bdlkit.core.lock.chain_name`). Every message that tells the user how to go on
(an interrupted or stopped run, a lost rank, a full disk, a refused resume and its
``--accept`` fix) builds its command with :func:`resume_command`, which knows both the
``torchrun`` form and the top folder a chain's folder belongs to.

Only ``config.yaml`` is read here (no data, no network), so the module sits below
:mod:`bdlkit.runs.run_record` and :mod:`bdlkit.runs.ranks`, which both use it.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from pathlib import Path

from bdlkit.core.errors import InputError
from bdlkit.core.lock import chain_name, own_chain
from bdlkit.runs.yaml_files import load_yaml


def first_config_dir(run_dir: str | Path) -> Path:
    """The folder holding the (first chain's) ``config.yaml`` of the run in ``run_dir``."""
    run_dir = Path(run_dir)
    first = run_dir / chain_name(0)
    return first if first.is_dir() and not (run_dir / "config.yaml").exists() else run_dir


def top_folder(folder: str | Path) -> Path:
    """The folder a resume names for the run ``folder`` belongs to: ``OUT`` for a chain's
    folder ``OUT/chain-g`` of a chain-groups run, else ``folder`` itself."""
    folder = Path(folder)
    return folder.parent if own_chain(folder.parent, folder) else folder


def processes(run_dir: str | Path) -> tuple[int, int]:
    """``(data_parallel, chain_groups)`` of the run in ``run_dir`` (its ``config.yaml``,
    the first chain's for a chain-groups run); before that is written, or where it
    cannot be read, this launch's (``WORLD_SIZE`` processes, one chain)."""
    try:
        values = load_yaml(first_config_dir(run_dir) / "config.yaml")
        return int(values.get("data_parallel") or 1), int(values.get("chain_groups") or 1)
    except (InputError, OSError, ValueError, TypeError):
        return int(os.environ.get("WORLD_SIZE", "1")), 1


def chain_folders(run_dir: str | Path) -> list[Path]:
    """The run folders of the run in ``run_dir`` (or a chain's folder): its top folder for
    one chain, else each chain's ``chain-g`` in it."""
    top = top_folder(run_dir)
    chain_groups = processes(top)[1]
    return [top] if chain_groups == 1 else [top / chain_name(g) for g in range(chain_groups)]


def resume_command(run_dir: str | Path, *, threads: int | None = None,
                   accept: Iterable[str] = ()) -> str:
    """The command that continues the run in ``run_dir`` (its top folder, or a chain's
    folder: the command names the top folder, :func:`top_folder`).

    Args:
        run_dir: the run's folder.
        threads: ``--threads N`` to keep in the command (a resume at another count).
        accept: the fields the command accepts (``--accept F,G``).

    Returns:
        ``torchrun --nproc-per-node N -m bdlkit fit --resume R ...`` for a run of N =
        data_parallel × chain_groups processes (a resume needs the same layout), ``bdlkit
        fit --resume R ...`` for one process.
    """
    top = top_folder(run_dir)
    data_parallel, chain_groups = processes(top)
    n = data_parallel * chain_groups
    words = ["torchrun", "--nproc-per-node", str(n), "-m", "bdlkit"] if n > 1 else ["bdlkit"]
    words += ["fit", "--resume", str(top)]
    if threads is not None:
        words += ["--threads", str(threads)]
    accept = list(accept)
    if accept:
        words += ["--accept", ",".join(accept)]
    return shlex.join(words)
