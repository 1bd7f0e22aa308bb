"""OOD AUROC/AUPR, agreement and total variation against naive references."""

import numpy as np
import pytest
import torch

from bdlkit.evaluation.predictive import ClassificationBMA
from bdlkit.metrics import (
    agreement,
    auroc_aupr,
    load_reference,
    max_prob_score,
    ood_auroc,
    ood_metrics,
    predictive_entropy,
    total_variation,
)


def naive_auroc(neg, pos):
    """P(score_pos > score_neg) + ½ P(tie), by looping over every pair."""
    total = 0.0
    for p in pos:
        for n in neg:
            total += 1.0 if p > n else 0.5 if p == n else 0.0
    return total / (len(pos) * len(neg))


def naive_average_precision(neg, pos):
    scores = [(s, 0) for s in neg] + [(s, 1) for s in pos]
    thresholds = sorted({s for s, _ in scores}, reverse=True)
    ap, prev_recall = 0.0, 0.0
    for t in thresholds:
        tp = sum(1 for s, y in scores if s >= t and y == 1)
        fp = sum(1 for s, y in scores if s >= t and y == 0)
        recall = tp / len(pos)
        ap += (recall - prev_recall) * tp / (tp + fp)
        prev_recall = recall
    return ap


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auroc_and_aupr_match_pairwise_references_with_ties(seed):
    g = torch.Generator().manual_seed(seed)
    neg = torch.randint(0, 6, (40,), generator=g).double()  # many ties
    pos = torch.randint(2, 9, (30,), generator=g).double()
    auroc, aupr = auroc_aupr(neg, pos)
    assert auroc == pytest.approx(naive_auroc(neg.tolist(), pos.tolist()), abs=1e-12)
    assert aupr == pytest.approx(naive_average_precision(neg.tolist(), pos.tolist()), abs=1e-12)


def test_identical_inputs_give_chance_and_separated_give_one():
    probs = torch.softmax(torch.randn(50, 4, generator=torch.Generator().manual_seed(0)), -1)
    assert ood_auroc(probs, probs) == 0.5
    confident = torch.eye(4)[torch.arange(50) % 4]
    uniform = torch.full((20, 4), 0.25)
    assert ood_auroc(confident, uniform) == 1.0


def test_entropy_and_max_prob_scores():
    probs = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    assert torch.allclose(predictive_entropy(probs), torch.tensor([0.0, np.log(2)]).double())
    assert max_prob_score(probs).tolist() == [-1.0, -0.5]


def test_ood_metrics_for_every_score():
    def bma(logits, spread):
        lp = torch.log_softmax(logits, -1).double()
        return ClassificationBMA(lp, -(lp.exp() * lp).sum(-1) - spread, 8)

    g = torch.Generator().manual_seed(0)
    inside = bma(5 * torch.randn(60, 3, generator=g), torch.zeros(60))
    outside = bma(0.1 * torch.randn(40, 3, generator=g), torch.full((40,), 0.3))
    values = ood_metrics(inside, outside)
    assert set(values) == {f"ood_{m}{s}" for m in ("auroc", "aupr") for s in ("", "_maxprob",
                                                                               "_mi")
                           } | {"ood_aupr_base_rate"}
    assert values["ood_aupr_base_rate"] == 40 / 100
    assert values["ood_auroc"] > 0.9 and values["ood_auroc_maxprob"] > 0.9
    assert values["ood_auroc_mi"] > 0.9  # higher mutual information outside


def test_a_random_score_has_the_base_rate_as_its_aupr():
    g = torch.Generator().manual_seed(1)
    inside, outside = torch.rand(3000, generator=g), torch.rand(7000, generator=g)
    aupr = auroc_aupr(inside, outside)[1]
    assert abs(aupr - 0.7) < 0.02  # the base rate; MC error ~0.005


def test_ood_bad_input():
    with pytest.raises(ValueError, match="same K"):
        ood_auroc(torch.ones(3, 2) / 2, torch.ones(3, 3) / 3)
    with pytest.raises(ValueError, match="non-empty"):
        auroc_aupr(torch.zeros(0), torch.zeros(3))


def test_agreement_and_total_variation_against_loops():
    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(30, 5, generator=g), -1)
    q = torch.softmax(torch.randn(30, 5, generator=g), -1)
    agree = np.mean([int(np.argmax(a) == np.argmax(b)) for a, b in zip(p.numpy(), q.numpy())])
    tv = np.mean([0.5 * sum(abs(x - y) for x, y in zip(a, b)) for a, b in zip(p.numpy(),
                                                                                q.numpy())])
    assert agreement(p, q) == pytest.approx(agree)
    assert total_variation(p, q) == pytest.approx(tv, abs=1e-7)
    assert agreement(p, p) == 1.0 and total_variation(p, p) == 0.0
    one_hot = torch.eye(5)[:2]
    assert total_variation(one_hot, one_hot.flip(0)) == 1.0
    with pytest.raises(ValueError, match="aligned"):
        agreement(p, q[:5])


def test_load_reference_formats_and_errors(tmp_path):
    probs = np.full((4, 3), 1 / 3)
    np.save(tmp_path / "r.npy", probs)
    np.savez(tmp_path / "r.npz", probs=probs, other=probs)
    assert torch.equal(load_reference(tmp_path / "r.npy"), torch.from_numpy(probs))
    assert load_reference(tmp_path / "r.npz").shape == (4, 3)
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match="cannot read"):
        load_reference(tmp_path / "obj.npy")  # no unpickling
    with pytest.raises(FileNotFoundError):
        load_reference(tmp_path / "missing.npy")
    with pytest.raises(ValueError, match="unsupported"):
        (tmp_path / "r.txt").write_text("1")
        load_reference(tmp_path / "r.txt")
