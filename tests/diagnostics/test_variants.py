"""L2E's ESS / R̂ variants (docs/metrics.md, ESS and R-hat) against per-coordinate numpy loops
written directly from the formulas there."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from bdlkit.diagnostics import (
    ess_per_second,
    ess_tfp_single_chain,
    fraction_below,
    layerwise_rhat,
    rhat_split_sommer,
    rhat_tfp_bg98,
)

# ------------------------------------------------------------ naive references


def naive_ess_tfp(x: np.ndarray) -> float:
    """C.7 ``ess_tfp_single_chain`` for one chain x_1 … x_N."""
    n = len(x)
    c = x - x.mean()
    denom = np.sum(c * c) / n
    rho = [np.sum(c[k:] * c[: n - k]) / (n - k) / denom for k in range(n)]
    negative = [k for k in range(n) if rho[k] < 0]
    last = negative[0] - 1 if negative else n - 1
    return n / (-1 + 2 * sum((1 - k / n) * rho[k] for k in range(last + 1)))


def naive_rhat_bg98(x: np.ndarray) -> float:
    """C.8 item 1 for m chains × n draws."""
    m, n = x.shape
    w = np.mean(np.var(x, axis=1, ddof=1))
    b_over_n = np.var(x.mean(axis=1), ddof=1)
    sigma2 = (n - 1) / n * w + b_over_n
    return (m + 1) / m * sigma2 / w - (n - 1) / (m * n)


def naive_rhat_sommer(chain: np.ndarray) -> float:
    """C.8 item 2 for one chain of even length n."""
    n = len(chain)
    z = stats.norm.ppf((stats.rankdata(chain) - 3 / 8) / (n + 1 / 4))
    halves = z.reshape(2, n // 2)
    nh = n // 2
    w = np.mean(np.var(halves, axis=1, ddof=1))
    b_over_nh = np.var(halves.mean(axis=1), ddof=1)
    return math.sqrt(((nh - 1) / nh * w + b_over_nh) / w)


# ------------------------------------------------------------------------- ESS


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9, -0.6])
def test_ess_tfp_single_chain_matches_formula(ar1, rho):
    x = ar1(20, 1, 100, 30, rho)[0]  # (draws, coords)
    got = ess_tfp_single_chain(torch.from_numpy(x)).numpy()
    want = [naive_ess_tfp(x[:, i]) for i in range(x.shape[1])]
    np.testing.assert_allclose(got, want, rtol=1e-9)


def test_ess_tfp_single_chain_ties_layout_and_edges():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, (51, 4, 3)).astype(float)
    x[:, 0, 0] = 2.0  # constant coordinate
    x[7, 1, 1] = np.nan
    got = ess_tfp_single_chain(torch.from_numpy(x))
    assert got.shape == (4, 3)
    assert got[0, 0] == 51  # bdlkit's choice; TFP itself returns NaN (0/0)
    assert torch.isnan(got[1, 1]) and int(torch.isnan(got).sum()) == 1
    for i, j in [(0, 1), (2, 2), (3, 0)]:
        assert math.isclose(float(got[i, j]), naive_ess_tfp(x[:, i, j]), rel_tol=1e-9)
    assert ess_tfp_single_chain(torch.from_numpy(x[:, 2, 2])).shape == ()
    with pytest.raises(ValueError, match="at least 2 draws"):
        ess_tfp_single_chain(torch.zeros(1, 5))
    with pytest.raises(ValueError, match="shape"):
        ess_tfp_single_chain(torch.tensor(1.0))


def test_ess_tfp_single_chain_is_near_n_for_iid():
    x = torch.randn(1000, 2000, generator=torch.Generator().manual_seed(1))
    assert abs(float(ess_tfp_single_chain(x).mean()) / 1000 - 1) < 0.15


def test_ess_per_second():
    ess = torch.tensor([100.0, 300.0])
    torch.testing.assert_close(ess_per_second(ess, 2.0), torch.tensor([50.0, 150.0]))
    assert ess_per_second(82.98, 1.0) == 82.98
    with pytest.raises(ValueError, match="positive"):
        ess_per_second(ess, 0.0)


# ------------------------------------------------------------------------ R-hat


def test_rhat_tfp_bg98_matches_formula(ar1):
    x = ar1(21, 3, 100, 25, 0.7)
    x[0, :, :5] += 1.0
    got = rhat_tfp_bg98(torch.from_numpy(x)).numpy()
    want = [naive_rhat_bg98(x[:, :, i]) for i in range(x.shape[2])]
    np.testing.assert_allclose(got, want, rtol=1e-10)
    assert (got[:5] > 1.2).all()


def test_rhat_tfp_bg98_is_the_variance_ratio_of_identity_rhat():
    # Same W and var⁺ as the classical (square-rooted) R̂ = sqrt(var⁺/W); BG98 corrects it
    # by (m+1)/m and −(n−1)/(mn) and does not take the root.
    x = torch.randn(3, 50, 10, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    m, n = 3, 50
    w = x.var(1).mean(0)
    var_plus = (n - 1) / n * w + x.mean(1).var(0)
    want = (m + 1) / m * var_plus / w - (n - 1) / (m * n)
    torch.testing.assert_close(rhat_tfp_bg98(x), want)


def test_rhat_tfp_bg98_edges():
    x = torch.randn(3, 20, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    x[:, :, 0] = 1.5
    x[:, :, 1] = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)[:, None]
    x[1, 3, 2] = float("nan")
    out = rhat_tfp_bg98(x)
    assert torch.isnan(out[0]) and out[1] == float("inf") and torch.isnan(out[2])
    assert torch.isfinite(out[3])
    with pytest.raises(ValueError, match="at least 2 chains"):
        rhat_tfp_bg98(torch.randn(1, 20, 3))


def test_rhat_split_sommer_matches_formula(ar1):
    x = ar1(22, 3, 100, 20, 0.8)
    x[1, 50:, :4] += 2.0  # second half of chain 1 moved: only that chain is flagged
    x[:, :, 19] = np.round(x[:, :, 19])  # ties
    got = rhat_split_sommer(torch.from_numpy(x)).numpy()
    assert got.shape == (3, 20)
    want = [[naive_rhat_sommer(x[c, :, i]) for i in range(20)] for c in range(3)]
    np.testing.assert_allclose(got, want, rtol=1e-10)
    assert (got[1, :4] > 1.1).all()


def test_rhat_split_sommer_edges():
    x = torch.randn(3, 41, 5, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    x[2, :, 0] = 7.0  # one constant chain
    x[0, 5, 1] = float("nan")  # one NaN draw: only chain 0 of coordinate 1
    x[1, :, 2] = torch.cat([torch.zeros(20), torch.ones(21)])  # halves constant, distinct
    out = rhat_split_sommer(x)
    assert torch.isnan(out[2, 0]) and torch.isfinite(out[:2, 0]).all()
    assert torch.isnan(out[0, 1]) and torch.isfinite(out[1:, 1]).all()
    assert out[1, 2] == float("inf")
    # odd draws: rank all 41, drop the middle z, then split
    chain = x[0, :, 4].numpy()
    z = stats.norm.ppf((stats.rankdata(chain) - 3 / 8) / (41 + 1 / 4))
    halves = np.stack([z[:20], z[21:]])
    w = halves.var(1, ddof=1).mean()
    want = math.sqrt((19 / 20 * w + halves.mean(1).var(ddof=1)) / w)
    assert math.isclose(float(out[0, 4]), want, rel_tol=1e-10)
    with pytest.raises(ValueError, match="at least 4 draws"):
        rhat_split_sommer(torch.randn(2, 3, 4))


# -------------------------------------------------------------------- summaries


def test_fraction_below_ignores_nan():
    values = torch.tensor([1.0, 1.05, float("nan"), 1.3, float("inf")])
    assert fraction_below(values, 1.1) == 2 / 4
    assert fraction_below(values, 1.3) == 2 / 4  # strictly below
    assert math.isnan(fraction_below(torch.tensor([float("nan")]), 1.1))


def test_layerwise_rhat():
    g = torch.Generator().manual_seed(5)
    samples = {
        "fc.weight": torch.randn(3, 100, 4, 5, generator=g),
        "fc.bias": torch.randn(3, 100, 5, generator=g),
    }
    samples["fc.bias"][:, :, 0] = 0.0  # constant: NaN, left out of the statistics
    samples["fc.bias"][0, 50:, 1] += 3.0
    out = layerwise_rhat(samples)
    assert set(out) == {"fc.weight", "fc.bias", "all"}
    keys = {"mean", "std", "frac_below_1.1", "frac_below_1.2", "num"}
    assert all(set(v) == keys for v in out.values())
    assert (out["fc.weight"]["num"], out["fc.bias"]["num"], out["all"]["num"]) == (20, 5, 25)
    per_coord = {k: rhat_split_sommer(v).mean(0).reshape(-1) for k, v in samples.items()}
    bias = per_coord["fc.bias"][1:]
    assert math.isclose(out["fc.bias"]["mean"], float(bias.mean()), rel_tol=1e-12)
    assert math.isclose(out["fc.bias"]["std"], float(bias.std(correction=0)), rel_tol=1e-12)
    assert out["fc.bias"]["frac_below_1.1"] == fraction_below(bias, 1.1) < 1
    pooled = torch.cat([per_coord["fc.weight"], bias])
    assert math.isclose(out["all"]["mean"], float(pooled.mean()), rel_tol=1e-12)
    assert out["all"]["frac_below_1.2"] == fraction_below(pooled, 1.2)
    assert out["fc.weight"]["frac_below_1.1"] > 0.8
    assert "frac_below_1.01" in layerwise_rhat(samples, threshold=(1.01,))["all"]
    with pytest.raises(ValueError, match="reserved"):
        layerwise_rhat({"all": samples["fc.bias"]})
