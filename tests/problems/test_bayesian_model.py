import math

import pytest
import torch
from torch import nn

import bdlkit
from bdlkit.problems import Bernoulli, Gaussian


def closed_form_log_posterior(model, w, x, y, n):
    """(N/B) Σ log N(y | xw, 1) + log N(w | 0, 2²), written out by hand."""
    resid = y - x @ w
    loglik = (-0.5 * resid**2 - 0.5 * math.log(2 * math.pi)).sum() * n / len(x)
    logprior = (-0.5 * (w / 2.0) ** 2 - math.log(2.0) - 0.5 * math.log(2 * math.pi)).sum()
    return loglik + logprior


def test_value_and_score_match_the_closed_form(blr):
    model, (x, y), _, _ = blr
    w = torch.tensor([0.3, -0.1, 0.7], dtype=torch.float64)
    params = {"weight": w.reshape(1, 3)}
    batch = (x[:20], y[:20])
    value, score = model.value_and_score(params, batch)
    expected = closed_form_log_posterior(model, w, x[:20], y[:20], 100)
    assert torch.allclose(value, expected)
    grad = 100 / 20 * x[:20].T @ (y[:20] - x[:20] @ w) - w / 4.0
    assert torch.allclose(score["weight"].flatten(), grad)


def test_minibatch_value_is_unbiased_over_a_partition(blr):
    model, (x, y), _, _ = blr
    params = model.init_params()
    full = model.log_posterior(params, (x, y))
    parts = [model.log_posterior(params, (x[i : i + 25], y[i : i + 25])) for i in range(0, 100, 25)]
    assert torch.allclose(torch.stack(parts).mean(), full)


def test_temperature_divides_the_log_posterior(blr):
    model, (x, y), _, _ = blr
    cold = bdlkit.BayesianModel(
        model.module, Gaussian(1.0), prior=2.0, num_data=100, temperature=0.25
    )
    p = model.init_params()
    assert torch.allclose(cold.log_posterior(p, (x, y)), 4 * model.log_posterior(p, (x, y)))


def test_learned_noise_is_a_parameter(blr):
    model, (x, y), _, _ = blr
    m = bdlkit.BayesianModel(model.module, Gaussian(0.5, learn_noise=True), prior=2.0, num_data=100)
    p = m.init_params()
    assert torch.allclose(
        p["likelihood.log_noise"], torch.tensor(math.log(0.5), dtype=torch.float64)
    )
    _, score = m.value_and_score(p, (x, y))
    assert set(score) == {"weight", "likelihood.log_noise"}


def test_heteroscedastic_gaussian_log_prob_matches_torch_distributions():
    lik = Gaussian(heteroscedastic=True)
    out = torch.randn(6, 2, dtype=torch.float64)
    y = torch.randn(6, dtype=torch.float64)
    std = torch.nn.functional.softplus(out[:, 1]) + 1e-6
    ref = torch.distributions.Normal(out[:, 0], std).log_prob(y)
    assert torch.allclose(lik.log_prob(out, y, {}), ref)


def test_bernoulli_matches_torch_distributions():
    out = torch.randn(7, 1)
    y = torch.randint(0, 2, (7,))
    ref = torch.distributions.Bernoulli(logits=out[:, 0]).log_prob(y.float())
    assert torch.allclose(Bernoulli().log_prob(out, y, {}), ref)


def test_prior_mean_init_centres_on_initial_weights(blr):
    model, _, _, _ = blr
    m = bdlkit.BayesianModel(
        model.module, Gaussian(1.0), prior=bdlkit.IsotropicGaussian(1.0, mean="init"), num_data=100
    )
    p = m.init_params()
    assert torch.allclose(
        m.log_prior(p), torch.tensor(-1.5 * math.log(2 * math.pi), dtype=torch.float64)
    )


