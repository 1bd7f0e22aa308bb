"""Long statistical checks of SGLD (``make test-slow``)."""

import pytest
import torch

import bdlkit


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_acceptance_example_holds_across_seeds(seed):
    target = bdlkit.Target(lambda th: -0.5 * (th**2).sum(-1), dim=3)
    draws = bdlkit.infer(target, "sgld", steps=20000, seed=seed).sample(2000)
    assert (draws.mean(0).abs() < 0.1).all()
    assert ((draws.std(0) - 1).abs() < 0.1).all()


@pytest.mark.slow
def test_blr_posterior_with_minibatches_and_small_steps(blr):
    """Minibatch noise vanishes with the step size: moments within 10 % at lr = 0.01."""
    model, data, mean, cov = blr
    res = bdlkit.infer(
        model,
        "sgld",
        data=data,
        batch_size=20,
        steps=40000,
        lr=0.01,
        seed=0,
        burnin=5000,
        thin=20,
        max_samples=2000,
    )
    w = res.samples["weight"].reshape(-1, 3)
    std = cov.diagonal().sqrt()
    assert ((w.mean(0) - mean).abs() / std).max() < 0.25
    assert torch.allclose(w.std(0), std, rtol=0.1)
