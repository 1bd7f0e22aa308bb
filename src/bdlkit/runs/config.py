"""Run configuration: one dataclass used by the Python API, the YAML files and the CLI.

:class:`RunConfig` holds what a ``bdlkit fit`` run needs; its fields (with their
``help`` metadata) generate the command-line options, so the CLI, ``--config`` files
and ``config.yaml`` in a run directory cannot drift apart. A method's own
hyperparameters (``lr``, ...) are the fields of its algorithm dataclass, the one place
their names, defaults, types and help are declared; ``build``'s signature is derived
from them (:mod:`bdlkit.algorithms.options`), and :func:`method_hyperparameters` and
:func:`method_options` read them. Unknown keys anywhere raise an error
naming the key and the closest valid one.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bdlkit.algorithms import get_method
from bdlkit.algorithms.options import Option, options
from bdlkit.core.serialization import atomic_write_bytes

DEFAULT_STEPS = 1000  # run length when neither steps nor epochs is given
DTYPES = ("float32", "float64")


@dataclass
class RunConfig:
    """Everything that defines a ``bdlkit fit`` run (saved as ``config.yaml``)."""

    method: str = field(metadata={"help": "inference method (see `bdlkit list`)"})
    model: str = field(default="mlp", metadata={"help": "model from the zoo (see `bdlkit list`)"})
    data: str = field(default="digits", metadata={"help": "data set name or .npz/.csv path"})
    steps: int | None = field(default=None, metadata={"help": "number of steps (default 1000)"})
    epochs: int | None = field(default=None, metadata={"help": "number of epochs (instead of steps)"})
    seed: int = field(default=0, metadata={"help": "seed for initialisation, data order and noise"})
    batch_size: int = field(default=128, metadata={"help": "minibatch size"})
    prior_scale: float = field(default=1.0, metadata={"help": "std of the isotropic Gaussian prior"})
    temperature: float = field(default=1.0, metadata={"help": "posterior temperature T"})
    burnin: int | None = field(
        default=None, metadata={"help": "sampler steps discarded (default: half the run)"}
    )
    thin: int | None = field(
        default=None, metadata={"help": "keep every thin-th draw (default: ~100 draws kept)"}
    )
    max_samples: int | None = field(
        default=None, metadata={"help": "cap on kept draws, newest kept (default 100)"}
    )
    eval_every: int | None = field(
        default=None, metadata={"help": "evaluate on held-out data every N steps"}
    )
    eval_samples: int = field(default=32, metadata={"help": "draws of q for VI predictions"})
    log_every: int = field(default=10, metadata={"help": "write a log.jsonl line every N steps"})
    checkpoint_every: int | None = field(
        default=None, metadata={"help": "checkpoint every N steps (default: every 10% of the run)"}
    )
    checkpoint_minutes: float = field(
        default=10.0, metadata={"help": "also checkpoint every this many minutes"}
    )
    bayesian: str = field(
        default="all", metadata={"help": "random weights: all, last_layer, a model group "
                                 "(koopa: operators, decoders, head, last_block) or names/"
                                 "patterns, comma-separated"}
    )
    data_root: str | None = field(
        default=None, metadata={"help": "data folder (default: $BDLKIT_DATA, ./data, ../shared/data)"}
    )
    device: str = field(default="cpu", metadata={"help": "torch device, e.g. cpu or cuda"})
    dtype: str = field(
        default="float32", metadata={"help": "float32 or float64 (network and data)"}
    )
    model_kwargs: dict[str, Any] = field(
        default_factory=dict, metadata={"help": 'model options as JSON, e.g. \'{"hidden": [200]}\''}
    )
    data_kwargs: dict[str, Any] = field(
        default_factory=dict, metadata={"help": 'data options as JSON, e.g. \'{"train_size": 2000}\''}
    )
    hyper: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "method hyperparameters (CLI: --lr 0.1 etc.)"}
    )

    def __post_init__(self) -> None:
        get_method(self.method)  # unknown method: the error lists the valid ones
        params = method_hyperparameters(self.method)
        check_keys(self.hyper, params, f"the hyperparameters of method {self.method!r}")
        for name, value in self.hyper.items():  # YAML reads 1e-3 as a string
            if isinstance(value, str):
                self.hyper[name] = parse_value(value, params[name].default, name)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            kind = str(f.type).split(" ")[0]
            if isinstance(value, str) and kind in ("int", "float"):
                setattr(self, f.name, parse_value(value, 0 if kind == "int" else 0.0, f.name))
        if self.steps is not None and self.epochs is not None:
            raise ValueError("give exactly one of steps or epochs, not both")
        if self.steps is None and self.epochs is None:
            self.steps = DEFAULT_STEPS
        for name in ("steps", "epochs", "batch_size", "burnin", "thin", "max_samples",
                     "eval_every", "log_every", "checkpoint_every", "eval_samples"):
            value = getattr(self, name)
            low = 0 if name == "burnin" else 1
            if value is not None and (not isinstance(value, int) or value < low):
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        check_device(self.device)
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        for name in ("prior_scale", "temperature", "checkpoint_minutes"):
            if not float(getattr(self, name)) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> RunConfig:
        if not isinstance(values, dict):
            raise ValueError(f"{source} must be a mapping of option names to values")
        check_keys(values, [f.name for f in dataclasses.fields(cls)], source)
        if "method" not in values:
            raise ValueError(f"{source} does not set 'method'")
        return cls(**values)


def method_hyperparameters(method: str) -> dict[str, inspect.Parameter]:
    """The keyword arguments of ``build(problem, ...)`` for ``method``: its hyperparameters."""
    params = list(inspect.signature(get_method(method).build).parameters.values())[1:]
    return {p.name: p for p in params}


def method_options(method: str) -> dict[str, Option]:
    """The options of ``method`` as its algorithm class declares them: default, one-line
    help (the class's ``Args:``) and allowed values (a ``Literal`` type)."""
    return {o.name: o for o in options(get_method(method).ALGORITHM)}


def parse_value(text: str, default: Any, name: str = "value") -> Any:
    """Convert a command-line or YAML string to the type of ``default`` (numbers, booleans);
    other strings are kept (e.g. ``optimizer: adam``)."""
    if isinstance(default, bool):
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{name} must be true or false, got {text!r}")
        return text.lower() == "true"
    kinds = (int,) if isinstance(default, int) else (float,) if isinstance(default, float) else ()
    for kind in kinds or (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if kinds:
        raise ValueError(f"{name} must be {kinds[0].__name__}, got {text!r}")
    return text


def resolved_hyper(method: str, hyper: dict[str, Any]) -> dict[str, Any]:
    """``hyper`` completed with the defaults of ``build`` (what the run really used)."""
    out = {}
    for name, param in method_hyperparameters(method).items():
        if name in hyper:
            out[name] = hyper[name]
        elif param.default is not inspect.Parameter.empty:
            out[name] = param.default
    return out


def check_keys(values: dict[str, Any], valid: Any, where: str) -> None:
    """Raise ``ValueError`` for a key of ``values`` not in ``valid``, suggesting a close one."""
    valid = list(valid)
    for key in values:
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"unknown key {key!r} in {where}{hint} Valid keys: {', '.join(valid)}"
            )


def check_device(device: str) -> None:
    """Raise ``ValueError`` for a device string torch cannot parse or this machine lacks."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device {device!r} is not a torch device ({err}); use cpu or cuda") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but torch sees no CUDA GPU; use cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} GPU(s) visible")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r} asked for, but MPS is not available; use cpu")


def load_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """Read a YAML mapping (``yaml.safe_load``: no Python objects are constructed)."""
    import yaml

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"config file {path} does not exist")
    try:
        values = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ValueError(f"config file {path} is not valid YAML: {err}") from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ValueError(f"config file {path} must hold a mapping of option names to values")
    return values


def save_yaml(path: str | os.PathLike, values: dict[str, Any]) -> None:
    import yaml

    text = yaml.safe_dump(values, sort_keys=False, default_flow_style=None)
    atomic_write_bytes(path, text.encode())
