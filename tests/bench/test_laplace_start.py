"""The benchmarks start from bdlkit's own diagonal Laplace approximation (not a copy)."""

import bdlkit.algorithms.vi.laplace
from bdlkit.bench import laplace_start, posteriordb


def test_the_bench_start_is_the_core_laplace_start():
    for name in ("LaplaceStart", "find_mode", "laplace_start", "standardized"):
        assert getattr(laplace_start, name) is getattr(bdlkit.algorithms.vi.laplace, name)
    assert posteriordb.laplace_start is bdlkit.algorithms.vi.laplace.laplace_start
