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
import os
from dataclasses import dataclass, field
from typing import Any

from bdlkit.algorithms import get_method
from bdlkit.algorithms.options import Option, options, problem_defaults
from bdlkit.core.errors import InputError
from bdlkit.problems.precision import AUTOCAST_DTYPES
from bdlkit.runs import likelihood_choice
from bdlkit.runs.config_values import (  # noqa: F401 - ConfigValueError, parse_value, INT_MAX: re-exported
    INT_MAX,
    MAX_THREADS,
    ConfigValueError,
    check_device,
    checked_field,
    checked_mapping,
    checked_option,
    parse_value,
)

DEFAULT_STEPS = 1000  # run length when neither steps nor epochs is given
DTYPES = ("float32", "float64")
PRECISIONS = tuple(AUTOCAST_DTYPES)  # fp32, bf16, fp16: the network's forward pass
#: The problem's options that are no method's, with where to set them instead.
PROBLEM_OPTIONS = {
    "kld": "BayesianModel(..., kld=...) or bdlkit fit --kld (every method reads it there)",
    "temperature": "BayesianModel(..., temperature=...) or bdlkit fit --temperature",
}


@dataclass
class RunConfig:
    """Everything that defines a ``bdlkit fit`` run (saved as ``config.yaml``)."""

    method: str = field(metadata={"help": "inference method (see `bdlkit list`)"})
    model: str = field(default="mlp", metadata={"help": "model from the zoo (see `bdlkit list`) or package.module:Name"})
    data: str = field(default="digits", metadata={"help": "data set name or .npz/.csv path "
                                                  "(recorded as an absolute path)"})
    data_sha256: str | None = field(
        default=None, metadata={"cli": False, "help": "SHA-256 of the data (a .npz/.csv file's "
                                "bytes, a named data set's loaded arrays), recorded by bdlkit "
                                "fit: the run's data must match it (bdlkit.runs.run_record)"})
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
    threads: int | None = field(
        default=None, metadata={"help": f"torch's CPU threads for the run, 1 to {MAX_THREADS} "
                                "(default: torch's current count, e.g. from "
                                "OMP_NUM_THREADS); recorded: a "
                                "resume uses the same count, so its steps are bit-exact "
                                "(another needs --resume DIR --threads N --accept threads)"})
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
                                        "(written by `bdlkit fit --resume DIR --lr X` and "
                                        "--accept FIELD): step, option, from, to"}
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.name != "hyper":
                setattr(self, f.name, checked_field(f, getattr(self, f.name)))
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
    return checked_field(f, text)


def _checked_hyper(method: str, hyper: Any) -> dict[str, Any]:
    """``hyper`` with its keys checked against ``method``'s options, text parsed to the
    options' types and values the options' annotations exclude refused."""
    hyper = checked_mapping("hyper", {} if hyper is None else hyper)
    params = method_hyperparameters(method)
    check_keys(hyper, params, f"the hyperparameters of method {method!r}")
    declared = method_options(method)
    return {name: checked_option(name, value, params[name].default, declared.get(name))
            for name, value in hyper.items()}


def method_hyperparameters(method: str) -> dict[str, inspect.Parameter]:
    """The keyword arguments of ``build(problem, ...)`` for ``method``: its hyperparameters."""
    params = list(inspect.signature(get_method(method).build).parameters.values())[1:]
    return {p.name: p for p in params}


def method_options(method: str) -> dict[str, Option]:
    """The options of ``method`` as its algorithm class declares them: default, one-line
    help (the class's ``Args:``) and allowed values (a ``Literal`` type)."""
    return {o.name: o for o in options(get_method(method).ALGORITHM)}


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


