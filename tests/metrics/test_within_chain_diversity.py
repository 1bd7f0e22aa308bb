"""Within-chain diversity against a naive double loop over pairs of draws."""

import itertools

import pytest
import torch

from bdlkit.metrics import within_chain_diversity


def _naive(p):
    s, n, _ = p.shape
    dis, tv = [], []
    for i, j in itertools.combinations(range(s), 2):
        for k in range(n):
            dis.append(float(p[i, k].argmax() != p[j, k].argmax()))
            tv.append(0.5 * float((p[i, k] - p[j, k]).abs().sum()))
    return sum(dis) / len(dis), sum(tv) / len(tv)


def test_matches_naive_pairs():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(7, 11, 4, generator=g, dtype=torch.float64) * 2, -1)
    got = within_chain_diversity(p)
    dis, tv = _naive(p)
    assert got["disagreement"] == pytest.approx(dis, abs=1e-12)
    assert got["tv"] == pytest.approx(tv, abs=1e-12)
    assert 0 < got["disagreement"] < 1 and 0 < got["tv"] < 1


def test_a_chain_that_stands_still_has_none_and_opposite_draws_have_all():
    p = torch.softmax(torch.randn(1, 5, 3), -1).expand(6, 5, 3)
    assert within_chain_diversity(p) == {"disagreement": 0.0, "tv": 0.0}
    hot = torch.eye(2).unsqueeze(1).expand(2, 3, 2)  # draw 0: class 0, draw 1: class 1
    assert within_chain_diversity(hot) == {"disagreement": 1.0, "tv": 1.0}


def test_refuses_a_single_draw_and_nan():
    with pytest.raises(ValueError, match="S >= 2"):
        within_chain_diversity(torch.full((1, 3, 2), 0.5))
    with pytest.raises(ValueError, match="NaN"):
        within_chain_diversity(torch.full((2, 3, 2), float("nan")))
