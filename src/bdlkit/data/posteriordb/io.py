"""Readers for the posteriordb files (plain ``zipfile`` + ``json``; never pickle).

Layout below ``<data root>/posteriordb/posterior_database/`` (stan-dev/posteriordb):

* ``posteriors/<P>.json``: model name, data name, parameter ``dimensions``;
* ``data/data/<data>.json.zip``: one JSON member mapping Stan data names to values;
* ``reference_posteriors/draws/draws/<P>.json.zip``: a JSON list of chains, each
  ``{"theta[1]": [draws...], ...}`` on the *constrained* scale;
* ``reference_posteriors/summary_statistics/mean_value/mean_value/<P>.json``:
  ``{"names": [...], "mean_value": [...], "mcse_mean": [...]}``;
* ``models/stan/<model>.stan``: the Stan program.
"""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bdlkit.data.roots import find

BASE = Path("posteriordb") / "posterior_database"

PathLike = str | os.PathLike


def _find(relative: str, root: PathLike | None, what: str) -> Path:
    return find(BASE / relative, root, what=what)


def read_zipped_json(path: PathLike) -> Any:
    """Parse the single JSON member of a ``.json.zip`` archive."""
    with zipfile.ZipFile(path) as archive:
        members = [m for m in archive.namelist() if m.endswith(".json")]
        if len(members) != 1:
            raise ValueError(f"{path}: expected exactly one .json member, found {members}")
        with archive.open(members[0]) as fh:
            return json.load(fh)


def read_posterior_info(name: str, root: PathLike | None = None) -> dict[str, Any]:
    """The posterior JSON ``posteriors/<name>.json`` (model, data, dimensions)."""
    path = _find(f"posteriors/{name}.json", root, what=f"posteriordb posterior {name!r}")
    return json.loads(path.read_text())


def read_data(data_name: str, root: PathLike | None = None) -> dict[str, Any]:
    """The Stan data of ``data/data/<data_name>.json.zip``; lists become float64/int arrays."""
    path = _find(f"data/data/{data_name}.json.zip", root, what=f"posteriordb data {data_name!r}")
    raw = read_zipped_json(path)
    return {k: (np.asarray(v) if isinstance(v, list) else v) for k, v in raw.items()}


@dataclass(frozen=True)
class ReferenceDraws:
    """Reference draws on the constrained scale.

    Attributes:
        names: parameter element names, e.g. ``["theta[1]", ..., "tau"]``.
        chains: float64 array ``(num_chains, draws_per_chain, k)``.
    """

    names: list[str]
    chains: np.ndarray

    @property
    def draws(self) -> np.ndarray:
        """All draws, chain after chain — ``(num_chains * draws_per_chain, k)``."""
        return self.chains.reshape(-1, self.chains.shape[-1])

    def select(self, names: list[str]) -> np.ndarray:
        """Flattened draws with columns in the order of ``names``."""
        missing = [n for n in names if n not in self.names]
        if missing:
            raise KeyError(f"reference draws lack {missing}; they have {self.names}")
        idx = [self.names.index(n) for n in names]
        return self.draws[:, idx]


def read_reference_draws(name: str, root: PathLike | None = None) -> ReferenceDraws:
    """The gold-standard draws of posterior ``name`` (10 chains x 1000 for posteriordb)."""
    path = _find(
        f"reference_posteriors/draws/draws/{name}.json.zip",
        root,
        what=f"posteriordb reference draws of {name!r}",
    )
    chains = read_zipped_json(path)
    names = list(chains[0].keys())
    for c in chains:
        if list(c.keys()) != names:
            raise ValueError(f"{path}: chains disagree on parameter names")
    array = np.array([[c[n] for n in names] for c in chains], dtype=np.float64)  # (C, k, S)
    return ReferenceDraws(names=names, chains=np.ascontiguousarray(array.transpose(0, 2, 1)))


@dataclass(frozen=True)
class ReferenceMean:
    """Reference posterior mean ``mean`` and its Monte Carlo standard error ``mcse``."""

    names: list[str]
    mean: np.ndarray
    mcse: np.ndarray

    def select(self, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, mcse)`` reordered to ``names``."""
        idx = [self.names.index(n) for n in names]
        return self.mean[idx], self.mcse[idx]


def read_reference_mean(name: str, root: PathLike | None = None) -> ReferenceMean:
    """The ``mean_value`` summary statistic of posterior ``name``."""
    rel = f"reference_posteriors/summary_statistics/mean_value/mean_value/{name}.json"
    raw = json.loads(_find(rel, root, what=f"posteriordb reference mean of {name!r}").read_text())
    return ReferenceMean(
        names=list(raw["names"]),
        mean=np.asarray(raw["mean_value"], dtype=np.float64),
        mcse=np.asarray(raw["mcse_mean"], dtype=np.float64),
    )
