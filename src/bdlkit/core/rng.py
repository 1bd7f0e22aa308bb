"""Explicit random number generation.

Every random draw in bdlkit comes from an explicit ``torch.Generator``. Algorithm
states carry the generator *state* (a tensor), so a state is a complete,
checkpointable description of a run: ``step`` rebuilds the generator from the
state, draws, and stores the advanced state in the returned state.

Inside a compiled chunk of steps (:mod:`bdlkit.engine.compiled`) the state's generator
is a :class:`NoiseTape` instead: the chunk's standard normals, drawn beforehand from the
real generator in one call, handed out in order. :func:`from_state`, :func:`state_of`
and :func:`normal` pass a tape through, so an algorithm's ``step`` runs unchanged on one.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


class NoiseTape:
    """Standard normals drawn in advance, handed out in the order a step asks for them.

    A tape stands in for a ``torch.Generator`` where one cannot go (a compiled graph,
    which would otherwise break at every ``randn(generator=...)``). ``NoiseTape(None)``
    counts instead: it hands out zeros and records how many normals, of which dtype and
    device, one step draws.

    Args:
        block: the normals, a 1-D tensor, or None to count.
    """

    def __init__(self, block: Tensor | None) -> None:
        self.block = block
        self.used = 0
        self.dtype: torch.dtype | None = None if block is None else block.dtype
        self.device: torch.device | None = None if block is None else block.device

    def normal(self, shape: tuple[int, ...], dtype: torch.dtype,
               device: torch.device | str) -> Tensor:
        """The next ``prod(shape)`` normals, as a fresh tensor of ``shape``."""
        numel = math.prod(shape)
        if self.block is None:
            if self.dtype is not None and (dtype, torch.device(device)) != (self.dtype,
                                                                           self.device):
                raise TypeError("a noise tape holds one dtype and device; this step draws "
                                f"{self.dtype} and {dtype} noise")
            self.dtype, self.device = dtype, torch.device(device)
            self.used += numel
            return torch.zeros(shape, dtype=dtype, device=device)
        if dtype != self.block.dtype:
            raise TypeError(f"the noise tape holds {self.block.dtype}, the step asks for {dtype}")
        if self.used + numel > self.block.numel():
            raise TypeError(f"the noise tape is used up: it holds {self.block.numel()} normals "
                            f"and the steps ask for more (a step drew more than the first "
                            f"step of the run, {self.used} so far)")
        z = self.block[self.used:self.used + numel].view(shape).clone()  # fresh: steps
        self.used += numel                                                # mutate noise
        return z


def normal(shape: tuple[int, ...], generator: torch.Generator | NoiseTape,
           dtype: torch.dtype, device: torch.device | str) -> Tensor:
    """Standard normals of ``shape`` from a generator or a :class:`NoiseTape`."""
    if isinstance(generator, NoiseTape):
        return generator.normal(shape, dtype, device)
    return torch.randn(shape, generator=generator, dtype=dtype, device=device)


def generator(seed: int, device: torch.device | str | None = None) -> torch.Generator:
    """A fresh generator on ``device`` seeded with ``seed``."""
    g = torch.Generator(device=device or "cpu")
    g.manual_seed(int(seed))
    return g


def split(gen: torch.Generator, device: torch.device | str | None = None) -> torch.Generator:
    """A new independent generator whose seed is drawn from ``gen``."""
    seed = int(torch.randint(0, 2**62, (1,), generator=gen).item())
    return generator(seed, device=device or gen.device)


def state_of(gen: torch.Generator | NoiseTape) -> Tensor | NoiseTape:
    """The generator's state as a tensor (stored in algorithm states); a tape is its own."""
    if isinstance(gen, NoiseTape):
        return gen
    return gen.get_state()


def from_state(state: Tensor | NoiseTape, device: torch.device | str = "cpu"
               ) -> torch.Generator | NoiseTape:
    """Rebuild a generator from a state made by :func:`state_of` (a tape is passed on)."""
    if isinstance(state, NoiseTape):
        return state
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
