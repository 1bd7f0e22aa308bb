"""Vehtari et al. (2021) R̂ and ESS against ArviZ, and their statistical behaviour."""

from __future__ import annotations

import logging
import math
import time
import warnings

import numpy as np
import pytest
import torch

from bdlkit.diagnostics import (
    ess_bulk_vehtari21,
    ess_mean,
    ess_tail_vehtari21,
    rank_normalize,
    rhat_bulk,
    rhat_split,
    rhat_tail,
    rhat_vehtari21,
    split_chains,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    az = pytest.importorskip("arviz")

logging.getLogger("arviz").setLevel(logging.ERROR)  # "Array contains NaN-value."

# bdlkit function -> (ArviZ function, method)
PAIRS = {
    "rhat_rank": (rhat_vehtari21, "rhat", "rank"),
    "rhat_bulk": (rhat_bulk, "rhat", "z_scale"),
    "rhat_tail": (rhat_tail, "rhat", "folded"),
    "rhat_split": (rhat_split, "rhat", "split"),
    "ess_bulk": (ess_bulk_vehtari21, "ess", "bulk"),
    "ess_tail": (ess_tail_vehtari21, "ess", "tail"),
    "ess_mean": (ess_mean, "ess", "mean"),
}


def arviz_per_coordinate(a: np.ndarray, which: str, method: str) -> np.ndarray:
    """ArviZ on each ``(chains, draws)`` slice of ``a (chains, draws, coords)``."""
    fn = getattr(az, which)
    return np.array([fn(a[:, :, i], method=method) for i in range(a.shape[2])], dtype=float)


def assert_matches_arviz(a: np.ndarray, names=PAIRS) -> None:
    for name in names:
        ours, which, method = PAIRS[name]
        got = ours(torch.from_numpy(a)).numpy()
        want = arviz_per_coordinate(a, which, method)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=name)


def _cases(ar1):
    rng = np.random.default_rng(7)
    shifted = ar1(3, 4, 300, 6, 0.3)
    shifted[0] += 1.5
    return {
        "iid": rng.standard_normal((4, 500, 6)),
        "ar1_0.5": ar1(1, 4, 400, 6, 0.5),
        "ar1_0.9": ar1(2, 4, 400, 6, 0.9),
        "shifted": shifted,
        "student_t": ar1(4, 4, 300, 6, 0.2, df=2.0),
        "odd_draws": ar1(5, 3, 101, 6, 0.5),
        "ties": rng.integers(0, 4, (4, 100, 6)).astype(float),
        "few_draws": rng.standard_normal((2, 5, 6)),
        "anticorrelated": ar1(6, 2, 60, 6, -0.7),
    }


@pytest.mark.parametrize(
    "case",
    [
        "iid",
        "ar1_0.5",
        "ar1_0.9",
        "shifted",
        "student_t",
        "odd_draws",
        "ties",
        "few_draws",
        "anticorrelated",
    ],
)
def test_matches_arviz(case, ar1):
    assert_matches_arviz(_cases(ar1)[case])


def test_one_chain_ess_matches_arviz_and_rhat_refuses(ar1):
    a = ar1(8, 1, 400, 6, 0.5)
    assert_matches_arviz(a, ["ess_bulk", "ess_tail", "ess_mean"])
    assert np.isnan(az.rhat(a[:, :, 0], method="rank"))  # what ArviZ does instead
    for fn in (rhat_vehtari21, rhat_bulk, rhat_tail):
        with pytest.raises(ValueError, match="at least 2 chains"):
            fn(torch.from_numpy(a))


def test_batched_equals_per_coordinate_arviz(ar1):
    a = ar1(9, 4, 500, 50, 0.6)
    a[1] += 0.3
    assert_matches_arviz(a, ["rhat_rank", "ess_bulk", "ess_tail"])


