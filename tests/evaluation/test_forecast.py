"""The forecast predictive: per-channel noise, a user's own forecaster module (homo- and
heteroscedastic) through infer → mixture → metrics."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from bdlkit import infer
from bdlkit.evaluation.forecast import forecast_mixture, forecast_values
from bdlkit.problems import BayesianModel
from bdlkit.problems.likelihoods import Gaussian

L, H, C = 12, 6, 3


class LinearForecaster(nn.Module):
    """A user's forecaster: (B, L, C) -> (B, H, out) with out = C or 2C."""

    def __init__(self, out: int) -> None:
        super().__init__()
        self.out = out
        self.net = nn.Linear(L * C, H * out)

    def forward(self, x):
        return self.net(x.reshape(len(x), -1)).reshape(len(x), H, self.out)


def windows(n=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    series = torch.sin(torch.arange(n + L + H, dtype=torch.float64) / 3)[:, None] + 0.1 * (
        torch.randn(n + L + H, C, generator=g, dtype=torch.float64))
    x = series.unfold(0, L, 1)[:n].transpose(1, 2)
    y = series[L:].unfold(0, H, 1)[:n].transpose(1, 2)
    return x.contiguous(), y.contiguous()


def test_per_channel_noise_log_prob_is_the_sum_of_channel_gaussians():
    lik = Gaussian(learn_noise=True, channels=C)
    params = lik.init_params(torch.float64)
    params["likelihood.log_noise"] = torch.tensor([0.0, -1.0, 0.5], dtype=torch.float64)
    f, y = torch.randn(4, H, C, dtype=torch.float64), torch.randn(4, H, C, dtype=torch.float64)
    sigma = params["likelihood.log_noise"].exp()
    expected = torch.distributions.Normal(f, sigma).log_prob(y).sum(dim=(1, 2))
    torch.testing.assert_close(lik.log_prob(f, y, params), expected)
    with pytest.raises(ValueError, match="last dimension"):
        lik.check_targets(y[..., :2], f[..., :2])
    with pytest.raises(ValueError, match="learn_noise"):
        Gaussian(channels=3)


@pytest.mark.parametrize("heteroscedastic", [False, True])
def test_a_users_forecaster_gives_a_mixture_and_metrics(heteroscedastic):
    x, y = windows()
    torch.manual_seed(0)
    net = LinearForecaster(2 * C if heteroscedastic else C).double()
    lik = (Gaussian(heteroscedastic=True) if heteroscedastic
           else Gaussian(learn_noise=True, channels=C))
    problem = BayesianModel(net, lik, prior=1.0, num_data=len(x))
    result = infer(problem, "advi", data=(x, y), steps=200, seed=0, batch_size=32, lr=3e-2)
    mixture = result.forecast(x[:50], num_samples=5)
    assert mixture.loc.shape == (5, 50, H, C) and mixture.num_components == 5
    lo, hi = mixture.interval(0.9)
    assert (lo < mixture.quantile(0.5)).all() and (mixture.quantile(0.5) < hi).all()
    values = forecast_values(mixture, y[:50], None)
    assert set(values) >= {"mse", "mae", "nll", "crps", "coverage_90", "width_90"}
    assert values["mse"] < 0.5 and math.isfinite(values["nll"])  # it learned the sinusoid
    assert 0.5 < values["coverage_90"] <= 1.0


def test_no_draws_is_an_error():
    x, _ = windows(20)
    problem = BayesianModel(LinearForecaster(C).double(), Gaussian(learn_noise=True, channels=C),
                            num_data=20)
    with pytest.raises(ValueError, match="no draws"):
        forecast_mixture(problem, [], x)


def test_persistence_noise_and_a_per_channel_start():
    from bdlkit.data.timeseries import persistence_noise

    x, y = windows()
    noise = persistence_noise(x, y)
    expected = (y - x[:, -1:, :]).square().mean(dim=(0, 1)).sqrt()
    torch.testing.assert_close(noise, expected)
    lik = Gaussian(noise.tolist(), learn_noise=True, channels=C)
    torch.testing.assert_close(lik.init_params(torch.float64)["likelihood.log_noise"],
                               noise.log())
    with pytest.raises(ValueError, match="one initial σ per channel"):
        Gaussian([1.0, 2.0], learn_noise=True, channels=C)
    with pytest.raises(ValueError, match="> 0"):
        Gaussian([1.0, -2.0, 1.0], learn_noise=True, channels=C)
