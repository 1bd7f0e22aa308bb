"""A method's options, declared once: the fields of its algorithm dataclass.

Each algorithm class states its hyperparameters as dataclass fields (name, type,
default) and documents each in the ``Args:`` section of its docstring; choices are the
values of a ``Literal[...]`` type. Everything else is derived from that one place:

- :func:`builder` makes the module's ``build(problem, **hyper)`` (its signature is the
  fields', so ``inspect.signature(build)`` lists the options);
- :func:`options` gives each option's default, one-line help and allowed values, for
  ``bdlkit fit --method M --help``, the config checks and the docs;
- :func:`check_choices` rejects a value outside a ``Literal`` (called from
  ``__post_init__``);
- :func:`check_ranges` rejects a float option's number outside bdlkit's one range of
  float values (:mod:`bdlkit.core.value_range`), before ``build`` constructs anything;
- :func:`problem_defaults` gives the defaults that differ on the problem's kind, which
  the class declares in ``problem_defaults`` (e.g. a smaller ``lr`` on regression) and
  ``build`` applies where the caller leaves the option unset.

The ``Args:`` parser is a few lines for the Google style the project writes; docstring
libraries (e.g. docstring_parser) would add a dependency for exactly this.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bdlkit.core.errors import InputError
from bdlkit.core.protocol import PROBLEM_KINDS, hyperparameter_fields
from bdlkit.core.value_range import number_problem

_LITERAL = re.compile(r"Literal\[([^\]]*)\]")


@dataclass(frozen=True)
class Option:
    """One hyperparameter of a method."""

    name: str
    default: Any
    annotation: str
    help: str
    choices: tuple[Any, ...] | None
    #: the default on a kind of problem where it differs from ``default`` (problem kind ->
    #: value; the class's ``problem_defaults``)
    by_kind: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty

    @property
    def parts(self) -> set[str]:
        """The base names of the members of the annotation's union (``{"float",
        "Schedule"}`` for ``float | Schedule``)."""
        return {p.split("[")[0].strip() for p in self.annotation.split("|")}

    def range_problem(self, value: Any) -> str | None:
        """``"must be ..., got X"`` when ``value`` is a number outside bdlkit's range of
        float values (:mod:`bdlkit.core.value_range`) and this option takes floats; else
        None (a schedule, text or an integer option is its class's business)."""
        if "float" not in self.parts:
            return None
        return number_problem(value, infinite=isinstance(self.default, float)
                              and math.isinf(self.default))


def arg_docs(doc: str | None) -> dict[str, str]:
    """``{name: one-line text}`` of the ``Args:`` section of a Google-style docstring."""
    lines = inspect.cleandoc(doc or "").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Args:") + 1
    except StopIteration:
        return {}
    out: dict[str, str] = {}
    indent, name = None, None
    for line in lines[start:]:
        if not line.strip():
            continue
        width = len(line) - len(line.lstrip())
        if indent is None:
            indent = width
        if width < indent:  # the section ended
            break
        match = re.match(r"(\w+)(?: \([^)]*\))?:\s*(.*)", line.strip())
        if width == indent and match:
            name = match.group(1)
            out[name] = match.group(2)
        elif name is not None:
            out[name] = f"{out[name]} {line.strip()}".strip()
    return out


def choices_of(annotation: Any) -> tuple[Any, ...] | None:
    """The values of a ``Literal[...]`` in a (string) annotation, else ``None``."""
    match = _LITERAL.search(str(annotation))
    if match is None:
        return None
    return tuple(ast.literal_eval(f"({match.group(1)},)"))


def options(cls: type) -> list[Option]:
    """The options of algorithm class ``cls``, in field order; an option a subclass does
    not document again keeps its base class's ``Args:`` line."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        docs.update(arg_docs(klass.__doc__) if dataclasses.is_dataclass(klass) else {})
    out = []
    for f in hyperparameter_fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = inspect.Parameter.empty
        by_kind = {kind: values[f.name] for kind, values in cls.problem_defaults.items()
                   if f.name in values}
        out.append(Option(f.name, default, str(f.type), docs.get(f.name, ""),
                          choices_of(f.type), by_kind))
    return out


def problem_kind(problem: Any) -> str | None:
    """``"target"`` for a :class:`~bdlkit.Target`; for a :class:`~bdlkit.BayesianModel`
    the task its likelihood declares (``"classification"`` or ``"regression"``); ``None``
    for any other problem, where only the class's field defaults apply."""
    from bdlkit.problems import BayesianModel, Target

    if isinstance(problem, Target):
        return "target"
    if isinstance(problem, BayesianModel):
        return problem.likelihood.task
    return None


def problem_defaults(cls: type, problem: Any) -> dict[str, Any]:
    """The defaults of ``cls`` that differ on ``problem``'s kind (:func:`problem_kind`):
    ``{option: value}`` from the class's declared ``problem_defaults``, else empty."""
    return dict(cls.problem_defaults.get(problem_kind(problem), {}))


def problem_defaults_errors(cls: type) -> list[str]:
    """What is wrong with ``cls.problem_defaults`` (``register`` refuses it): a kind not in
    ``PROBLEM_KINDS``, or an option the class does not have."""
    names = {o.name for o in options(cls)}
    errors = []
    for kind, values in cls.problem_defaults.items():
        if kind not in PROBLEM_KINDS:
            errors.append(f"problem_defaults: unknown kind {kind!r} (one of {PROBLEM_KINDS})")
        errors += [f"problem_defaults[{kind!r}]: {cls.__name__} has no option {name!r}"
                   for name in sorted(set(values) - names)]
    return errors


def undocumented(cls: type) -> list[str]:
    """The options of ``cls`` without an ``Args:`` entry (``register`` refuses them)."""
    return [o.name for o in options(cls) if not o.help]


def check_choices(obj: Any) -> None:
    """Raise ``ValueError`` for a field of ``obj`` outside its ``Literal`` choices. A value
    of another type than the choices' passes: it is the other member of a union
    (``Literal["constant"] | Callable``, ``... | None``), the class's own check's business."""
    for option in options(type(obj)):
        value = getattr(obj, option.name)
        if option.choices is None or type(value) not in {type(c) for c in option.choices}:
            continue
        if value not in option.choices:
            allowed = ", ".join(repr(c) for c in option.choices)
            raise ValueError(f"{option.name} must be one of {allowed}; got {value!r}")


def check_ranges(declared: dict[str, Option], hyper: dict[str, Any]) -> None:
    """Raise :class:`~bdlkit.core.errors.InputError` for a value in ``hyper`` (option ->
    value) that its float option in ``declared`` (name -> :class:`Option`) does not allow
    (:meth:`Option.range_problem`)."""
    for name, value in hyper.items():
        problem = declared[name].range_problem(value) if name in declared else None
        if problem:
            raise InputError(f"{name} {problem}")


def builder(cls: type) -> Callable[..., Any]:
    """``build(problem, **hyper) -> cls(problem, **hyper)``, with the options' signature."""
    keyword_only = {f.name for f in dataclasses.fields(cls) if f.kw_only}
    declared = {o.name: o for o in options(cls)}
    names = list(declared)
    positional = [n for n in names if n not in keyword_only]

    def build(problem: Any, *args: Any, **hyper: Any) -> Any:
        if len(args) > len(positional):
            raise TypeError(f"build() takes {len(positional)} options after problem, "
                            f"{len(args)} were given")
        for name, value in zip(positional, args, strict=False):
            if name in hyper:
                raise TypeError(f"build() got two values for {name!r}")
            hyper[name] = value
        unknown = sorted(set(hyper) - set(names))
        if unknown:
            raise TypeError(f"{cls.__name__} has no option {unknown[0]!r}; options: "
                            f"{', '.join(names) or 'none'}")
        check_ranges(declared, hyper)  # before any option reaches a computation
        algorithm = cls(problem, **{**problem_defaults(cls, problem), **hyper})
        check_choices(algorithm)  # a Literal option its own checks do not cover
        return algorithm

    param = inspect.Parameter
    build.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [param("problem", param.POSITIONAL_OR_KEYWORD)]
        + [param(o.name, param.POSITIONAL_OR_KEYWORD, default=o.default,
                 annotation=o.annotation) for o in options(cls) if o.name in positional]
        + [param(o.name, param.KEYWORD_ONLY, default=o.default, annotation=o.annotation)
           for o in options(cls) if o.name in keyword_only],
        return_annotation=cls.__name__,
    )
    build.__doc__ = (f"Build :class:`{cls.__module__}.{cls.__name__}` on ``problem``; the "
                     "options are its fields (its docstring's ``Args:``), with the defaults "
                     "its ``problem_defaults`` declares for the problem's kind.")
    build.__qualname__ = build.__name__ = "build"
    build.__module__ = cls.__module__
    return build
