"""Layer 0, the pure core: the protocol every problem and algorithm follows, pytrees,
seeds, schedules, optimisers over pytrees, errors, safe files, and where draws come
from. Nothing here imports another bdlkit layer (``docs/architecture.md``)."""
