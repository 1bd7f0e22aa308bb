"""Per-coordinate networks evaluated over fixed-size chunks of a flat vector.

The learned samplers run a small network on every coordinate of θ: L2E's kinetic MLP
(9 → 32 → 32 → 2, :mod:`bdlkit.l2e.kinetic`) and Meta-SGMCMC's Q_f and D_f (2 or 3 → 10 → 1,
:mod:`bdlkit.meta_sgmcmc.dynamics`). On all d coordinates at once their inputs and hidden
activations are d × (inputs + hidden) floats, several times the parameters themselves;
evaluated a chunk of coordinates at a time, the hidden activations of one evaluation hold
at most :data:`CHUNK_FLOATS` floats whatever d: a network of ``hidden`` units runs
:func:`chunk_size` (``hidden``) coordinates at a time. The networks act on each coordinate
alone (L2E's per-tensor normalisation is computed before, over whole tensors), so the
chunked result is the unchunked one to float rounding (tested in float64).
"""

from __future__ import annotations

#: The floats of hidden activations one evaluation of a per-coordinate network holds at
#: most (2 MB in float32), the one bound of its transient memory: 16 384 coordinates of
#: L2E's MLP (32 units), 52 428 of Meta-SGMCMC's networks (10 units). Measured on the
#: 269 322 parameters of the efficiency benchmark's MLP (interleaved, two threads): L2E's
#: update was fastest from 8 192 to 32 768 coordinates per chunk, 2.4x faster than
#: unchunked (its activations stay in the cache); Meta-SGMCMC's at 65 536 (its element-wise
#: terms are cheap, and torch splits an operation over two threads from 32 768 values on).
CHUNK_FLOATS = 2**19


def chunk_size(hidden: int) -> int:
    """The coordinates per evaluation of a per-coordinate network of ``hidden`` units:
    ``CHUNK_FLOATS // hidden``.

    Args:
        hidden: the widest hidden layer's units, a positive integer.
    """
    return max(1, CHUNK_FLOATS // hidden)


def spans(n: int, chunk: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` covering ``range(n)`` in pieces of ``chunk`` (the last
    shorter); one piece ``(0, 0)`` for ``n = 0``.

    Args:
        n: the length to cover.
        chunk: the length of a piece, a positive integer.
    """
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive integer, got {chunk!r}")
    return [(a, min(a + chunk, n)) for a in range(0, max(n, 1), chunk)]


__all__ = ["CHUNK_FLOATS", "chunk_size", "spans"]
