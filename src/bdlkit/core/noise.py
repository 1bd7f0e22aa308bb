"""Standard normal noise for a large buffer on the CPU: chunks drawn in parallel, one stream.

``torch.randn(..., generator=g)`` on the CPU is serial (one mt19937): 269 322 float32
normals, an MLP 784-256-256-10's parameters, cost about 1 ms, half of a plain SGD step of
that network on two threads. :func:`standard_normal` draws a buffer of more than
:data:`CHUNK` values as fixed chunks of :data:`CHUNK` values instead:

* one call draws ``624·c`` 32-bit words from ``generator`` (``c`` chunks), and chunk ``i``
  is filled by its own mt19937 whose whole state is the ``i``-th row of 624 words (a state
  drawn at random from the main stream: no 32-bit seed, so no two chunks of a run share a
  stream by a seed collision, as they would with ``manual_seed``, which keeps 32 bits);
* the chunks are filled by ``torch.get_num_threads()`` threads (this one and a small pool
  of Python threads: ``normal_`` releases the GIL), each a contiguous run of chunks.

The numbers depend only on the generator's state, the buffer's size and :data:`CHUNK`,
never on the thread count (tested), and ``generator`` advances by the same amount
whatever the thread count: a state saving the one generator still resumes bit-exactly.
A buffer of at most :data:`CHUNK` values, a CUDA (or other device's) generator and a
:class:`~bdlkit.core.rng.NoiseTape` draw as before (one ``normal_`` on the device's own
generator; Philox on CUDA is parallel already).
"""

from __future__ import annotations

import functools
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

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
    workers = max(1, min(torch.get_num_threads(), chunks))
    bounds = [chunks * k // workers for k in range(workers + 1)]
    jobs = [(flat, states, bounds[k], bounds[k + 1]) for k in range(workers)]
    if workers == 1:
        _fill(*jobs[0])
        return out
    pending = [_POOL.executor(workers - 1).submit(_fill, *job) for job in jobs[1:]]
    _fill(*jobs[0])
    for future in pending:
        future.result()
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


def _fill(flat: Tensor, states: Tensor, first: int, stop: int) -> None:
    """Chunks ``first`` to ``stop - 1`` of ``flat``, each from its own state."""
    gen = torch.Generator()
    for i in range(first, stop):
        gen.set_state(states[i].clone())  # a view would be read from its storage's start
        flat[i * CHUNK:(i + 1) * CHUNK].normal_(generator=gen)


class _Pool:
    """The Python threads that fill chunks beside the calling thread (built on first use,
    rebuilt when the thread count changes, forgotten in a forked child, which has none of
    its parent's threads)."""

    def __init__(self) -> None:
        self.forget()
        if hasattr(os, "register_at_fork"):  # POSIX only (no fork on Windows)
            os.register_at_fork(after_in_child=self.forget)

    def forget(self) -> None:
        self.pool: ThreadPoolExecutor | None = None
        self.size = 0
        self.lock = threading.Lock()

    def executor(self, size: int) -> ThreadPoolExecutor:
        """The pool of ``size`` threads."""
        with self.lock:
            if self.pool is None or self.size != size:
                if self.pool is not None:
                    self.pool.shutdown(wait=False)
                self.pool = ThreadPoolExecutor(max_workers=size,
                                               thread_name_prefix="bdlkit-noise")
                self.size = size
            return self.pool


_POOL = _Pool()

__all__ = ["CHUNK", "chunk_states", "standard_normal"]
