"""bdlkit's small model zoo: plain ``torch.nn.Module``s that work with ``torch.func``.

Registry names: ``"mlp"`` (:class:`MLP`), ``"cnn"`` (the L2E meta-training
:class:`ConvNet`), ``"resnet20_frn"`` (:func:`resnet20_frn`), ``"vit"`` (:class:`ViT`),
``"koopa"`` (the :class:`Koopa` forecaster; :func:`forecaster_for` builds it for a data set).

Your own network: a name ``"package.module:Name"`` (``bdlkit fit --model mypkg.net:Tiny``)
imports ``package.module`` and calls its class or function ``Name`` as
``Name(input_shape, out_features, **model_kwargs)``: ``input_shape`` is the tuple of one
input's sizes (``(64,)`` for digits, ``(C, H, W)`` for images, ``(lookback, channels)``
for forecasting windows), ``out_features`` the number of outputs (classes, regression
targets, or ``horizon · channels`` for forecasts, reshaped to ``(horizon, channels)``
after it). It must return a ``torch.nn.Module``. The package is imported from
``sys.path`` or else from the current folder (as ``python -m`` would: ``mypkg/`` beside
where ``bdlkit fit`` runs needs no ``PYTHONPATH``). The run's config.yaml records the name
as given, so the module must be importable (from the folder the command runs in,
installed, or on ``PYTHONPATH``) whenever the run is fit, resumed or evaluated.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

from torch import nn

from bdlkit.core.errors import InputError
from bdlkit.models import koopa as _koopa
from bdlkit.models.cnn import ConvNet, haiku_init_
from bdlkit.models.koopa import Koopa, koopa_for_data, mask_spectrum
from bdlkit.models.mlp import MLP
from bdlkit.models.resnet_frn import BasicBlockFRN, FilterResponseNorm, ResNetFRN, resnet20_frn
from bdlkit.models.vit import ViT

MODELS: dict[str, Callable[..., nn.Module]] = {
    "mlp": MLP,
    "cnn": ConvNet,
    "resnet20_frn": resnet20_frn,
    "vit": ViT,
    "koopa": Koopa,
}


#: The options a zoo model needs other than a method's defaults, by model, then by method
#: (or "score_vi/<solver>"), then by option; ``bdlkit fit`` applies them (:func:`method_options`).
METHOD_OPTIONS: dict[str, dict[str, dict[str, Any]]] = {"koopa": _koopa.METHOD_OPTIONS}


def method_options(model: str, key: str, hyper: dict[str, Any]) -> dict[str, Any]:
    """The options zoo ``model`` sets for method ``key`` (a method name, or
    ``"score_vi/<solver>"``) that ``hyper`` leaves unset; none for a model of one's own."""
    return {k: v for k, v in METHOD_OPTIONS.get(model, {}).get(key, {}).items() if k not in hyper}


def build_model(name: str, **kwargs: object) -> nn.Module:
    """Build the registered model ``name`` with constructor keyword arguments ``kwargs``.

    Raises:
        InputError: (a ``ValueError``) if ``name`` is not registered (the message
            suggests the closest and lists the valid names); ``"package.module:Name"``
            calls ``Name(**kwargs)``.
    """
    if is_import_path(name):
        return _checked_module(name, import_model(name)(**kwargs))
    _check_name(name)
    return MODELS[name](**kwargs)


def is_import_path(name: str) -> bool:
    """Whether model ``name`` is ``"package.module:Name"`` (a user's network), not a zoo name."""
    return isinstance(name, str) and ":" in name