def test_unselected_parameters_stay_fixed():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    m = bdlkit.BayesianModel(net, "categorical", prior=1.0, num_data=10, bayesian="last_layer")
    assert set(m.init_params()) == {"2.weight", "2.bias"}
    x, y = torch.randn(5, 4), torch.randint(0, 3, (5,))
    _, score = m.value_and_score(m.init_params(), (x, y))
    assert set(score) == {"2.weight", "2.bias"}


# ---------------------------------------------------------------- bad input


def classifier():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    return bdlkit.BayesianModel(net, "categorical", prior=1.0, num_data=20)


def test_labels_out_of_range_are_refused():
    x, y = torch.randn(20, 4), torch.randint(0, 3, (20,))
    y[7] = 3
    with pytest.raises(ValueError, match=r"labels must be in \[0, 3\)"):
        classifier().validate_data((x, y))


def test_nan_inputs_are_refused_with_row_numbers():
    x, y = torch.randn(20, 4), torch.randint(0, 3, (20,))
    x[4, 2] = float("nan")
    with pytest.raises(ValueError, match=r"NaN or inf in 1 rows \(first: \[4\]\)"):
        classifier().validate_data((x, y))


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="disagree in length"):
        classifier().validate_data((torch.randn(20, 4), torch.randint(0, 3, (19,))))


def test_wrong_input_width_is_refused():
    with pytest.raises(ValueError, match="cannot take inputs of shape"):
        classifier().validate_data((torch.randn(20, 5), torch.randint(0, 3, (20,))))


def test_float_labels_for_categorical_are_refused():
    with pytest.raises(ValueError, match="integer class labels"):
        classifier().validate_data((torch.randn(20, 4), torch.rand(20)))


def test_bad_input_stops_infer_before_any_step():
    model = classifier()
    calls = []
    model.module.register_forward_hook(lambda *a: calls.append(1))
    x, y = torch.randn(20, 4), torch.randint(0, 3, (20,))
    y[0] = -1
    with pytest.raises(ValueError, match="out of range"):
        bdlkit.infer(model, "sgld", data=(x, y), steps=10)
    assert len(calls) <= 1  # only the validation probe ran, no training step


def test_constructor_errors():
    net = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="num_data"):
        bdlkit.BayesianModel(net, num_data=None)
    with pytest.raises(ValueError, match="temperature"):
        bdlkit.BayesianModel(net, num_data=3, temperature=0)
    with pytest.raises(ValueError, match="unknown likelihood"):
        bdlkit.BayesianModel(net, likelihood="poisson", num_data=3)


def test_a_shared_prior_instance_is_not_recentred_by_a_second_model():
    prior = bdlkit.IsotropicGaussian(1.0, mean="init")
    torch.manual_seed(0)
    a = bdlkit.BayesianModel(nn.Linear(2, 1), Gaussian(1.0), prior=prior, num_data=5)
    bdlkit.BayesianModel(nn.Linear(2, 1), Gaussian(1.0), prior=prior, num_data=5)
    expected = torch.tensor(-1.5 * math.log(2 * math.pi))
    assert torch.allclose(a.log_prior(a.init_params()), expected)


def test_heteroscedastic_needs_two_outputs_per_target():
    m = bdlkit.BayesianModel(nn.Linear(2, 3), Gaussian(heteroscedastic=True), num_data=5)
    with pytest.raises(ValueError, match="heteroscedastic: 2 outputs per target"):
        m.validate_data((torch.randn(5, 2), torch.randn(5)))


def test_reserved_likelihood_prefix_is_refused():
    net = nn.Module()
    net.likelihood = nn.Linear(2, 1)
    with pytest.raises(ValueError, match="reserves"):
        bdlkit.BayesianModel(net, Gaussian(1.0), num_data=5)


def test_integer_inputs_reach_an_embedding_model():
    net = nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(8, 3))
    m = bdlkit.BayesianModel(net, "categorical", num_data=6)
    m.validate_data((torch.randint(0, 10, (6, 2)), torch.randint(0, 3, (6,))))
