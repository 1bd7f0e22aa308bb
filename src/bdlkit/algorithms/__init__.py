"""Inference algorithms, one per file, each with ``build(problem, **hyper)``.

``METHODS`` maps a method name to its module (which defines ``KIND`` and
``build``); later capabilities add files here.
"""

from __future__ import annotations

from types import ModuleType

from . import map as map_
from . import sgld

METHODS: dict[str, ModuleType] = {"map": map_, "sgld": sgld}
DESCRIPTIONS: dict[str, str] = {
    "map": "MAP point estimate with Adam or SGD (a deterministic baseline)",
    "sgld": "stochastic gradient Langevin dynamics (Welling & Teh 2011)",
}


def kind_of(name: str) -> str:
    """``"optimizer"``, ``"sampler"`` or ``"vi"``: what method ``name`` produces."""
    return get_method(name).KIND


def get_method(name: str) -> ModuleType:
    """The module implementing ``name``; unknown names list the valid ones."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; valid methods: {', '.join(sorted(METHODS))}")
    return METHODS[name]