def import_model(spec: str) -> Callable[..., nn.Module]:
    """The class or function ``Name`` of ``"package.module:Name"``, imported.

    Raises:
        InputError: the module cannot be imported, has no ``Name``, or ``Name`` is not callable.
    """
    module_name, _, attr = spec.partition(":")
    where = f"--model {spec}"
    if not module_name or not attr:
        raise InputError(f"{where}: a model of your own is given as package.module:Name, "
                         f"e.g. mypkg.net:Tiny")
    try:
        module = _import_here(module_name)
    except Exception as err:  # noqa: BLE001 - the user's module: any failure is input
        raise InputError(
            f"{where}: cannot import module {module_name!r} ({type(err).__name__}: "
            f"{str(err).strip().splitlines()[0] if str(err).strip() else ''}); it must be "
            "importable (in the current folder, installed, or its folder on PYTHONPATH) "
            "when the run is fit, resumed (--resume) or evaluated") from err
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            names = [n for n in dir(target) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise InputError(f"{where}: module {module_name!r} has no attribute {attr!r}{hint}")
        target = getattr(target, part)
    if not callable(target):
        raise InputError(f"{where}: {attr!r} in {module_name!r} is a {type(target).__name__}, "
                         "not a class or function returning a torch.nn.Module")
    return target


def _import_here(module_name: str) -> Any:
    """Import ``module_name``; where its top package is not found on ``sys.path`` but lies
    in the current folder, put that folder on ``sys.path`` (as ``python -m`` does, which the
    ``bdlkit`` script does not) and import it from there.

    Args:
        module_name: ``package.module``.
    """
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        top = module_name.split(".")[0]
        here = os.getcwd()
        local = os.path.isdir(os.path.join(here, top)) or os.path.isfile(
            os.path.join(here, top + ".py"))
        if err.name != top or not local or here in sys.path:
            raise
        sys.path.append(here)
        importlib.invalidate_caches()
        return importlib.import_module(module_name)


def _checked_module(spec: str, net: Any) -> nn.Module:
    if not isinstance(net, nn.Module):
        raise InputError(f"--model {spec}: returned a {type(net).__name__}, not a "
                         "torch.nn.Module")
    return net


def _build_imported(spec: str, shape: tuple[int, ...], out_features: int,
                    kwargs: dict[str, Any]) -> nn.Module:
    """``Name(shape, out_features, **kwargs)`` of ``spec``; its failure is an InputError."""
    factory = import_model(spec)
    try:
        net = factory(shape, out_features, **kwargs)
    except Exception as err:  # noqa: BLE001 - the user's constructor: any failure is input
        reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise InputError(
            f"--model {spec}: {spec.partition(':')[2]}({shape}, {out_features}"
            f"{''.join(f', {k}={v!r}' for k, v in kwargs.items())}) failed "
            f"({type(err).__name__}: {reason}); it is called as Name(input_shape, "
            "out_features, **model_kwargs)") from err
    return _checked_module(spec, net)


def _check_name(name: str) -> None:
    """Refuse a name neither in the zoo nor ``package.module:Name``, suggesting the closest."""
    if name in MODELS:
        return
    close = difflib.get_close_matches(str(name), list(MODELS), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise InputError(f"unknown model {name!r}{hint}; valid names: {', '.join(sorted(MODELS))}, "
                     "or package.module:Name for a network of your own")


def build_for_data(
    name: str, input_shape: tuple[int, ...], out_features: int, /, **kwargs: object
) -> nn.Module:
    """Build model ``name`` for inputs of ``input_shape`` and ``out_features`` outputs.

    Used by the CLI: the input and output sizes come from the data set, the remaining
    constructor options from ``kwargs``. Image models need ``(C, H, W)`` inputs. An
    option in ``kwargs`` the model lacks, or a value it cannot be built with, raises
    :class:`~bdlkit.core.errors.InputError` naming ``--model-kwargs`` and the option.
    ``"package.module:Name"`` calls ``Name(input_shape, out_features, **kwargs)`` (module
    docstring).
    """
    shape = tuple(int(s) for s in input_shape)
    if is_import_path(name):
        return _build_imported(name, shape, int(out_features), kwargs)
    _check_name(name)
    if name == "mlp":
        return _construct(name, MLP, {"in_features": shape, "out_features": out_features}, kwargs)
    if name == "koopa":
        raise ValueError("model 'koopa' is a forecaster: it needs forecasting data (ett/ETTh2, "
                         "exchange_rate, ili or a time-series .csv)")
    if len(shape) != 3:
        raise ValueError(
            f"model {name!r} needs image inputs (channels, height, width), but the data have "
            f"shape {shape}; use --model mlp"
        )
    if name == "cnn":
        return _construct(name, ConvNet, {"in_shape": shape, "num_classes": out_features}, kwargs)
    if name == "resnet20_frn":
        return _construct(name, resnet20_frn, {"num_classes": out_features,
                                               "in_channels": shape[0]}, kwargs)
    if shape[1] != shape[2]:
        raise ValueError(f"model 'vit' needs square images, got {shape}")
    return _construct(name, ViT, {"image_size": shape[1], "in_channels": shape[0],
                                  "num_classes": out_features}, kwargs)


def forecaster_for(name: str, ds: Any, /, **kwargs: object) -> nn.Module:
    """Model ``name`` for the forecasting data set ``ds``: windows ``(n, L, C)`` to
    forecasts ``(n, H, C)``.

    ``"koopa"`` takes its mask spectrum from ``ds.x_train`` and, for the official data sets
    and horizons, the sizes of the official scripts (:func:`koopa_for_data`); any other zoo
    model maps the flattened window to ``H · C`` outputs, reshaped to ``(H, C)``.
    """
    if not is_import_path(name):
        _check_name(name)
    horizon, channels = ds.y_train.shape[1], ds.y_train.shape[2]
    if name == "koopa":
        return _construct(name, koopa_for_data, {"x_train": ds.x_train, "horizon": horizon,
                                                 "dataset": ds.name}, kwargs)
    net = build_for_data(name, tuple(ds.x_train.shape[1:]), horizon * channels, **kwargs)
    return nn.Sequential(net, nn.Unflatten(1, (horizon, channels)))


# what a constructor raises for a value of the wrong type or size
_BUILD_ERRORS = (TypeError, ValueError, OverflowError, RuntimeError, MemoryError)


def _construct(name: str, factory: Callable[..., nn.Module], fixed: dict[str, Any],
               kwargs: dict[str, Any]) -> nn.Module:
    """``factory(**fixed, **kwargs)``. ``fixed`` comes from the data set, ``kwargs`` from
    the user (``--model-kwargs``): a failure with ``kwargs`` given is an :class:`InputError`
    naming the model and the offending option; one without is a bug and propagates."""
    if not kwargs:
        return factory(**fixed)
    _check_kwarg_names(name, factory, fixed, kwargs)
    try:
        return factory(**fixed, **kwargs)
    except _BUILD_ERRORS as err:
        culprit = next((k for k in kwargs if _fails(factory, {**fixed, k: kwargs[k]})), None)
        what = (f"{culprit}={kwargs[culprit]!r}" if culprit is not None
                else "these options together: " + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()))
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(f"--model-kwargs: model {name!r} cannot be built with {what} "
                         f"({reason}); fix the value (see help(bdlkit.models."
                         f"{getattr(factory, '__name__', name)}) for its type)") from err


def _fails(factory: Callable[..., nn.Module], kwargs: dict[str, Any]) -> bool:
    try:
        factory(**kwargs)
    except _BUILD_ERRORS:
        return True
    return False


def _check_kwarg_names(name: str, factory: Callable[..., nn.Module], fixed: dict[str, Any],
                       kwargs: dict[str, Any]) -> None:
    """Refuse a key of ``kwargs`` the data set sets, or that ``factory`` does not take."""
    params = inspect.signature(factory).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    valid = [n for n, p in params.items() if n not in fixed and p.kind in (
        p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for key in kwargs:
        if key in fixed:
            raise InputError(f"--model-kwargs: {key!r} of model {name!r} is set from the data "
                             "set; drop it")
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InputError(f"--model-kwargs: model {name!r} has no option {key!r}{hint}; "
                             f"its options: {', '.join(valid) or 'none'}")


__all__ = [
    "METHOD_OPTIONS",
    "method_options",
    "build_for_data",
    "import_model",
    "is_import_path",
    "MODELS",
    "MLP",
    "BasicBlockFRN",
    "ConvNet",
    "FilterResponseNorm",
    "Koopa",
    "forecaster_for",
    "koopa_for_data",
    "mask_spectrum",
    "ResNetFRN",
    "ViT",
    "build_model",
    "haiku_init_",
    "resnet20_frn",
]
