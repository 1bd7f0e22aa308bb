"""Classification metrics against naive per-sample / per-bin loops and torchmetrics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torchmetrics.classification import MulticlassCalibrationError

from bdlkit.metrics import (
    accuracy,
    brier,
    classification_metrics,
    ece,
    ece_all_class,
    nll,
    reliability_bins,
)


def dirichlet(seed: int, n: int = 200, k: int = 5, conc: float = 0.5):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(k, conc), size=n)
    y = rng.integers(0, k, size=n)
    return torch.tensor(p), torch.tensor(y)


def ref_top_label(p, y, nb=15):
    """L2E: bins lower < conf <= upper; returns (ece, counts)."""
    p, y = np.asarray(p, dtype=np.float64), np.asarray(y)
    edges = [b / nb for b in range(nb + 1)]
    total, counts = 0.0, []
    for b in range(nb):
        members = [i for i in range(len(y)) if edges[b] < p[i].max() <= edges[b + 1]]
        counts.append(len(members))
        if members:
            acc = np.mean([float(np.argmax(p[i]) == y[i]) for i in members])
            conf = np.mean([p[i].max() for i in members])
            total += abs(acc - conf) * len(members) / len(y)
    return total, counts


def ref_all_class(p, y, nb=15):
    """BayesDLL: all K*n probabilities, edges linspace(0, 1+1e-8), lower <= p < upper."""
    p, y = np.asarray(p, dtype=np.float64), np.asarray(y)
    edges = np.linspace(0, 1 + 1e-8, nb + 1)
    bins = [[] for _ in range(nb)]
    for i in range(p.shape[0]):
        for j in range(p.shape[1]):
            for b in range(nb):
                if edges[b] <= p[i, j] < edges[b + 1]:
                    bins[b].append((p[i, j], float(j == y[i])))
    total = sum(len(b) for b in bins)
    gaps = [abs(np.mean([h for _, h in b]) - np.mean([q for q, _ in b])) for b in bins if b]
    ece_ = sum(g * len(b) for g, b in zip(gaps, [b for b in bins if b])) / total
    return ece_, max(gaps)


def ref_scalar(p, y):
    p, y = np.asarray(p, dtype=np.float64), np.asarray(y)
    n, k = p.shape
    acc = sum(float(np.argmax(p[i]) == y[i]) for i in range(n)) / n
    nll_ = -sum(math.log(max(p[i, y[i]], np.finfo(np.float64).tiny)) for i in range(n)) / n
    br = sum(sum((p[i, j] - float(j == y[i])) ** 2 for j in range(k)) for i in range(n)) / n
    return acc, nll_, br


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_against_naive_loops(seed):
    p, y = dirichlet(seed)
    acc, nll_, br = ref_scalar(p, y)
    assert accuracy(p, y) == pytest.approx(acc, abs=1e-12)
    assert nll(p, y) == pytest.approx(nll_, rel=1e-12)
    assert brier(p, y) == pytest.approx(br, rel=1e-12)
    ref_ece, counts = ref_top_label(p, y)
    assert ece(p, y) == pytest.approx(ref_ece, abs=1e-12)
    assert reliability_bins(p, y)["counts"] == counts
    e, m = ece_all_class(p, y)
    re, rm = ref_all_class(p, y)
    assert e == pytest.approx(re, abs=1e-12) and m == pytest.approx(rm, abs=1e-12)
    assert classification_metrics(p, y) == pytest.approx(
        {"accuracy": acc, "nll": nll_, "ece": ref_ece, "brier": br}
    )


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("nb", [5, 15])
def test_matches_torchmetrics_off_edges(seed, nb):
    p, y = dirichlet(seed, n=500)
    tm = MulticlassCalibrationError(num_classes=5, n_bins=nb, norm="l1")(p, y)
    assert ece(p, y, num_bins=nb) == pytest.approx(float(tm), abs=1e-6)


def test_torchmetrics_bins_edges_differently():
    # 0.6 is the edge 9/15: L2E puts 0.6 and 0.55 in (8/15, 9/15]; torchmetrics bins
    # lower <= conf < upper, so 0.6 moves up a bin (0.2 and 0.4 agree only because its
    # float32 edges round above them)
    p = torch.tensor([[0.6, 0.4], [0.55, 0.45]], dtype=torch.float64)
    y = torch.tensor([0, 1])
    assert ece(p, y) == pytest.approx(ref_top_label(p, y)[0]) == pytest.approx(0.075)
    tm = MulticlassCalibrationError(num_classes=2, n_bins=15, norm="l1")(p, y)
    assert float(tm) == pytest.approx(0.475)
    # a wrong confidence of 1.0 joins the last bin in L2E; torchmetrics gives it its own bin
    p = torch.tensor([[1.0, 0.0], [0.95, 0.05]], dtype=torch.float64)
    y = torch.tensor([1, 0])
    assert ece(p, y) == pytest.approx(0.475)
    tm = MulticlassCalibrationError(num_classes=2, n_bins=15, norm="l1")(p, y)
    assert float(tm) == pytest.approx(0.525)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_confidences_on_bin_edges(dtype):
    confs = [0.2, 0.4, 0.6, 0.8, 1.0, 3 / 15, 11 / 15]
    p = torch.tensor([[c] + [(1 - c) / 9] * 9 for c in confs], dtype=dtype)
    y = torch.tensor([0, 1, 0, 1, 0, 0, 1])
    stats = reliability_bins(p, y)
    expected = [0] * 15
    for b in [2, 5, 8, 11, 14, 2, 10]:  # conf = edges[b + 1] belongs to bin b
        expected[b] += 1
    assert stats["counts"] == expected
    assert ece(p, y) == pytest.approx(ref_top_label(p.double(), y)[0], abs=1e-6)


def test_all_class_edges_keep_zero_and_one():
    p = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    y = torch.tensor([0, 2])
    assert ece_all_class(p, y) == (0.0, 0.0)  # zeros in bin 0, ones in bin 14: none dropped
    y = torch.tensor([1, 2])
    e, m = ece_all_class(p, y)
    assert (e, m) == pytest.approx(ref_all_class(p, y))
    assert (e, m) == pytest.approx((1 / 3, 0.5))  # bin 0: 1 hit of 4 zeros; bin 14: 1 of 2
    p = torch.tensor([[0.2, 0.8, 0.0], [0.4, 0.6, 0.0]], dtype=torch.float64)
    assert ece_all_class(p, y) == pytest.approx(ref_all_class(p, y), abs=1e-12)


def test_perfectly_confident():
    p = torch.eye(4, dtype=torch.float64).repeat(3, 1)
    y = torch.arange(4).repeat(3)
    assert classification_metrics(p, y) == {"accuracy": 1.0, "nll": 0.0, "ece": 0.0, "brier": 0.0}
    wrong = (y + 1) % 4
    out = classification_metrics(p, wrong)
    assert out["accuracy"] == 0.0 and out["ece"] == 1.0 and out["brier"] == 2.0
    assert math.isfinite(out["nll"]) and out["nll"] == pytest.approx(-math.log(2.2250738585e-308))


def test_zero_true_probability_is_finite_float32():
    p = torch.tensor([[0.0, 1.0], [0.5, 0.5]], dtype=torch.float32)
    y = torch.tensor([0, 0])
    value = nll(p, y)
    tiny = torch.finfo(torch.float32).tiny
    assert math.isfinite(value)
    assert value == pytest.approx((-math.log(tiny) - math.log(0.5)) / 2, rel=1e-6)


def test_single_sample_and_empty_bins():
    p = torch.tensor([[0.1, 0.7, 0.2]], dtype=torch.float64)
    y = torch.tensor([1])
    assert accuracy(p, y) == 1.0
    assert ece(p, y) == pytest.approx(0.3)
    stats = reliability_bins(p, y)
    assert sum(stats["counts"]) == 1 and stats["counts"][10] == 1
    assert stats["accuracy"][0] == 0.0 and stats["confidence"][0] == 0.0  # empty bin
    assert ece_all_class(p, y) == pytest.approx(ref_all_class(p, y))
    assert brier(p, y) == pytest.approx(0.01 + 0.09 + 0.04)


@pytest.mark.parametrize(
    "p, y, match",
    [
        (torch.rand(4), torch.zeros(4, dtype=torch.long), "shape"),
        (torch.rand(4, 3), torch.zeros(4, 1, dtype=torch.long), "shape"),
        (torch.rand(4, 3), torch.zeros(5, dtype=torch.long), "rows"),
        (torch.rand(4, 3), torch.tensor([0, 1, 3, 0]), r"\[0, 3\)"),
        (torch.rand(4, 3), torch.tensor([0, -1, 0, 0]), r"\[0, 3\)"),
        (torch.tensor([[0.5, float("nan")]]), torch.tensor([0]), "NaN"),
        (torch.rand(2, 3), torch.zeros(2), "integer"),
    ],
)
def test_validation(p, y, match):
    for fn in (accuracy, nll, brier, ece, ece_all_class, reliability_bins):
        with pytest.raises(ValueError, match=match):
            fn(p, y)
