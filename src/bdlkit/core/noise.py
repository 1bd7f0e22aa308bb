"""Standard normal noise for a large buffer on the CPU, drawn in fixed chunks: one stream.

:func:`standard_normal` draws a buffer of more than :data:`CHUNK` values as fixed chunks
of :data:`CHUNK` values:

* one call draws ``624·c`` 32-bit words from ``generator`` (``c`` chunks), and chunk ``i``
  is filled by its own mt19937 whose whole state is the ``i``-th row of 624 words (a state
  drawn at random from the main stream: no 32-bit seed, so no two chunks of a run share a
  stream by a seed collision, as they would with ``manual_seed``, which keeps 32 bits);
* the chunks are filled one after the other on the calling thread.

The numbers depend only on the generator's state, the buffer's size and :data:`CHUNK`,
never on the thread count (tested), so a state saving the one generator resumes
bit-exactly. A buffer of at most :data:`CHUNK` values, a CUDA (or other device's)
generator and a :class:`~bdlkit.core.rng.NoiseTape` draw as before (one ``normal_`` on the
device's own generator; Philox on CUDA is parallel already).

Why chunks, and why no threads. ``torch.randn(..., generator=g)`` on the CPU is serial (one
mt19937): 269 322 float32 normals, an MLP 784-256-256-10's parameters, cost about 0.9 ms.
The chunks were made so that threads could fill them in parallel, and at first a pool of
Python threads did (``normal_`` releases the GIL). Measured on 2 cores at 2 torch
threads, that pool made things slower, not faster, and not only the draw:

* right after an OpenMP-parallel operation (``exp``), a chunked draw took 2.3 ms against
  1.1 ms for one ``normal_`` (likely because torch's OpenMP workers spin for a while after
  a parallel region, on the core the pool thread needs);
* every other operation of the process slowed down once the pool had run: in the
  benchmark's interleaved MLP rounds a plain torch SGD step took 2.4 ms against 1.6 ms
  without the pool, and ivon-opt's step 6.1 against 4.3 ms. The pool thread's
  allocations live in a second glibc malloc arena; with ``MALLOC_ARENA_MAX=1`` most of
  the slowdown went away.

So the chunks are filled serially: for the MLP's 269 322 values about 0.1 ms more than
one ``normal_`` of about 0.95 ms (the chunks' 624-word states and a generator state set
per 65 536 values), and the stream is kept: checkpoints of the threaded version resume
with the same numbers.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

from bdlkit.core import rng

#: The number of values in a chunk, which defines the stream (another would change every
#: draw of more values).
CHUNK = 1 << 16
#: mt19937's state: 624 32-bit words, at these int64 slots of a CPU generator's state.
_WORDS = 624
_FIRST_WORD = 3


def standard_normal(shape: tuple[int, ...], generator: torch.Generator | rng.NoiseTape,
                    dtype: torch.dtype, device: torch.device | str) -> Tensor:
    """Standard normals of ``shape`` (module docstring: chunked on the CPU above
    :data:`CHUNK` values, else :func:`bdlkit.core.rng.normal`)."""
    numel = math.prod(shape)
    if isinstance(generator, rng.NoiseTape) or numel <= CHUNK \
            or torch.device(device).type != "cpu" or generator.device.type != "cpu":
        return rng.normal(shape, generator, dtype, device)
    out = torch.empty(shape, dtype=dtype, device=device)
    chunks = -(-numel // CHUNK)
    states = chunk_states(generator, chunks)
    flat = out.view(-1)
    gen = torch.Generator()
    for i in range(chunks):
        gen.set_state(states[i].clone())  # a view would be read from its storage's start
        flat[i * CHUNK:(i + 1) * CHUNK].normal_(generator=gen)
    return out


def chunk_states(generator: torch.Generator, chunks: int) -> Tensor:
    """``chunks`` mt19937 generator states (uint8 rows), each with 624 words drawn from
    ``generator``, positioned at the start of their stream as a freshly seeded one."""
    words = torch.randint(0, 2**32, (chunks, _WORDS), generator=generator, dtype=torch.int64)
    states = _state_template().repeat(chunks, 1)
    states.view(torch.int64)[:, _FIRST_WORD:_FIRST_WORD + _WORDS] = words
    return states


@functools.cache
def _state_template() -> Tensor:
    """A freshly seeded CPU generator's state, checked to hold the mt19937 words where this
    module writes them (seed s: word 0 = s, word 1 = 1812433253·(s ^ s >> 30) + 1)."""
    seed = 5489
    state = torch.Generator().manual_seed(seed).get_state()
    words = state.view(torch.int64)
    second = (1812433253 * (seed ^ (seed >> 30)) + 1) % 2**32
    if state.numel() % 8 or words.numel() < _FIRST_WORD + _WORDS \
            or int(words[_FIRST_WORD]) != seed or int(words[_FIRST_WORD + 1]) != second:
        raise RuntimeError(
            f"torch {torch.__version__} lays out a CPU generator's state differently from "
            "what bdlkit.core.noise expects (mt19937 words at int64 slots 3-626); install "
            "the torch version bdlkit was released with")
    return state


__all__ = ["CHUNK", "chunk_states", "standard_normal"]
