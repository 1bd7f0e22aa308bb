"""How ``bdlkit fit`` and ``bdlkit reference`` options come to be: one ``--option`` per
:class:`~bdlkit.runs.config.RunConfig` field, range-checked as a config file's value is;
one ``--<hyperparameter>`` per option a method's algorithm declares; and the method a
command names, found before parsing (``--method``, ``--config``, ``--resume``) so that
its options can be added. :mod:`bdlkit.cli` builds the parsers from these."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path
from typing import Any

from bdlkit.cli_errors import method_value, option_type, relabel
from bdlkit.core.lock import chain_name
from bdlkit.runs.config import ConfigValueError, RunConfig, checked_cli_value, method_options
from bdlkit.runs.yaml_files import load_yaml

#: The argparse ``dest`` prefix of a method's options (``--lr`` -> ``hyper__lr``).
HYPER_PREFIX = "hyper__"


def add_config_options(p: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """One ``--option`` per :class:`RunConfig` field (but ``hyper`` and ``skip``)."""
    for f in dataclasses.fields(RunConfig):
        if f.name == "hyper" or f.name in skip or f.metadata.get("cli") is False:
            continue
        flag = "--" + f.name.replace("_", "-")
        kind = _field_type(f)
        convert = _float_field(f.name) if kind == "float" else kind and option_type(kind, f.name)
        p.add_argument(flag, dest=f.name, type=convert,
                       default=argparse.SUPPRESS,
                       metavar=f.name.upper() if kind != "json" else "JSON",
                       help=f.metadata.get("help", "").replace("%", "%%"))


def _float_field(name: str) -> Any:
    """The argparse ``type`` of a float :class:`RunConfig` field: parsed and range-checked
    as a config file's value is, a bad one an argparse error naming the allowed range."""
    def convert(text: str) -> Any:
        try:
            return checked_cli_value(name, text)
        except ConfigValueError as err:
            raise argparse.ArgumentTypeError(err.problem) from None

    convert.__name__ = "float"
    return convert


def _field_type(f: dataclasses.Field) -> str | None:
    """``"json"``, ``"int"`` or ``"float"`` for the field's values; None for text."""
    text = str(f.type)
    if text.startswith("dict"):
        return "json"
    return next((kind for kind in ("int", "float") if text.startswith(kind)), None)


def given_keys(values: dict[str, Any]) -> set[str]:
    """The keys of ``values`` as :class:`ConfigValueError` names them (``hyper.lr``)."""
    hyper = values.get("hyper") or {}
    return {k for k in values if k != "hyper"} | {f"hyper.{k}" for k in hyper}


def run_config(values: dict[str, Any], on_command_line: set[str],
                config_file: str | None) -> RunConfig:
    """``RunConfig(**values)``; a bad value is named where it was given (:func:`relabel`)."""
    try:
        return RunConfig(**values)
    except ConfigValueError as err:
        raise relabel(err, on_command_line, config_file) from None


def add_method_options(fit: argparse.ArgumentParser, method: str) -> None:
    """Add ``--<hyperparameter>`` options of ``method``, with the help, default and allowed
    values its algorithm class declares (:func:`bdlkit.algorithms.options.options`)."""
    group = fit.add_argument_group(f"options of method {method!r}")
    for option in method_options(method).values():
        name, default = option.name, option.default
        flags = ["--" + name.replace("_", "-")] + (["--" + name] if "_" in name else [])
        group.add_argument(*flags, dest=HYPER_PREFIX + name,
                           type=lambda text, d=default, n=name: method_value(text, d, n),
                           default=argparse.SUPPRESS, metavar=name.upper(),
                           help=_option_help(option).replace("%", "%%"))


def _option_help(option: Any) -> str:
    """``"<help> (one of a, b; default x; on regression y)"``: the class's ``Args:`` line,
    its field and the defaults its kinds of problem declare."""
    notes = []
    if option.choices:
        notes.append("one of " + ", ".join(str(c) for c in option.choices))
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", option.help).replace("``", "").rstrip(".")
    if not option.required and "default" not in text:  # else the help says it already
        notes.append("default: set by the method" if option.default is None
                     else f"default {option.default!r}")
    notes += [f"on {'a Target' if kind == 'target' else kind} {value!r}"
              for kind, value in option.by_kind.items()]
    return f"{text} ({'; '.join(notes)})" if notes else text


def prescan_method(argv: list[str]) -> str | None:
    """The method named by ``--method``, in the ``--config`` file or in the ``--resume``
    run's config.yaml, before parsing."""
    files = []
    for i, arg in enumerate(argv):
        value = argv[i + 1] if i + 1 < len(argv) else None
        if arg == "--method" and value:
            return value
        if arg.startswith("--method="):
            return arg.split("=", 1)[1]
        if arg in ("--config", "--resume") and value:
            files += _run_configs(value) if arg == "--resume" else [Path(value)]
        elif arg.startswith(("--config=", "--resume=")):
            name, value = arg[2:].split("=", 1)
            files += _run_configs(value) if name == "resume" else [Path(value)]
    for path in files:
        if path.is_file():
            try:
                method = load_yaml(path).get("method")
            except (ValueError, OSError):  # cmd_fit reports it
                return None
            return method if isinstance(method, str) else None
    return None


def _run_configs(run_dir: str) -> list[Path]:
    """Where a run's config.yaml is: the run folder, or its first chain's (chain groups)."""
    return [Path(run_dir) / "config.yaml", Path(run_dir) / chain_name(0) / "config.yaml"]
