"""Run configuration: one dataclass used by the Python API, the YAML files and the CLI.

:class:`RunConfig` holds what a ``bdlkit fit`` run needs; its fields (with their
``help`` metadata) generate the command-line options, so the CLI, ``--config`` files
and ``config.yaml`` in a run directory cannot drift apart. A method's own
hyperparameters (``lr``, ...) are the fields of its algorithm dataclass, the one place
their names, defaults, types and help are declared; ``build``'s signature is derived
from them (:mod:`bdlkit.algorithms.options`), and :func:`method_hyperparameters` and
:func:`method_options` read them. Unknown keys anywhere raise an error
naming the key and the closest valid one; a value of the wrong type or range (a list
for ``steps``, ``seed: 1e23``, a NaN temperature, ``device: meta``) raises a
:class:`ConfigValueError` naming the key, which the CLI and the file readers turn into
``--seed ...`` or ``exp.yaml: key 'seed' ...``. Every error is an :class:`InputError`
(a ``ValueError``) but a missing file (``FileNotFoundError``).
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import numbers
import os
from dataclasses import dataclass, field
from typing import Any

from bdlkit.algorithms import get_method
from bdlkit.algorithms.options import Option, options, problem_defaults
from bdlkit.core.errors import InputError
from bdlkit.problems.precision import AUTOCAST_DTYPES
from bdlkit.runs import likelihood_choice

DEFAULT_STEPS = 1000  # run length when neither steps nor epochs is given
DTYPES = ("float32", "float64")
PRECISIONS = tuple(AUTOCAST_DTYPES)  # fp32, bf16, fp16: the network's forward pass
DEVICES = "cpu, cuda, cuda:N (N a visible GPU) or mps"
INT_MAX = 2**63 - 1  # torch's int64: a larger seed or count overflows
_INT_LOW = {"burnin": 0, "seed": 0}  # every other integer option counts something: >= 1
#: The problem's options that are no method's, with where to set them instead.
PROBLEM_OPTIONS = {
    "kld": "BayesianModel(..., kld=...) or bdlkit fit --kld (every method reads it there)",
    "temperature": "BayesianModel(..., temperature=...) or bdlkit fit --temperature",
}
#: float options with an upper bound: (bound, what the range means)
_FLOAT_HIGH = {"kld": (1.0, "the likelihood is weighted by 1/kld; 1 is the posterior itself")}
_SIMPLE_TYPES = {"int", "float", "bool", "str", "None", "Literal"}  # what YAML can spell


@dataclass
class RunConfig:
    """Everything that defines a ``bdlkit fit`` run (saved as ``config.yaml``)."""

    method: str = field(metadata={"help": "inference method (see `bdlkit list`)"})
    model: str = field(default="mlp", metadata={"help": "model from the zoo (see `bdlkit list`) or package.module:Name"})
    data: str = field(default="digits", metadata={"help": "data set name or .npz/.csv path "
                                                  "(recorded as an absolute path)"})
    steps: int | None = field(default=None, metadata={"help": "number of steps (default 1000)"})
    epochs: int | None = field(default=None, metadata={"help": "number of epochs (instead of steps)"})
    seed: int = field(default=0, metadata={"help": "seed for initialisation, data order and noise"})
    batch_size: int = field(default=128, metadata={"help": "minibatch size"})
    prior_scale: float = field(default=1.0, metadata={"help": "std of the isotropic Gaussian prior"})
    temperature: float = field(default=1.0, metadata={"help": "posterior temperature T"})
    kld: float = field(default=1.0, metadata={
        "help": "KL discount in (0, 1]: the likelihood weighted by 1/kld, the prior not "
                "(1e-3: BayesDLL's MNIST protocol; 1: the posterior)"})
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
        default=None, metadata={"help": "data folder (default: $BDLKIT_DATA, then ./data)"}
    )
    device: str = field(default="cpu", metadata={"help": "torch device, e.g. cpu or cuda"})
    chain_groups: int = field(
        default=1, metadata={"help": "independent chains run side by side on process groups "
                             "(torchrun: the processes split into this many groups, each "
                             "data parallel; chain g has seed + g and its run folder "
                             "OUT/chain-g)"})
    data_parallel: int = field(
        default=1, metadata={"cli": False, "help": "data-parallel ranks of each chain, set "
                             "from the launch (torchrun processes / chain_groups); a resume "
                             "needs the same"})
    pretrained: str | None = field(
        default=None, metadata={"help": "a .safetensors file of the network's weights (its "
                                "state_dict names): the run starts there and the prior is "
                                "centred there (fine-tuning)"})
    compile: bool = field(
        default=False, metadata={"cli": False, "help": "run the steps compiled (the CLI's "
                                 "--compile; bdlkit.engine.compiled)"}
    )
    dtype: str = field(
        default="float32", metadata={"help": "float32 or float64 (network and data)"}
    )
    precision: str = field(
        default="fp32", metadata={"help": "forward pass precision: fp32, bf16 or fp16 (autocast; "
                                  "log-likelihoods and scores stay float32; fp16 has no "
                                  "loss scaling, prefer bf16)"}
    )
    likelihood: str = field(
        default="auto", metadata={"help": "auto (categorical for classes, learned-sigma "
                                  "gaussian for regression and forecasts), categorical, "
                                  "bernoulli (two classes), gaussian (learned sigma), "
                                  "gaussian:SIGMA (fixed sigma, in the trained targets' "
                                  "units: standardised for UCI sets), heteroscedastic (2k outputs: mean and sigma); "
                                  "no Student-t: the BMA predictive is a Gaussian mixture"}
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
    changes: list[dict[str, Any]] = field(
        default_factory=list, metadata={"cli": False, "help": "options changed on resume "
                                        "(written by `bdlkit fit --resume DIR --lr X`): "
                                        "step, option, from, to"}
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.name != "hyper":
                setattr(self, f.name, _checked_field(f, getattr(self, f.name)))
        try:
            get_method(self.method)  # unknown method: the error lists the valid ones
        except ValueError as err:
            raise InputError(str(err)) from None
        self.hyper = _checked_hyper(self.method, self.hyper)
        if self.steps is not None and self.epochs is not None:
            raise InputError("give exactly one of steps or epochs, not both")
        if self.steps is None and self.epochs is None:
            self.steps = DEFAULT_STEPS
        check_device(self.device)
        if self.dtype not in DTYPES:
            raise ConfigValueError("dtype", f"must be one of {', '.join(DTYPES)}, "
                                   f"got {self.dtype!r}")
        _check_precision(self.precision, self.dtype)
        self.likelihood = likelihood_choice.normalised(self.likelihood)
        self._record_data_source()

    def _record_data_source(self) -> None:
        """A data file's path (and ``data_root``) made absolute and a file's input-scaling
        options filled in (:func:`bdlkit.data.as_recorded`): the run reloads the same data,
        scaled the same way, from any folder."""
        from bdlkit.data import as_recorded  # late: bdlkit.data is heavy to import

        self.data, self.data_kwargs = as_recorded(self.data, self.data_kwargs)
        if self.data_root is not None:
            self.data_root = os.path.abspath(os.path.expanduser(self.data_root))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> RunConfig:
        """The config in ``values`` (a YAML file's mapping); any bad key or value raises an
        :class:`InputError` naming ``source`` (and the key)."""
        if not isinstance(values, dict):
            raise InputError(f"{source} must be a mapping of option names to values, got "
                             f"{type(values).__name__}")
        check_keys(values, [f.name for f in dataclasses.fields(cls)], source)
        if "method" not in values:
            raise InputError(f"{source} does not set 'method'")
        try:
            return cls(**values)
        except ConfigValueError as err:
            raise err.relabel(f"{source}: key {err.key!r}") from None
        except InputError as err:
            raise type(err)(f"{source}: {err}") from None


class ConfigValueError(InputError):
    """A value of a :class:`RunConfig` option or method hyperparameter bdlkit refuses.

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


def _check_precision(precision: str, dtype: str) -> None:
    if precision not in PRECISIONS:
        raise ConfigValueError("precision", f"must be one of {', '.join(PRECISIONS)}, got "
                               f"{precision!r}")
    if precision != "fp32" and dtype != "float32":
        raise ConfigValueError("precision", f"{precision} autocasts a float32 network; with "
                               f"dtype {dtype} use precision fp32 (or dtype float32)")


def checked_cli_value(name: str, text: str) -> Any:
    """The command line's ``--name text`` for a :class:`RunConfig` field, parsed and checked
    as a config file's value is (a bad one raises :class:`ConfigValueError`)."""
    f = next(f for f in dataclasses.fields(RunConfig) if f.name == name)
    return _checked_field(f, text)


def _field_kind(f: dataclasses.Field) -> tuple[str, bool]:
    """``("int", True)`` for ``int | None``: the base type's name and whether None is allowed."""
    text = str(f.type)
    return text.split(" ")[0].split("[")[0], "None" in text


def _checked_field(f: dataclasses.Field, value: Any) -> Any:
    """``value`` of field ``f`` parsed (YAML and the CLI may give numbers as text) and
    checked against the field's type and range."""
    kind, optional = _field_kind(f)
    if value is None and (optional or kind == "dict"):
        return {} if kind == "dict" else None
    if kind == "int":
        return _checked_int(f.name, value, _INT_LOW.get(f.name, 1))
    if kind == "float":
        return _checked_positive(f.name, value, high=_FLOAT_HIGH.get(f.name))
    if kind == "dict":
        return _checked_mapping(f.name, value)
    if kind == "list":
        return _checked_changes(f.name, value)
    if kind == "bool":
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, bool):
            raise ConfigValueError(f.name, f"must be true or false, got {value!r}")
        return value
    if not isinstance(value, str):
        raise ConfigValueError(f.name, f"must be a string, got {value!r}")
    return value


