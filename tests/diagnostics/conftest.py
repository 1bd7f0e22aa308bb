"""Shared sample generators for the diagnostics tests."""

from __future__ import annotations

import numpy as np
import pytest


def ar1_chains(
    seed: int, chains: int, draws: int, coords: int, rho: float, df: float | None = None
) -> np.ndarray:
    """Stationary AR(1) chains ``(chains, draws, coords)`` with unit marginal variance
    (Gaussian innovations, or Student-t with ``df`` degrees of freedom)."""
    rng = np.random.default_rng(seed)
    shape = (chains, draws, coords)
    noise = rng.standard_normal(shape) if df is None else rng.standard_t(df, shape)
    x = np.empty(shape)
    x[:, 0] = noise[:, 0]
    scale = np.sqrt(1.0 - rho**2)
    for t in range(1, draws):
        x[:, t] = rho * x[:, t - 1] + scale * noise[:, t]
    return x


@pytest.fixture
def ar1():
    return ar1_chains
