"""Float denormals flushed to zero around a step, the caller's setting restored after.

Where they come from (measured on the efficiency bench's MLP 784-256-256-10, batch 128,
after 300 ADVI steps): a sampled network is confident, some softmax probabilities fall
below float32's smallest normal number (1.2e-38), and the backward of ``log_softmax``
(``grad − exp(log p)·Σ grad``, inside torch) returns denormal entries of ``p − y``; the
backward matrix products and the ReLU backward carry them on (about 13 000 denormal
values per step in the products' outputs, none in any state tensor). The source is
inside torch's kernels, and the VI steps do **not** flush them: on this project's 2-core
AMD EPYC, denormal arithmetic cost nothing measurable (16.7 ms per one-thread step not
flushed, 17.2 flushed), while switching the flush on and off around each step on two
threads made the steps of advi, score_vi and ivon 5 to 60 times slower (advi 312 ms
against 5.3 ms per step): the flag is the calling thread's, so the OpenMP worker computes
with another mode. :func:`flushed` is kept for a caller on a CPU with slow denormals and
one thread; ``bdlkit bench efficiency`` reports each step's ``denormal_speedup`` so that a
machine where they cost shows it.

``torch.set_flush_denormal`` sets the calling thread's floating-point control register
(x86 MXCSR's FTZ and DAZ, aarch64 FPCR's FZ), so the flush covers the work done on that
thread: all of it with one thread, the main thread's share with an OpenMP pool (whose
threads keep the setting they were started with). torch offers no getter for the
setting: :func:`flushing` reads it by multiplying the smallest double denormal by one
(Python's float arithmetic obeys the same register: 50 ns, against 8 µs for a tensor).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

#: The smallest positive double (a denormal) and one: their product is zero exactly while
#: denormals are flushed (module variables, so that the compiler does not fold it).
_SMALLEST, _ONE = 5e-324, 1.0


def flushing() -> bool:
    """Whether denormals are flushed to zero on this thread now."""
    return _SMALLEST * _ONE == 0.0


def flushed(step: Callable[..., Any]) -> Callable[..., Any]:
    """``step`` run with denormals flushed to zero, the thread's setting restored after
    (also when ``step`` raises). Inside a compiled graph (``compile=True``) it runs as it
    is: the setting is the thread's, not the graph's."""
    @functools.wraps(step)
    def run(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling() or flushing() or not torch.set_flush_denormal(True):
            return step(*args, **kwargs)  # compiling, on already, or unsupported here
        try:
            return step(*args, **kwargs)
        finally:
            torch.set_flush_denormal(False)

    return run


__all__ = ["flushed", "flushing"]
