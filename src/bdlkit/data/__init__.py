"""Data sets for bdlkit: one :func:`load` entry point over offline files and generators.

Nothing is ever downloaded. Files are looked up under a data root (the ``root`` argument,
``$BDLKIT_DATA`` or ``./data``; see :mod:`bdlkit.data.roots`); a missing
file raises :class:`DataNotFoundError` listing every path tried.

Sources and split conventions (details in each module's docstring):

* ``digits``: scikit-learn's embedded 8x8 digits, stratified seeded 70/30 split
  (:mod:`.images`); the default data set of the demo.
* ``mnist``: the shipped 10k MNIST test set, split by a seeded permutation into
  ``train_size`` training images and the rest for testing; ``notmnist``: the OOD set
  (test part only); ``cifar10``: a 5k/10k CIFAR-10 subset decoded from JPEG (:mod:`.images`).
* ``uci/<name>``: nine UCI regression sets with the standard 20 (protein: 5) PBP splits,
  standardised with training statistics (:mod:`.uci`).
* ``ett/ETTh2``, ``exchange_rate``, ``ili``: forecasting windows with the Koopa/Autoformer
  splits and scaling (:mod:`.timeseries`).
* ``posteriordb/<posterior>``: posteriors with reference draws (:mod:`.posteriordb`);
  ``synthetic/<kind>``: generated targets (:mod:`.synthetic`).
* a path ending in ``.npz`` or ``.csv``: a user file (:mod:`.files`; ``uint8`` inputs are
  scaled to [0, 1], ``standardize=True`` standardises the inputs: :mod:`.scaling`); a
  ``.csv`` given a ``horizon`` is a time series, cut into forecasting windows
  (:func:`.timeseries.load_csv_series`).

Options a loader does not take, and missing required ones, are refused naming the valid
options and the closest one.
"""

from __future__ import annotations

import difflib
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bdlkit.core.errors import InputError
from bdlkit.data import scaling
from bdlkit.data.dataset import Dataset, Task, as_float, as_labels, is_data_file
from bdlkit.data.files import load_file
from bdlkit.data.images import load_cifar10, load_digits, load_mnist, load_notmnist, read_idx
from bdlkit.data.roots import DataNotFoundError, candidate_roots
from bdlkit.data.timeseries import forecasting_name, load_csv_series, load_forecasting
from bdlkit.data.uci import UCI_FOLDERS, load_uci

#: Every name :func:`load` accepts, with what the data set holds (``bdlkit list`` prints it).
DATASETS: dict[str, str] = {
    "digits": "scikit-learn 8x8 digits (1797 images, 10 classes), stratified 70/30 split",
    "mnist": "MNIST 10k test set split into train/test (seeded; default 1000 train)",
    "notmnist": "notMNIST letters A-J (10k, test part only): the OOD set for MNIST",
    "cifar10": "CIFAR-10 JPEG subset: 5000 train / 10000 test, 32x32x3, 10 classes",
    "uci/boston": "UCI Boston housing (506 x 13), 20 splits; ethically problematic feature",
    "uci/concrete": "UCI concrete compressive strength (1030 x 8), 20 splits",
    "uci/energy": "UCI energy efficiency, heating load (768 x 8), 20 splits",
    "uci/kin8nm": "UCI kin8nm robot-arm kinematics (8192 x 8), 20 splits",
    "uci/naval": "UCI naval propulsion, compressor decay (11934 x 16), 20 splits",
    "uci/power": "UCI combined-cycle power plant (9568 x 4), 20 splits",
    "uci/protein": "UCI protein tertiary structure (45730 x 9), 5 splits",
    "uci/wine": "UCI red wine quality (1599 x 11), 20 splits",
    "uci/yacht": "UCI yacht hydrodynamics (308 x 6), 20 splits",
    "ett/ETTh2": "ETTh2 hourly transformer data (17420 x 7), ETT 12/4/4-month split",
    "exchange_rate": "daily exchange rates of 8 countries (7588 x 8), 70/10/20 split",
    "ili": "weekly US influenza-like illness (966 x 7), 70/10/20 split",
    "posteriordb/eight_schools-eight_schools_noncentered": "eight schools, non-centred (10 params)",
    "posteriordb/sblrc-blr": "Bayesian linear regression, correlated betas (6 params)",
    "posteriordb/kidiq-kidscore_momiq": "simple linear regression, kid IQ (3 params)",
    "posteriordb/diamonds-diamonds": "ill-conditioned linear regression, diamonds (26 params)",
    "posteriordb/arK-arK": "AR(5) time series (7 params)",
    "posteriordb/low_dim_gauss_mix-low_dim_gauss_mix": "two-component Gaussian mixture (5)",
    "posteriordb/wells_data-wells_dist": "logistic regression, wells (2 params, no reference draws)",
    "synthetic/<kind>": "a generated synthetic target (see bdlkit.data.synthetic)",
}

