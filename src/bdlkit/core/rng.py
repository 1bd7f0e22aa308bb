"""Explicit random number generation.

Every random draw in bdlkit comes from an explicit ``torch.Generator``. Algorithm
states carry the generator *state* (a tensor), so a state is a complete,
checkpointable description of a run: ``step`` rebuilds the generator from the
state, draws, and stores the advanced state in the returned state.
"""

from __future__ import annotations

import torch
from torch import Tensor


def generator(seed: int, device: torch.device | str | None = None) -> torch.Generator:
    """A fresh generator on ``device`` seeded with ``seed``."""
    g = torch.Generator(device=device or "cpu")
    g.manual_seed(int(seed))
    return g


def split(gen: torch.Generator, device: torch.device | str | None = None) -> torch.Generator:
    """A new independent generator whose seed is drawn from ``gen``."""
    seed = int(torch.randint(0, 2**62, (1,), generator=gen).item())
    return generator(seed, device=device or gen.device)


def state_of(gen: torch.Generator) -> Tensor:
    """The generator's state as a tensor (stored in algorithm states)."""
    return gen.get_state()


def from_state(state: Tensor, device: torch.device | str = "cpu") -> torch.Generator:
    """Rebuild a generator from a state made by :func:`state_of`."""
    g = torch.Generator(device=device)
    g.set_state(state)
    return g


_MASK64 = (1 << 64) - 1


def fold_in(seed: int, *data: int) -> int:
    """A seed derived from ``seed`` and integers ``data`` (counter-based, stateless).

    SplitMix64 mixing (Steele et al. 2014) of each value in turn, so ``fold_in(s, e)``
    for epochs ``e = 0, 1, ...`` gives well-separated seeds without any generator
    state to checkpoint. Returns a non-negative int below 2**63.
    """
    z = _mix(int(seed) & _MASK64)
    for value in data:
        z = _mix((z + (int(value) & _MASK64)) & _MASK64)
    return z >> 1


def _mix(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)