def test_layout_chunks_and_dtype():
    x = torch.randn(3, 64, 4, 5, generator=torch.Generator().manual_seed(0))
    for fn in (rhat_vehtari21, ess_bulk_vehtari21, ess_tail_vehtari21, ess_mean):
        full = fn(x)
        assert full.shape == (4, 5) and full.dtype == torch.float64
        torch.testing.assert_close(fn(x.reshape(3, 64, 20)).reshape(4, 5), full)
        torch.testing.assert_close(fn(x, chunk_size=3), full, rtol=0, atol=1e-12)
        torch.testing.assert_close(fn(x.double()), full, rtol=0, atol=1e-12)
        scalar = fn(x[:, :, 1, 2])
        assert scalar.shape == () and torch.isclose(scalar, full[1, 2])
        assert fn(torch.zeros(3, 64, 0)).shape == (0,)


def test_torch_sort_path_equals_numpy_sort_path(monkeypatch):
    # CPU tensors are sorted with numpy; other devices use torch.sort. Same numbers.
    from bdlkit.diagnostics import _core

    x = torch.randn(4, 60, 30, generator=torch.Generator().manual_seed(8)).round(decimals=1)
    fns = (rhat_vehtari21, ess_bulk_vehtari21, ess_tail_vehtari21, rank_normalize)
    with_numpy = [fn(x) for fn in fns]
    monkeypatch.setattr(_core, "NUMPY_SORT_ON_CPU", False)
    for fn, want in zip(fns, with_numpy):
        torch.testing.assert_close(fn(x), want, rtol=0, atol=1e-12)


def test_rank_normalize_and_split_chains():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 5, (3, 9, 4)).astype(float)
    z = rank_normalize(torch.from_numpy(a)).numpy()
    for i in range(4):
        np.testing.assert_allclose(z[:, :, i], az.stats.diagnostics._z_scale(a[:, :, i]))
    x = torch.arange(2 * 7).reshape(2, 7, 1)
    halves = split_chains(x)[..., 0].tolist()  # middle draw of each chain dropped
    assert halves == [[0, 1, 2], [7, 8, 9], [4, 5, 6], [11, 12, 13]]
    assert bool((rank_normalize(torch.ones(2, 4, 1)) == 0).all())