def _checked_changes(name: str, value: Any) -> list[dict[str, Any]]:
    """The ``changes`` record: a list of ``{step, option, from, to}`` mappings."""
    if value is None:
        return []
    keys = {"step", "option", "from", "to"}
    if not isinstance(value, list) or not all(isinstance(c, dict) and set(c) == keys
                                              and isinstance(c["option"], str) for c in value):
        raise ConfigValueError(name, f"must be a list of {{step, option, from, to}} records "
                               f"(written by --resume), got {value!r}")
    return [dict(c) for c in value]


def _checked_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, str):
        value = parse_value(value, 0, name)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ConfigValueError(name, f"must be an integer >= {low}, got {value!r}")
    if value > INT_MAX:
        raise ConfigValueError(name, f"must be an integer in [{low}, 2**63 - 1], got {value!r}")
    return int(value)


def _checked_positive(name: str, value: Any, high: tuple[float, str] | None = None) -> Any:
    """A finite number > 0 (and <= ``high[0]``, whose text ``high[1]`` says why)."""
    allowed = f"in (0, {high[0]:g}] ({high[1]})" if high else "> 0 and finite"
    if isinstance(value, str):
        try:
            value = parse_value(value, 0.0, name)
        except ConfigValueError:
            raise ConfigValueError(name, f"must be a number {allowed}, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigValueError(name, f"must be a number {allowed}, got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond float's range
        number = math.inf
    if not (math.isfinite(number) and number > 0) or (high and not number <= high[0]):
        raise ConfigValueError(name, f"must be {allowed}, got {value!r}")
    return value


def _checked_mapping(name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigValueError(name, "must be a mapping of option names to values (a JSON "
                               f"object or YAML mapping), got {value!r}")
    for key in value:
        if not isinstance(key, str):
            raise ConfigValueError(name, f"must have option names (strings) as keys, got "
                                   f"{key!r}")
    return dict(value)


def _checked_hyper(method: str, hyper: Any) -> dict[str, Any]:
    """``hyper`` with its keys checked against ``method``'s options, text parsed to the
    options' types and values the options' annotations exclude refused."""
    hyper = _checked_mapping("hyper", {} if hyper is None else hyper)
    params = method_hyperparameters(method)
    check_keys(hyper, params, f"the hyperparameters of method {method!r}")
    declared = method_options(method)
    return {name: _checked_option(name, value, params[name].default, declared.get(name))
            for name, value in hyper.items()}


def _checked_option(name: str, value: Any, default: Any, option: Option | None) -> Any:
    key = f"hyper.{name}"
    if isinstance(value, str):
        return parse_value(value, default, key)
    parts = {p.split("[")[0].strip() for p in option.annotation.split("|")} if option else set()
    checkable = bool(parts) and parts <= _SIMPLE_TYPES
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
            raise ConfigValueError(key, f"must be {_describe(parts, option)}, got {value!r}")
        return _checked_number(key, value, default, int_only=checkable and parts & {
            "int", "float"} == {"int"})
    if checkable:
        raise ConfigValueError(key, f"must be {_describe(parts, option)}, got {value!r}")
    return value


def _checked_number(key: str, value: Any, default: Any, int_only: bool) -> Any:
    """A number is finite (``inf`` only where the default is: score_vi's max_step), within
    int64 and an integer where only integers are allowed."""
    if isinstance(value, numbers.Integral):
        if not -INT_MAX - 1 <= value <= INT_MAX:
            raise ConfigValueError(key, f"must be between -2**63 and 2**63 - 1, got {value!r}")
        return value
    number = float(value)
    infinite_default = isinstance(default, float) and math.isinf(default)
    if math.isnan(number) or (math.isinf(number) and not infinite_default):
        raise ConfigValueError(key, f"must be a finite number, got {value!r}")
    if int_only:
        raise ConfigValueError(key, f"must be an integer, got {value!r}")
    return value


def _describe(parts: set[str], option: Option | None) -> str:
    """``"an integer or null"``: the values an annotation of simple types allows."""
    words = {"int": "an integer", "float": "a number", "bool": "true or false",
             "str": "a string", "None": "null"}
    out = [words[p] for p in sorted(parts) if p in words]
    if "Literal" in parts and option is not None and option.choices:
        out.insert(0, "one of " + ", ".join(repr(c) for c in option.choices))
    return " or ".join(out)


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
    number = _as_number(text)
    if number is None:
        if isinstance(default, float):
            raise ConfigValueError(name, f"must be a number, got {text!r}")
        return text
    if not math.isfinite(number) and not (isinstance(default, float) and math.isinf(default)):
        if isinstance(default, str):  # a string option: 'inf' may be a file name
            return text
        raise ConfigValueError(name, f"must be a finite number, got {text!r}")
    return float(number) if isinstance(default, float) else number


def _as_number(text: str) -> int | float | None:
    """``text`` as an int, else a float, else None."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return None


def resolved_hyper(method: str, hyper: dict[str, Any], problem: Any = None) -> dict[str, Any]:
    """``hyper`` completed with the defaults of ``build`` on ``problem`` (what the run really
    used: those its kind of problem declares, then the class's)."""
    hyper, out = {**problem_defaults(get_method(method).ALGORITHM, problem), **hyper}, {}
    for name, param in method_hyperparameters(method).items():
        if name in hyper:
            out[name] = hyper[name]
        elif param.default is not inspect.Parameter.empty:
            out[name] = param.default
    return out


def check_keys(values: dict[str, Any], valid: Any, where: str) -> None:
    """Raise :class:`InputError` for a key of ``values`` not in ``valid``, suggesting a close one."""
    valid = list(valid)
    for key in values:
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            if key in PROBLEM_OPTIONS and "hyperparameters" in where:
                hint = f"; {key} is the problem's: {PROBLEM_OPTIONS[key]}."
            raise InputError(
                f"unknown key {key!r} in {where}{hint} Valid keys: {', '.join(valid)}"
            )


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
