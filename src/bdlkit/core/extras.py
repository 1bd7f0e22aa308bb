"""Optional dependencies: import one, or fail with the extra that installs it.

bdlkit's extras (``flows``: zuko, ``reference``: Pyro, ``diagnostics``: ArviZ, ``tensorboard``:
TensorBoard for :class:`~bdlkit.engine.callbacks.TensorBoardLogger`, ...) are
imported where they are used, so the core installs without them; :func:`require` gives
every such import the same error, naming what needs the package and the ``pip`` line.
"""

from __future__ import annotations

import sys
from types import ModuleType


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """``module`` imported, or an ImportError saying ``purpose`` needs it and
    ``pip install 'bdlkit[extra]'`` installs it."""
    try:
        __import__(module)  # through builtins.__import__, so tests can hide a package
    except ImportError as err:
        package = module.split(".")[0]
        raise ImportError(f"{purpose} needs {package}: pip install 'bdlkit[{extra}]'") from err
    return sys.modules[module]
