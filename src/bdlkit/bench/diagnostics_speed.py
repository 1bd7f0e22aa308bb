"""The ``diagnostics`` suite: bdlkit's batched R̂/ESS against ArviZ, same draws, one process.

Draws: ``chains`` AR(1) chains (ρ = 0.5) of ``draws`` steps for ``coords`` coordinates,
float64. Timed: ``rhat_vehtari21`` vs ``arviz.rhat(method="rank")`` and
``ess_bulk_vehtari21`` vs ``arviz.ess(method="bulk")``; ArviZ loops over coordinates in
Python, so it is timed on ``arviz_coords`` of them and scaled linearly (the per-coordinate
cost is constant). The largest absolute difference between the two on those coordinates
is recorded as a correctness check.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bdlkit.bench.common import prepare_bench_out, write_results
from bdlkit.diagnostics import ess_bulk_vehtari21, rhat_vehtari21

DESCRIPTION = "batched R-hat/ESS in torch vs ArviZ on the same chains (speed ratio, max diff)"


def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True, coords: int | None = None, arviz_coords: int | None = None,
        draws: int = 1000) -> list[dict[str, Any]]:
    import arviz as az

    prepare_bench_out(out)
    chains = 4
    coords = coords or (20_000 if quick else 50_000)
    arviz_coords = min(coords, arviz_coords or (200 if quick else 1000))
    x = _ar1(chains, draws, coords, 0.5, seed)
    sub = az.convert_to_dataset(x[..., :arviz_coords].numpy())  # variable "x"
    rows = []
    for name, ours, theirs in (
        ("rhat (rank)", rhat_vehtari21, lambda a: az.rhat(a, method="rank")),
        ("ess (bulk)", ess_bulk_vehtari21, lambda a: az.ess(a, method="bulk")),
    ):
        start = time.perf_counter()
        mine = ours(x)
        t_ours = time.perf_counter() - start
        start = time.perf_counter()
        ref = np.asarray(theirs(sub)["x"])
        t_ref = (time.perf_counter() - start) * coords / arviz_coords
        diff = float(np.nanmax(np.abs(mine[:arviz_coords].numpy() - ref)))
        rows.append({"diagnostic": name, "coords": coords, "bdlkit_s": t_ours,
                     "arviz_s_scaled": t_ref, "speedup": t_ref / t_ours, "max_abs_diff": diff})
    write_results(out, "diagnostics", quick, command, "batched R-hat/ESS vs ArviZ",
                  f"{chains} AR(1) chains (rho 0.5) x {draws} draws x {coords} coordinates, "
                  f"float64; ArviZ timed on {arviz_coords} coordinates and scaled", rows,
                  {"chains": chains, "draws": draws, "coords": coords,
                   "arviz_coords": arviz_coords}, floatfmt=".4g")
    return rows


def _ar1(chains: int, draws: int, coords: int, rho: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(chains, draws, coords, generator=g, dtype=torch.float64)
    x = torch.empty_like(noise)
    x[:, 0] = noise[:, 0]
    scale = (1 - rho**2) ** 0.5
    for t in range(1, draws):
        x[:, t] = rho * x[:, t - 1] + scale * noise[:, t]
    return x
