"""Run health (issue 20 item 2): each check fires on a run that fails it, and not on one
that passes; a real majority-class run is flagged end to end."""

from types import SimpleNamespace

import pytest
import torch

import bdlkit
from bdlkit.evaluation.health import run_health
from bdlkit.evaluation.predictive import ClassificationBMA, RegressionBMA


def _result(kind="sampler", init_std=None, sigma_median=None, num_kept=100):
    rows = None if sigma_median is None else [{"tensor": "all", "median": sigma_median}]
    algorithm = (SimpleNamespace(hyperparameters=lambda: {"init_std": init_std})
                 if init_std is not None else None)
    return SimpleNamespace(kind=kind, algorithm=algorithm, sigma_summary=lambda: rows,
                           num_kept=num_kept)


def _classifier(pred, k=3):
    log_probs = torch.log_softmax(10.0 * torch.nn.functional.one_hot(pred, k).double(), -1)
    return ClassificationBMA(log_probs, torch.zeros(len(pred)), 8)


DS = SimpleNamespace(y_test=torch.tensor([0] * 7 + [1, 2, 2]), y_train=torch.tensor([0, 1]))


def test_a_majority_only_classifier_is_flagged():
    constant = _classifier(torch.zeros(10, dtype=torch.long))
    found = run_health({"accuracy": 0.7}, _result(), constant, DS)
    assert set(found) == {"majority"} and "0.700" in found["majority"]
    good = _classifier(DS.y_test)
    assert run_health({"accuracy": 1.0}, _result(), good, DS) == {}


def test_a_regressor_no_better_than_the_mean_is_flagged():
    y = torch.linspace(-1, 1, 20)
    ds = SimpleNamespace(y_test=y, y_train=torch.zeros(5))
    flat = RegressionBMA(torch.zeros(20), torch.ones(20), 8)
    assert set(run_health({}, _result(), flat, ds)) == {"majority"}
    exact = RegressionBMA(y.clone(), torch.ones(20), 8)
    assert run_health({}, _result(), exact, ds) == {}


@pytest.mark.parametrize(("diag", "expected"), [
    ({"weights_rhat_split_mean": 1.47, "weights_ess_mean": 5.6, "chain_draws": 150},
     {"rhat", "ess"}),
    ({"weights_rhat_split_mean": 1.005, "weights_ess_mean": 120.0, "chain_draws": 150}, set()),
    ({"weights_rhat_split_mean": 1.005, "weights_ess_mean": 12.0, "chain_draws": 20}, set()),
])
def test_rhat_and_ess_against_vehtari_thresholds(diag, expected):
    values = {"accuracy": 1.0, "diagnostics": diag, "num_draws": 150}
    assert set(run_health(values, _result(), _classifier(DS.y_test), DS)) == expected


def test_few_draws_a_point_like_q_and_an_uninformative_aupr_are_flagged():
    good = _classifier(DS.y_test)
    few = _result(num_kept=4)
    assert set(run_health({"accuracy": 1.0, "num_draws": 4}, few, good, DS)) == {"draws"}
    # 100 kept, 4 averaged because `evaluate --num-draws 4` asked for it: the run is fine
    assert run_health({"accuracy": 1.0, "num_draws": 4}, _result(), good, DS) == {}
    vi = _result(kind="vi", init_std=0.01, sigma_median=0.0112)
    assert set(run_health({"accuracy": 1.0}, vi, good, DS)) == {"sigma"}
    moved = _result(kind="vi", init_std=0.01, sigma_median=0.05)
    assert run_health({"accuracy": 1.0}, moved, good, DS) == {}
    ood = {"accuracy": 1.0, "ood_aupr": 0.94, "ood_aupr_base_rate": 0.91}
    assert set(run_health(ood, _result(), good, DS)) == {"ood_aupr"}
    assert run_health({**ood, "ood_aupr": 0.99}, _result(), good, DS) == {}


def test_a_sampler_stuck_on_the_majority_class_is_flagged_end_to_end():
    """Two imbalanced classes whose inputs carry no signal: the BMA predicts the majority
    class, and evaluate says so."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 4, generator=g)
    y = (torch.rand(200, generator=g) < 0.2).long()
    from bdlkit.data.dataset import Dataset
    from bdlkit.evaluation import evaluate

    ds = Dataset("noise", "classification", x[:150], y[:150], x[150:], y[150:], num_classes=2)
    net = torch.nn.Linear(4, 2)
    model = bdlkit.BayesianModel(net, "categorical", prior=1.0, num_data=150)
    result = bdlkit.infer(model, "map", data=(ds.x_train, ds.y_train), steps=200, seed=0)
    values = evaluate(result, ds).metrics
    assert "majority" in values["health"], values["health"]


def test_the_trivial_baseline_is_the_majority_test_class_or_the_training_mean():
    from bdlkit.evaluation.health import trivial_baseline

    labels = SimpleNamespace(y_test=torch.tensor([0, 1, 1, 1]), y_train=torch.tensor([0]))
    assert trivial_baseline(labels) == ("accuracy", 0.75)
    targets = SimpleNamespace(y_test=torch.tensor([1.0, 3.0]), y_train=torch.tensor([2.0]),
                              meta={"y_std": 10.0})
    assert trivial_baseline(targets) == ("rmse", pytest.approx(10.0))
