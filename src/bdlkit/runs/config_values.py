"""Checks of single option values: what :class:`~bdlkit.runs.config.RunConfig`, a method's
hyperparameters, the command line and the YAML readers accept.

Each check parses text (YAML and the CLI may give numbers as strings), checks the value's
type and range and raises a :class:`ConfigValueError` naming the key and what it needs.
Kept apart from :mod:`bdlkit.runs.config` (which declares the options) so that each file
reads as one thing.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

from bdlkit.algorithms.options import Option
from bdlkit.core.errors import InputError
from bdlkit.core.value_range import UPPER_BOUNDS, number_problem, positive_problem

DEVICES = "cpu, cuda, cuda:N (N a visible GPU) or mps"
INT_MAX = 2**63 - 1  # torch's int64: a larger seed or count overflows
INT_LOW = {"burnin": 0, "seed": 0}  # every other integer option counts something: >= 1
#: the most CPU threads a run may ask for. Fixed, not the machine's core count, so that a
#: run's config.yaml reads back on any machine (evaluate, compare, a resume elsewhere with
#: --accept threads); above the hardware threads of any one machine today (two 192-core
#: CPUs with SMT: 768). torch starts every thread it is told to (100000 crash it).
MAX_THREADS = 1024
#: the integer options with an upper bound below INT_MAX, each with its bound and why
INT_HIGH = {"threads": (MAX_THREADS, "torch starts that many CPU threads; more than any "
                        "one machine has only slows the steps")}
SIMPLE_TYPES = {"int", "float", "bool", "str", "None", "Literal"}  # what YAML can spell


class ConfigValueError(InputError):
    """A value of a :class:`~bdlkit.runs.config.RunConfig` option or method hyperparameter
    bdlkit refuses.

    ``key`` names it as a file spells it (``"seed"``, ``"hyper.lr"``) and ``problem`` says
    what is wrong (``"must be ..."``), so each reader names it its own way: the command
    line as ``--seed``, a file reader as ``exp.yaml: key 'seed'``."""

    def __init__(self, key: str, problem: str, label: str | None = None) -> None:
        super().__init__(f"{label or key} {problem}")
        self.key, self.problem, self.label = key, problem, label

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.key, self.problem, self.label)

    @property
    def option(self) -> str:
        """The command-line option — ``--seed``, ``--lr`` (for ``hyper.lr``)."""
        return "--" + self.key.split(".")[-1].replace("_", "-")

    def relabel(self, label: str) -> ConfigValueError:
        """The same error, naming the value as ``label`` (``"--seed"``, ``"x.yaml: key 'seed'"``)."""
        return ConfigValueError(self.key, self.problem, label)


def field_kind(f: dataclasses.Field) -> tuple[str, bool]:
    """``("int", True)`` for ``int | None``: the base type's name and whether None is allowed."""
    text = str(f.type)
    return text.split(" ")[0].split("[")[0], "None" in text


def checked_field(f: dataclasses.Field, value: Any) -> Any:
    """``value`` of field ``f`` parsed (YAML and the CLI may give numbers as text) and
    checked against the field's type and range."""
    kind, optional = field_kind(f)
    if value is None and (optional or kind == "dict"):
        return {} if kind == "dict" else None
    if kind == "int":
        return checked_int(f.name, value, INT_LOW.get(f.name, 1), INT_HIGH.get(f.name))
    if kind == "float":
        return checked_positive(f.name, value, high=UPPER_BOUNDS.get(f.name))
    if kind == "dict":
        return checked_mapping(f.name, value)
    if kind == "list":
        return checked_changes(f.name, value)
    if kind == "bool":
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, bool):
            raise ConfigValueError(f.name, f"must be true or false, got {value!r}")
        return value
    if not isinstance(value, str):
        raise ConfigValueError(f.name, f"must be a string, got {value!r}")
    return value


def checked_changes(name: str, value: Any) -> list[dict[str, Any]]:
    """The ``changes`` record: a list of ``{step, option, from, to}`` mappings."""
    if value is None:
        return []
    keys = {"step", "option", "from", "to"}
    if not isinstance(value, list) or not all(isinstance(c, dict) and set(c) == keys
                                              and isinstance(c["option"], str) for c in value):
        raise ConfigValueError(name, f"must be a list of {{step, option, from, to}} records "
                               f"(written by --resume), got {value!r}")
    return [dict(c) for c in value]


def checked_int(name: str, value: Any, low: int, high: tuple[int, str] | None = None) -> int:
    """An integer >= ``low``, and <= ``high[0]`` (whose text ``high[1]`` says why) when
    given, else <= ``INT_MAX`` (2**63 - 1)."""
    if isinstance(value, str):
        value = parse_value(value, 0, name)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ConfigValueError(name, f"must be an integer >= {low}, got {value!r}")
    if high is not None and value > high[0]:
        raise ConfigValueError(name, f"must be an integer in [{low}, {high[0]}] ({high[1]}), "
                               f"got {value!r}")
    if value > INT_MAX:
        raise ConfigValueError(name, f"must be an integer in [{low}, 2**63 - 1], got {value!r}")
    return int(value)


def checked_positive(name: str, value: Any, high: tuple[float, str] | None = None) -> Any:
    """A number > 0 in bdlkit's range of float values (:mod:`bdlkit.core.value_range`:
    [1e-15, 1e15]), and <= ``high[0]`` (whose text ``high[1]`` says why) when given."""
    bound, why = high if high else (None, None)
    if isinstance(value, str):
        try:
            value = parse_value(value, 0.0, name)
        except ConfigValueError:
            pass  # not a number: refused below, naming the text
    problem = positive_problem(value, bound, why)
    if problem:
        raise ConfigValueError(name, problem)
    return value