def test_tail_prob_argument():
    x = torch.randn(4, 200, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    a = x.numpy()
    got = ess_tail_vehtari21(x, prob=(0.1, 0.8))
    want = [az.ess(a[:, :, i], method="tail", prob=(0.1, 0.8)) for i in range(3)]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    torch.testing.assert_close(ess_tail_vehtari21(x, 0.1), ess_tail_vehtari21(x, (0.1, 0.9)))


# ----------------------------------------------------------- statistical behaviour


def test_rhat_near_one_for_iid_and_large_for_shifted_chains():
    g = torch.Generator().manual_seed(3)
    iid = torch.randn(4, 1000, 200, generator=g)
    assert float(rhat_vehtari21(iid).max()) < 1.01
    shifted = iid.clone()
    shifted[0] += 2.0
    assert float(rhat_vehtari21(shifted).min()) > 1.1
    assert float(rhat_bulk(shifted).min()) > 1.1
    scaled = iid.clone()
    scaled[0] *= 4.0  # same location, different scale: only the tail R̂ sees it
    assert float(rhat_tail(scaled).median()) > 1.1
    assert float(rhat_bulk(scaled).median()) < 1.05


def test_ess_iid_and_ar1(ar1):
    g = torch.Generator().manual_seed(4)
    iid = torch.randn(4, 1000, 100, generator=g)
    total = 4 * 1000
    assert abs(float(ess_bulk_vehtari21(iid).mean()) / total - 1) < 0.15
    assert abs(float(ess_mean(iid).mean()) / total - 1) < 0.15
    for seed, rho in ((10, 0.5), (11, 0.9)):
        x = torch.from_numpy(ar1(seed, 4, 4000, 40, rho))
        expected = 4 * 4000 * (1 - rho) / (1 + rho)
        for fn in (ess_bulk_vehtari21, ess_mean):
            assert abs(float(fn(x).mean()) / expected - 1) < 0.2, (fn.__name__, rho)


# ------------------------------------------------------------------- edge cases


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # ArviZ's 0/0
def test_constant_and_nan_coordinates_match_arviz():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((4, 101, 6))
    a[:, :, 1] = 0.25  # constant coordinate
    a[:, :, 2] = np.repeat([[0.1], [0.2], [0.3], [0.4]], 101, axis=1)  # constant chains
    a[2, 17, 3] = np.nan  # one NaN draw
    a[:, :, 4] = np.tile([-1.0, 1.0], (4, 51))[:, :101]  # folded draws constant
    assert_matches_arviz(a[:, :, [0, 1, 3, 4, 5]])
    x = torch.from_numpy(a)
    assert torch.isnan(rhat_vehtari21(x)[[1, 3]]).all()
    # Chains constant at distinct values: W = 0 < B. bdlkit's variance of a constant chain
    # is exactly 0, so R̂ = inf; ArviZ's np.var leaves rounding noise (inf or ~1e16).
    assert rhat_vehtari21(x)[2] == float("inf")
    assert az.rhat(a[:, :, 2], method="rank") > 1e10
    assert_matches_arviz(a[:, :, [2]], ["ess_bulk", "ess_tail", "ess_mean"])
    split_draws = 4 * 2 * (101 // 2)
    for fn in (ess_bulk_vehtari21, ess_tail_vehtari21, ess_mean):
        out = fn(x)
        assert out[1] == split_draws and torch.isnan(out[3])
        assert torch.isfinite(out[[0, 5]]).all()
    assert torch.isnan(rhat_tail(x)[4]) and rhat_vehtari21(x)[4] == rhat_bulk(x)[4]


def test_more_chains_than_draws_is_computed_with_a_layout_warning():
    """64 short parallel chains (or runs/ranks.py's (chain_groups, draws, probe)) are valid
    input: read as given, as ArviZ does, with a warning naming the (draws, chains) fix."""
    from bdlkit.diagnostics import layerwise_rhat, rhat_split_sommer

    a = np.random.default_rng(3).standard_normal((8, 5, 3))
    x = torch.from_numpy(a)
    for fn in (rhat_vehtari21, ess_bulk_vehtari21, rhat_split_sommer):
        with pytest.warns(UserWarning, match=r"8 chains of 5 draws.*x.transpose\(0, 1\)"):
            out = fn(x)
        assert out.shape[-1] == 3 and torch.isfinite(out).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_matches_arviz(a, ["rhat_rank", "ess_bulk"])
        rows = layerwise_rhat({"w": x})
    assert rows["w"]["num"] == 3 and math.isfinite(rows["all"]["mean"])


@pytest.mark.parametrize(
    "fn", [rhat_vehtari21, rhat_bulk, rhat_tail, ess_bulk_vehtari21, ess_tail_vehtari21, ess_mean]
)
def test_input_errors(fn):
    with pytest.raises(ValueError, match="shape"):
        fn(torch.randn(10))
    with pytest.raises(ValueError, match="at least 4 draws"):
        fn(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="chunk_size"):
        fn(torch.randn(2, 8, 5), chunk_size=0)
    with pytest.raises(ValueError, match="real"):
        fn(torch.randn(2, 8, 5, dtype=torch.complex64))


def test_tail_prob_errors():
    with pytest.raises(ValueError, match="prob"):
        ess_tail_vehtari21(torch.randn(2, 8), prob=(0.1, 0.5, 0.9))
    with pytest.raises(ValueError, match="probabilities"):
        ess_tail_vehtari21(torch.randn(2, 8), prob=1.5)


# -------------------------------------------------------------------------- scale


@pytest.mark.slow
def test_one_million_coordinates():
    x = torch.randn(2, 100, 1_000_000, generator=torch.Generator().manual_seed(6))
    for fn in (rhat_vehtari21, ess_bulk_vehtari21):
        start = time.perf_counter()
        out = fn(x)
        elapsed = time.perf_counter() - start
        print(f"{fn.__name__}: {elapsed:.1f} s for 1e6 coordinates")
        assert out.shape == (1_000_000,) and bool(torch.isfinite(out).all())
        assert elapsed < 300  # a sanity bound (about 6-10 s on 2 CPU cores), not a benchmark
    sub = x[:, :, ::100_000].double().numpy()
    np.testing.assert_allclose(
        out[::100_000].numpy(), arviz_per_coordinate(sub, "ess", "bulk"), rtol=1e-6
    )
