"""Which network parameters are Bayesian.

``bayesian=`` accepts:

- ``"all"``: every parameter;
- ``"last_layer"``: the parameters of the last module (in registration order) that
  owns parameters directly;
- a list of names or ``fnmatch`` patterns (``["fc.*", "head.weight"]``); a name also
  selects everything below it (``"layer3"`` selects ``layer3.0.conv1.weight``);
- a module type or tuple of types (``nn.Linear``): parameters owned by such modules;
- a callable ``(name, parameter) -> bool``;
- a group the module declares in a ``parameter_groups`` mapping (group name → names or
  patterns), alone or in a list: Koopa declares ``"operators"``, ``"decoders"``,
  ``"head"`` and ``"last_block"`` (:class:`bdlkit.models.Koopa`).

Unselected parameters stay deterministic at their current values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase
from typing import Any

from torch import Tensor, nn

Selection = str | Sequence[str] | type | tuple[type, ...] | Callable[[str, Tensor], bool]


def _owned(module: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in module.named_modules() if any(True for _ in m.parameters(False))]


def select_parameters(module: nn.Module, bayesian: Selection = "all",
                      option: str = "bayesian") -> list[str]:
    """Names (as in ``module.named_parameters()``) of the parameters ``bayesian`` selects;
    ``option`` is the option's name in the error messages (``flow_on`` for a flow)."""
    names = [n for n, _ in module.named_parameters()]
    if not names:
        raise ValueError("the module has no parameters")
    chosen: list[str]
    groups: dict[str, tuple[str, ...]] = dict(getattr(module, "parameter_groups", {}))
    if isinstance(bayesian, str) and bayesian in groups:
        bayesian = groups[bayesian]
    elif (isinstance(bayesian, Sequence) and not isinstance(bayesian, str)
          and all(isinstance(p, str) for p in bayesian)):
        bayesian = [q for p in bayesian for q in groups.get(p, (p,))]
    if isinstance(bayesian, str) and bayesian == "all":
        chosen = names
    elif isinstance(bayesian, str) and bayesian == "last_layer":
        prefix, last = _owned(module)[-1]
        chosen = [f"{prefix}.{n}" if prefix else n for n, _ in last.named_parameters(recurse=False)]
    elif isinstance(bayesian, type) or (
        isinstance(bayesian, tuple) and all(isinstance(t, type) for t in bayesian)
    ):
        chosen = [
            f"{prefix}.{n}" if prefix else n
            for prefix, m in _owned(module)
            if isinstance(m, bayesian)
            for n, _ in m.named_parameters(recurse=False)
        ]
    elif callable(bayesian):
        params = dict(module.named_parameters())
        chosen = [n for n in names if bayesian(n, params[n])]
    elif isinstance(bayesian, Sequence) and not isinstance(bayesian, str):
        chosen = [n for n in names if any(_matches(n, p) for p in bayesian)]
        unused = [p for p in bayesian if not any(_matches(n, p) for n in names)]
        if unused:
            raise ValueError(
                f"{option}= patterns {unused} match no parameter; names look like {names[:4]}"
            )
    else:
        raise ValueError(
            f"{option}= must be 'all', 'last_layer', a list of names/patterns, module type(s) "
            f"or a callable, got {bayesian!r}"
        )
    if not chosen:
        raise ValueError(f"{option}={bayesian!r} selects no parameter; names look like "
                         f"{names[:4]}")
    return chosen


def parameter_selection(value: Any, option: str = "bayesian") -> str | tuple[str, ...]:
    """A selection as the command line or a config gives it: ``"all"`` and ``"last_layer"``
    stay as they are; a comma-separated string or a list becomes a tuple of names, patterns
    or module groups (expanded by :func:`select_parameters`). ``option`` names the option in
    the errors (``bayesian``, ``flow_on``)."""
    if isinstance(value, str) and value in ("all", "last_layer"):
        return value
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{option} must be 'all', 'last_layer' or parameter names/patterns "
                         f"(comma-separated), got {value!r}")
    names = tuple(n.strip() for n in names if n.strip())
    if not names:
        raise ValueError(f"{option} names no parameter: give 'last_layer', 'all' or names")
    return names


def _matches(name: str, pattern: Any) -> bool:
    return name == pattern or name.startswith(f"{pattern}.") or fnmatchcase(name, pattern)
