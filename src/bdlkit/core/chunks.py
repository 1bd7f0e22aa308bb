"""Per-coordinate networks evaluated over fixed-size chunks of a flat vector.

The learned samplers run a small network on every coordinate of θ: L2E's kinetic MLP
(9 → 32 → 32 → 2, :mod:`bdlkit.l2e.kinetic`) and Meta-SGMCMC's Q_f and D_f (2 or 3 → 10 → 1,
:mod:`bdlkit.meta_sgmcmc.dynamics`). On all d coordinates at once their inputs and hidden
activations are d × (inputs + hidden) floats, several times the parameters themselves;
evaluated :data:`CHUNK` coordinates at a time, the transient memory is CHUNK × (inputs +
hidden) floats whatever d (2 MB per hidden layer of L2E's MLP in float32). The networks act on each coordinate alone
(L2E's per-tensor normalisation is computed before, over whole tensors), so the chunked
result is the unchunked one to float rounding (tested in float64).
"""

from __future__ import annotations

#: The number of coordinates per evaluation of a per-coordinate network, the one bound of
#: its transient memory (chunk × hidden floats). On the 269 322 parameters of the efficiency benchmark's
#: MLP, L2E's update was fastest from 8 192 to 32 768 and Meta-SGMCMC's from 16 384 to
#: 65 536, each about 1.8x faster than unchunked (interleaved timings, one thread): a
#: chunk's activations stay in the cache.
CHUNK = 16_384


def spans(n: int, chunk: int = CHUNK) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` covering ``range(n)`` in pieces of ``chunk`` (the last
    shorter); one piece ``(0, 0)`` for ``n = 0``.

    Args:
        n: the length to cover.
        chunk: the length of a piece, a positive integer.
    """
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive integer, got {chunk!r}")
    return [(a, min(a + chunk, n)) for a in range(0, max(n, 1), chunk)]


__all__ = ["CHUNK", "spans"]
