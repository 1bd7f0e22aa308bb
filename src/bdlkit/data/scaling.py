"""How a user file's inputs are brought to the unit scale bdlkit's defaults assume.

* ``scale_uint8`` (default on): an input array saved as ``uint8`` (image pixels 0..255, as
  most image files hold them) is divided by 255, so pixels lie in [0, 1] as every image
  pipeline has them; ``scale_uint8=False`` keeps the raw values.
* ``standardize`` (default off; ``bdlkit fit --standardize``): every input feature minus
  its training mean, divided by its training standard deviation (a constant feature is
  divided by 1), the same statistics applied to every split. Targets are left as given.

Both are options of :func:`bdlkit.data.files.load_file` (``--data-kwargs``); a run's
``config.yaml`` records their values (:data:`OPTIONS`), so that reloading the run scales
the data as the run did. Inputs still far from unit scale afterwards draw an
:class:`~bdlkit.core.errors.InputScaleWarning` (:func:`warn_input_scale`).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bdlkit.core.errors import InputError, InputScaleWarning, caller_stacklevel
from bdlkit.data.dataset import is_data_file

#: The input-scaling options of a user file and their defaults (recorded in config.yaml).
OPTIONS: dict[str, bool] = {"scale_uint8": True, "standardize": False}
#: The options a run recorded before they existed ran with (none applied), read back as such.
RECORDED_BEFORE: dict[str, bool] = {"scale_uint8": False, "standardize": False}
#: Training inputs whose root mean square exceeds this draw an InputScaleWarning — the
#: zoo's initialisation, the unit prior and the SG-MCMC step sizes assume inputs of order 1.
INPUT_SCALE = 10.0
PIXEL_MAX = 255.0


def check_options(scale_uint8: Any, standardize: Any) -> None:
    """Refuse option values that are not true or false.

    Args:
        scale_uint8: the ``scale_uint8`` option as given.
        standardize: the ``standardize`` option as given.
    """
    for name, value in (("scale_uint8", scale_uint8), ("standardize", standardize)):
        if not isinstance(value, (bool, np.bool_)):
            raise InputError(f"{name} must be true or false, got {value!r}")


def scale_inputs(parts: dict[str, tuple[np.ndarray, np.ndarray]], *, scale_uint8: bool,
                 standardize: bool) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], list[str]]:
    """The split parts with their inputs scaled as the options say, and what was done.

    Args:
        parts: ``{"train": (x, y), "test": (x, y), ...}`` as read from the file.
        scale_uint8: divide ``uint8`` inputs by 255.
        standardize: standardise every feature with the training mean and std.

    Returns:
        The new parts (``y`` untouched) and one line per scaling applied (the data set's
        ``meta["input_scaling"]``).
    """
    done: list[str] = []
    if scale_uint8 and any(x.dtype == np.uint8 for x, _ in parts.values()):
        parts = {p: ((x / PIXEL_MAX) if x.dtype == np.uint8 else x, y)
                 for p, (x, y) in parts.items()}
        done.append("uint8 inputs divided by 255 (scale_uint8)")
    if standardize:
        x_train = parts["train"][0].astype(np.float64).reshape(len(parts["train"][0]), -1)
        mean, std = x_train.mean(axis=0), x_train.std(axis=0)
        std[std == 0] = 1.0
        parts = {p: (((x.reshape(len(x), -1) - mean) / std).reshape(x.shape), y)
                 for p, (x, y) in parts.items()}
        done.append("each input feature standardised with the training mean and std "
                    "(standardize)")
    return parts, done


def warn_input_scale(x: torch.Tensor, path: Path) -> None:
    """An :class:`~bdlkit.core.errors.InputScaleWarning` (a DataWarning and a
    DefaultsWarning) when the training inputs' root mean square exceeds
    :data:`INPUT_SCALE`.

    Args:
        x: the training inputs, as the model will see them.
        path: the file, named in the message.
    """
    scale = float(x.double().pow(2).mean().sqrt()) if x.numel() else 0.0
    if scale > INPUT_SCALE:
        warnings.warn(
            f"{path}: the training inputs have a root mean square of {scale:.3g}; bdlkit's "
            f"defaults (initialisation, prior scale 1, SG-MCMC step sizes) assume inputs of "
            f"order 1, and on 0..255 pixels sgld and sghmc predict the majority class "
            f"(`bdlkit bench defaults`). Fix: standardise each feature with the training "
            f"mean and std, standardize=True (command line: --standardize), or rescale "
            f"before saving (pixels: divide by 255, or save them as uint8, which bdlkit "
            f"scales to [0, 1])",
            InputScaleWarning, stacklevel=caller_stacklevel())


def applies(name: Any, kwargs: dict[str, Any]) -> bool:
    """Whether data set ``name`` with options ``kwargs`` takes the scaling options: a
    ``.npz``/``.csv`` file that is not read as a time series (``horizon``/``lookback``)."""
    return (isinstance(name, str) and is_data_file(name)
            and not {"horizon", "lookback"} & set(kwargs))


def as_stored(values: dict[str, Any]) -> dict[str, Any]:
    """A stored run configuration (``config.yaml``'s mapping) with the scaling options of a
    file recorded before they existed set to what that run did (:data:`RECORDED_BEFORE`),
    so that evaluating, loading or resuming it feeds its network the inputs it was trained
    on. A new run's options are filled in with :data:`OPTIONS` when it is created."""
    kwargs = values.get("data_kwargs") or {}
    if not isinstance(kwargs, dict) or not applies(values.get("data"), kwargs):
        return values
    return {**values, "data_kwargs": {**RECORDED_BEFORE, **kwargs}}
