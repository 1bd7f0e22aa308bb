"""Memory a call allocates, from the autograd profiler's allocation records
(``profile_memory=True``): deterministic (bytes, not timings) and on the CPU, where torch
keeps no allocator counters. The profiler without Kineto starts in milliseconds (Kineto's
first start takes seconds)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.autograd import profiler


def _events(fn: Callable[[], Any]) -> list[Any]:
    with profiler.profile(profile_memory=True, use_kineto=False) as prof:
        fn()
    return sorted(prof.function_events, key=lambda e: e.time_range.start)


def peak_allocated(fn: Callable[[], Any]) -> int:
    """The peak, in bytes, of the memory ``fn`` holds at once (allocations minus frees, in
    the order the operators ran; its result counts until it returns)."""
    live = peak = 0
    for event in _events(fn):
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak


def largest_allocation(fn: Callable[[], Any]) -> int:
    """The most bytes one operator of ``fn`` allocated (net of what it freed itself)."""
    return max((e.self_cpu_memory_usage for e in _events(fn)), default=0)