def checked_mapping(name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigValueError(name, "must be a mapping of option names to values (a JSON "
                               f"object or YAML mapping), got {value!r}")
    for key in value:
        if not isinstance(key, str):
            raise ConfigValueError(name, f"must have option names (strings) as keys, got "
                                   f"{key!r}")
    return dict(value)


def checked_option(name: str, value: Any, default: Any, option: Option | None) -> Any:
    key = f"hyper.{name}"
    if isinstance(value, str):
        value = parse_value(value, default, key)
        if isinstance(value, str):  # text, e.g. optimizer: adam
            return value
    parts = option.parts if option else set()
    checkable = bool(parts) and parts <= SIMPLE_TYPES
    numeric = bool(parts & {"int", "float"})
    if value is None:
        if default is None or "None" in parts or not parts:
            return value
        raise ConfigValueError(key, f"must be set (got null); its default is {default!r}")
    if isinstance(value, bool):
        if numeric and "bool" not in parts:
            raise ConfigValueError(key, f"must be a number, got {value!r}")
        return value
    if isinstance(value, numbers.Real):
        if checkable and not numeric:
            raise ConfigValueError(key, f"must be {describe(parts, option)}, got {value!r}")
        takes_float = "float" in parts or (not parts and isinstance(default, float))
        return checked_number(key, value, default, int_only=checkable and parts & {
            "int", "float"} == {"int"}, takes_float=takes_float)
    if checkable:
        raise ConfigValueError(key, f"must be {describe(parts, option)}, got {value!r}")
    return value


def checked_number(key: str, value: Any, default: Any, int_only: bool,
                   takes_float: bool = False) -> Any:
    """A number is finite (``inf`` only where the default is: score_vi's max_step), within
    int64 and an integer where only integers are allowed; the value of a float option
    (``takes_float``) is also in bdlkit's range (:mod:`bdlkit.core.value_range`)."""
    infinite_default = isinstance(default, float) and math.isinf(default)
    if takes_float and (problem := number_problem(value, infinite=infinite_default)):
        raise ConfigValueError(key, problem)
    if isinstance(value, numbers.Integral):
        if not -INT_MAX - 1 <= value <= INT_MAX:
            raise ConfigValueError(key, f"must be between -2**63 and 2**63 - 1, got {value!r}")
        return value
    number = float(value)
    if math.isnan(number) or (math.isinf(number) and not infinite_default):
        raise ConfigValueError(key, f"must be a finite number, got {value!r}")
    if int_only:
        raise ConfigValueError(key, f"must be an integer, got {value!r}")
    return value


def describe(parts: set[str], option: Option | None) -> str:
    """``"an integer or null"``: the values an annotation of simple types allows."""
    words = {"int": "an integer", "float": "a number", "bool": "true or false",
             "str": "a string", "None": "null"}
    out = [words[p] for p in sorted(parts) if p in words]
    if "Literal" in parts and option is not None and option.choices:
        out.insert(0, "one of " + ", ".join(repr(c) for c in option.choices))
    return " or ".join(out)


def parse_value(text: str, default: Any, name: str = "value") -> Any:
    """Convert a command-line or YAML string to the type of ``default`` (numbers, booleans);
    other strings are kept (e.g. ``optimizer: adam``). A number must be finite (``inf`` only
    where the default is infinite); bad text raises :class:`ConfigValueError` naming ``name``."""
    if isinstance(default, bool):
        if text.lower() not in ("true", "false"):
            raise ConfigValueError(name, f"must be true or false, got {text!r}")
        return text.lower() == "true"
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            raise ConfigValueError(name, f"must be an integer (digits only: no point or "
                                   f"exponent), got {text!r}") from None
    number = as_number(text)
    if number is None:
        if isinstance(default, float):
            raise ConfigValueError(name, f"must be a number, got {text!r}")
        return text
    if not math.isfinite(number) and not (isinstance(default, float) and math.isinf(default)):
        if isinstance(default, str):  # a string option: 'inf' may be a file name
            return text
        raise ConfigValueError(name, f"must be a finite number, got {text!r}")
    return float(number) if isinstance(default, float) else number


def as_number(text: str) -> int | float | None:
    """``text`` as an int, else a float, else None."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return None


def check_device(device: Any) -> None:
    """Raise :class:`ConfigValueError` (key ``device``) unless ``device`` is one bdlkit can
    run on here: cpu, cuda or cuda:N (a GPU torch sees), or mps where it is available."""
    import torch

    if not isinstance(device, str):
        raise ConfigValueError("device", f"must be a string ({DEVICES}), got {device!r}")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigValueError("device", f"{device!r} is not a torch device ({reason}); use "
                               f"{DEVICES}") from None
    if dev.type not in ("cpu", "cuda", "mps"):
        why = " (meta tensors hold no values: nothing can be trained on them)" if (
            dev.type == "meta") else ""
        raise ConfigValueError("device", f"{device!r} is not a device bdlkit runs on{why}; "
                               f"use {DEVICES}")
    if dev.type == "cuda":
        _check_cuda(device, dev.index)
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigValueError("device", f"{device!r} asked for, but MPS is not available "
                               "here; use cpu")


def _check_cuda(device: str, index: int | None) -> None:
    import torch

    if not torch.cuda.is_available():
        raise ConfigValueError("device", f"{device!r} asked for, but torch sees no CUDA GPU; "
                               "use cpu")
    count = torch.cuda.device_count()
    if index is not None and index >= count:
        raise ConfigValueError("device", f"{device!r}: only {count} GPU(s) visible, cuda:0 "
                               f"to cuda:{count - 1}; pick one of them, or cpu")
