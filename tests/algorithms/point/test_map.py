import torch

import bdlkit


def test_map_reaches_the_blr_posterior_mode(blr):
    model, data, mean, _ = blr
    res = bdlkit.infer(model, "map", data=data, batch_size=100, steps=1500, lr=0.05)
    assert torch.allclose(res.params["weight"].flatten(), mean, atol=1e-4)


def test_map_with_sgd_momentum_on_a_target():
    t = bdlkit.Target(lambda th: -0.5 * ((th - 3.0) ** 2).sum(-1), dim=4, dtype=torch.float64)
    res = bdlkit.infer(t, "map", steps=300, lr=0.1, optimizer="sgd", momentum=0.5)
    assert torch.allclose(res.params, torch.full((4,), 3.0, dtype=torch.float64), atol=1e-6)
    assert res.sample(5).shape == (5, 4)