_IMAGES = {"digits", "mnist", "notmnist", "cifar10"}


def _listing() -> str:
    """The valid names on one short line: families as ``uci/<name> (boston, ...)``."""
    families: dict[str, list[str]] = {}
    for key in DATASETS:
        family, _, member = key.rpartition("/")
        families.setdefault(family or key, []).append(member)
    shown = []
    for family, members in families.items():
        if members == [family] or "<" in members[0] or len(members) == 1:
            shown.append(family if members == [family] else f"{family}/{members[0]}")
        elif len(", ".join(members)) <= 80:
            shown.append(f"{family}/<name> ({', '.join(members)})")
        else:
            shown.append(f"{family}/<name> ({len(members)} of them)")
    return ", ".join(shown)


def _unknown(name: str) -> InputError:
    names = {k.lower(): k for k in DATASETS if "<" not in k}
    close = difflib.get_close_matches(name.lower(), list(names), n=1)
    hint = f" (did you mean {names[close[0]]}?)" if close else ""
    return InputError(
        f"unknown data set {name!r}{hint}. Valid names: {_listing()}, or the path of a "
        f".npz/.csv file (UCI folder names are accepted too); `bdlkit list` describes each"
    )


def _call(loader: Callable[..., Any], what: str, *args: Any, note: str = "",
          **kwargs: Any) -> Any:
    """``loader(*args, **kwargs)`` once the options are known to fit its signature.

    Args:
        loader: the specific loader (or generator) function.
        what: the data set as the user named it, for the messages.
        *args: what :func:`load` passes positionally (a name or path).
        note: appended to the list of valid options (e.g. what else a .csv accepts).
        **kwargs: the user's options (``--data-kwargs``) and ``root``.

    Raises:
        InputError: an option the loader does not take (with the closest valid one and
            all of them), or a required one missing.
    """
    params = list(inspect.signature(loader).parameters.values())[len(args):]
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    options = [n for n in names if n != "root"]
    open_ended = any(p.kind == p.VAR_KEYWORD for p in params)
    for key in kwargs:
        if key not in names and not open_ended:
            close = difflib.get_close_matches(str(key), options, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            if key in scaling.OPTIONS and key not in close:
                hint += (f" ({key} is an option of .npz/.csv files; bdlkit's named data sets "
                         "come scaled)")
            example = (f" (command line: --data-kwargs '{{\"{close[0]}\": ...}}')" if close
                       else "")
            raise InputError(f"unknown data option {key!r} for {what}{hint}; valid options: "
                             f"{', '.join(options) or 'none'}{note}{example}")
    missing = [p.name for p in params if p.name in names
               and p.default is inspect.Parameter.empty and p.name not in kwargs]
    if missing:
        given = ", ".join(f"{m}=..." for m in missing)
        raise InputError(
            f"{what} needs the option{'s' if len(missing) > 1 else ''} "
            f"{', '.join(repr(m) for m in missing)}: e.g. bdlkit.data.load({what!r}, {given}) "
            f"(command line: --data-kwargs '{{\"{missing[0]}\": ...}}')")
    return loader(*args, **kwargs)


def as_recorded(name: str, kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A data set name and its options as a run records them (``config.yaml``).

    A ``.npz``/``.csv`` path becomes absolute, so that the run can be evaluated, loaded,
    resumed and reproduced from any folder; a file's input-scaling options
    (:data:`bdlkit.data.scaling.OPTIONS`) are filled in with their defaults, so that
    reloading the run scales its inputs as the run did. Other names are returned as given.

    Args:
        name: what :func:`load` takes.
        kwargs: the options for :func:`load`.
    """
    if not is_data_file(name):
        return name, dict(kwargs)
    path = os.path.abspath(os.path.expanduser(name))
    return path, ({**scaling.OPTIONS, **kwargs} if scaling.applies(name, kwargs)
                  else dict(kwargs))


def load(name: str, root: str | os.PathLike | None = None, **kwargs: Any) -> Any:
    """Load a data set by name (see :data:`DATASETS`) or from a ``.npz``/``.csv`` path.

    Args:
        name: a name from :data:`DATASETS` (case-insensitive; ``uci/<folder name>``,
            ``etth2``, ``exchange`` and ``illness`` are accepted too) or a file path.
        root: data root (see :mod:`bdlkit.data.roots`); ignored for generated data.
        **kwargs: passed to the specific loader (e.g. ``split=3`` for UCI, ``horizon=24``
            for forecasting, ``train_size=2000`` for MNIST); ``horizon`` (or ``lookback``)
            makes a ``.csv`` a time series (``target=``, ``lookback=``, ``features=``, ``date_column=``).

    Returns:
        A :class:`Dataset`, or for ``posteriordb/...`` and ``synthetic/...`` whatever those
        loaders return.
    """
    if not isinstance(name, (str, os.PathLike)):
        raise TypeError(f"data set name must be a string or path, got {type(name).__name__}")
    text = os.fspath(name).strip()
    key = text.lower()
    if key in _IMAGES:
        if key == "digits":
            return _call(load_digits, text, **kwargs)
        loader = {"mnist": load_mnist, "notmnist": load_notmnist, "cifar10": load_cifar10}[key]
        return _call(loader, text, root=root, **kwargs)
    if key.startswith("uci/"):
        return _call(load_uci, text, text[4:], root=root, **kwargs)
    if key.startswith("posteriordb/"):
        from bdlkit.data.posteriordb import load_posterior

        return _call(load_posterior, text, text[len("posteriordb/") :], root=root, **kwargs)
    if key.startswith("synthetic/"):
        from bdlkit.data.synthetic import KINDS, make_target

        kind = text[len("synthetic/") :]
        return _call(KINDS[kind], text, **kwargs) if kind in KINDS else make_target(kind)
    try:
        canonical = forecasting_name(text)
    except ValueError:
        canonical = None
    if canonical is not None:
        return _call(load_forecasting, text, canonical, root=root, **kwargs)
    suffix = Path(text).suffix.lower()
    if suffix == ".csv" and {"horizon", "lookback"} & set(kwargs):
        return _call(load_csv_series, text, text, **kwargs)
    if suffix in (".npz", ".csv"):
        series = "; horizon or lookback make a .csv a time series" if suffix == ".csv" else ""
        return _call(load_file, text, text, note=series, **kwargs)  # a missing file raises
    raise _unknown(text)


__all__ = [
    "DATASETS",
    "DataNotFoundError",
    "Dataset",
    "Task",
    "UCI_FOLDERS",
    "as_float",
    "as_recorded",
    "as_labels",
    "candidate_roots",
    "load",
    "load_cifar10",
    "load_csv_series",
    "load_digits",
    "load_file",
    "load_forecasting",
    "load_mnist",
    "load_notmnist",
    "load_uci",
    "read_idx",
]
