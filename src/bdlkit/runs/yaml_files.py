"""Configuration files: reading a YAML mapping safely, writing one atomically.

``load_yaml`` uses ``yaml.safe_load`` (no Python object is ever constructed) and names
the file and the fix for anything it cannot use: a run directory's ``config.yaml`` that
cannot be read is corrupt (:class:`CorruptFileError`), a user's ``--config`` file is bad
input (:class:`InputError`). ``save_yaml`` writes through a temporary file and a rename.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bdlkit.core.errors import CorruptFileError, InputError
from bdlkit.core.serialization import atomic_write_bytes


def load_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """Read a YAML mapping (``yaml.safe_load``: no Python objects are constructed). A file
    that is not UTF-8 text (:class:`CorruptFileError`), not YAML or not a mapping raises
    an :class:`InputError` naming it and the fix."""
    import yaml

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"config file {path} does not exist")
    if path.is_dir():
        raise InputError(f"config file {path} is a folder; give the path of a YAML file")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorruptFileError(f"config file {path} is not UTF-8 text (byte {err.start}): it "
                               f"is binary or corrupt; {_yaml_advice(path)}") from None
    try:
        values = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as err:
        reason = " ".join(str(err).split())  # YAML errors span lines
        raise _file_error(path)(f"config file {path} is not valid YAML: {reason}; "
                                f"{_yaml_advice(path)}") from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise _file_error(path)(f"config file {path} must hold a mapping of option names to "
                                f"values, got {type(values).__name__}; {_yaml_advice(path)}")
    return values


def _in_run_directory(path: Path) -> bool:
    from bdlkit.runs.out_folder import RUN_MARKER  # late: out_folder imports report

    return path.name == "config.yaml" and (path.parent / RUN_MARKER).exists()


def _file_error(path: Path) -> type[InputError]:
    """A run directory's config.yaml that cannot be read is corrupt; a user's file is bad input."""
    return CorruptFileError if _in_run_directory(path) else InputError


def _yaml_advice(path: Path) -> str:
    if _in_run_directory(path):
        return (f"restore it from a backup, or start the run again with `bdlkit fit ... "
                f"--out {path.parent} --overwrite`")
    return "write it as UTF-8 YAML text, one `option: value` line per option"


def save_yaml(path: str | os.PathLike, values: dict[str, Any]) -> None:
    import yaml

    text = yaml.safe_dump(values, sort_keys=False, default_flow_style=None)
    atomic_write_bytes(path, text.encode())
