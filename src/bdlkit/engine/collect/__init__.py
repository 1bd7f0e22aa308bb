"""Collecting MCMC draws during a run: burn-in, thinning, a cap, memory or disk.

:class:`MemoryStore` keeps draws in a list; :class:`DiskStore` streams them to
safetensors shards with a JSON manifest, written atomically, so long runs never hold
all draws in memory and a crash leaves a readable store. Both checkpoint through
``state_dict``/``load_state_dict``. See :mod:`bdlkit.engine.collect.store`.
"""

from __future__ import annotations

from bdlkit.engine.collect.defaults import default_store
from bdlkit.engine.collect.disk import DiskStore
from bdlkit.engine.collect.store import MemoryStore, SampleStore

__all__ = ["DiskStore", "MemoryStore", "SampleStore", "default_store"]
