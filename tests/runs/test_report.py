"""report.md and history.png say what they show (issue 43, items 11 and 13): a VI run's
history plots its objective, and an ensemble's final log density is on the others' scale."""

import pytest
import torch

import bdlkit
from bdlkit.runs.report import final_log_density, history_keys


def _regression():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 2, generator=g)
    y = x.sum(-1) + 0.1 * torch.randn(32, generator=g)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    return bdlkit.BayesianModel(net, "gaussian:0.1", prior=1.0, num_data=32), (x, y)


@pytest.mark.parametrize("method", ["advi", "ivon", "score_vi", "gsm", "bam", "fisher_vi"])
def test_every_vi_method_logs_the_objective_that_history_png_plots_first(method):
    model, data = _regression()
    options = {"covariance": "diag"} if method in ("gsm", "bam") else {}
    res = bdlkit.infer(model, method, data=data, steps=4, batch_size=32, seed=0, **options)
    keys = history_keys(res)
    assert keys[0] == res.algorithm.objective == ("loss" if method == "fisher_vi" else "elbo")
    assert keys[1] == "log_prob" and keys[0] in res.history[-1], res.history[-1]


def test_a_samplers_history_plots_its_log_density():
    model, data = _regression()
    res = bdlkit.infer(model, "sgld", data=data, steps=4, batch_size=32, seed=0)
    assert history_keys(res) == ["log_prob"]


def test_the_ensembles_logged_log_density_is_the_mean_over_members_everywhere():
    """log.jsonl (history), the progress bar's postfix and report.md's row show one number:
    the mean over members, on a single model's scale (it was the sum in the log)."""
    from bdlkit.engine.runlog import postfix

    model, data = _regression()
    res = bdlkit.infer(model, "ensemble", data=data, steps=3, batch_size=32, seed=0, members=3)
    row = final_log_density(res)
    last = res.history[-1]
    assert row["value"] == last["log_prob"]
    assert postfix(last)["log_prob"] == f"{row['value']:.4g}"
    assert last["log_prob_min"] <= last["log_prob"] <= last["log_prob_max"]
    assert "mean over the 3 members" in row["item"]
    single = bdlkit.infer(model, "map", data=data, steps=3, batch_size=32, seed=0)
    assert final_log_density(single) == {"item": "final log density (minibatch)",
                                         "value": single.history[-1]["log_prob"]}
