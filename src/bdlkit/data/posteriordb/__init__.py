"""Seven posteriordb posteriors as torch Targets on the unconstrained space.

Example::

    from bdlkit.data.posteriordb import load_posterior

    target = load_posterior("eight_schools")  # or the full "eight_schools-eight_schools_noncentered"
    theta = target.reference.draws          # (10000, 10) unconstrained reference draws
    target.log_prob(theta)                  # (10000,), includes the log-Jacobian
    target.constrain(theta)                 # (10000, 10) == target.reference_draws

Files are read from ``<data root>/posteriordb/posterior_database`` (see
:mod:`bdlkit.data.roots`); nothing is downloaded.
"""

from __future__ import annotations

import os

import torch

from bdlkit.data.posteriordb.io import (
    ReferenceDraws,
    ReferenceMean,
    read_data,
    read_posterior_info,
    read_reference_draws,
    read_reference_mean,
    read_zipped_json,
)
from bdlkit.data.posteriordb.models import MODELS, PosteriorModel
from bdlkit.data.posteriordb.target import PosteriorDBTarget
from bdlkit.data.posteriordb.transforms import (
    Block,
    Identity,
    Ordered,
    ParamLayout,
    Positive,
    Transform,
    UnitInterval,
)

POSTERIORS: tuple[str, ...] = tuple(MODELS)
"""Full names of the available posteriors, ``<data>-<model>``."""

__all__ = [
    "POSTERIORS",
    "Block",
    "Identity",
    "Ordered",
    "ParamLayout",
    "Positive",
    "PosteriorDBTarget",
    "PosteriorModel",
    "ReferenceDraws",
    "ReferenceMean",
    "Transform",
    "UnitInterval",
    "load_posterior",
    "read_data",
    "read_posterior_info",
    "read_reference_draws",
    "read_reference_mean",
    "read_zipped_json",
    "resolve_name",
]


def resolve_name(name: str) -> str:
    """Full posterior name from a full name, a data name or a unique prefix of one.

    Raises:
        ValueError: unknown or ambiguous name; the message lists the valid names.
    """
    if name in POSTERIORS:
        return name
    hits = [p for p in POSTERIORS if p.split("-")[0] == name] or [
        p for p in POSTERIORS if p.startswith(name)
    ]
    if len(hits) == 1:
        return hits[0]
    why = "ambiguous" if hits else "unknown"
    raise ValueError(f"{why} posterior {name!r}; valid names: {', '.join(POSTERIORS)}")


def load_posterior(
    name: str, root: str | os.PathLike | None = None, dtype: torch.dtype = torch.float64
) -> PosteriorDBTarget:
    """Load posterior ``name`` (full name or unique data-name prefix) as a Target.

    Args:
        name: e.g. ``"eight_schools-eight_schools_noncentered"`` or ``"eight_schools"``.
        root: explicit data root (else the search order of :mod:`bdlkit.data.roots`).
        dtype: dtype of the initial points and the unconstrained reference draws; the
            log density computes in the dtype of its input.

    Raises:
        ValueError: unknown name. DataNotFoundError: files missing under the data roots.
    """
    full = resolve_name(name)
    info = read_posterior_info(full, root)
    model = MODELS[full](read_data(info["data_name"], root))
    expected = [
        n
        for key, size in info["dimensions"].items()
        for n in ([key] if size == 1 else [f"{key}[{i + 1}]" for i in range(size)])
    ]
    if expected != model.param_names:
        raise RuntimeError(f"{full}: model names {model.param_names} != posterior {expected}")
    draws = mean = mcse = None
    if info.get("reference_posterior_name"):
        ref = read_reference_draws(info["reference_posterior_name"], root)
        draws = torch.as_tensor(ref.select(model.param_names), dtype=torch.float64)
        m = read_reference_mean(info["reference_posterior_name"], root)
        mean_np, mcse_np = m.select(model.param_names)
        mean = torch.as_tensor(mean_np, dtype=torch.float64)
        mcse = torch.as_tensor(mcse_np, dtype=torch.float64)
    return PosteriorDBTarget(
        model, reference_draws=draws, reference_mean=mean, reference_mcse=mcse, dtype=dtype
    )
