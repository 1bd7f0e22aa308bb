"""The functional optimisers match torch.optim step for step."""

import pytest
import torch

from bdlkit.core.optim import SGD, Adam


@pytest.mark.parametrize(
    "ours, theirs",
    [
        (Adam(), lambda p: torch.optim.Adam(p, lr=0.01)),
        (SGD(momentum=0.9), lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)),
    ],
)
def test_matches_torch_optim(ours, theirs):
    target = torch.randn(5, dtype=torch.float64)
    ref = torch.zeros(5, dtype=torch.float64, requires_grad=True)
    opt = theirs([ref])
    params = {"w": torch.zeros(5, dtype=torch.float64)}
    state = ours.init(params)
    for _ in range(20):
        opt.zero_grad()
        ((ref - target) ** 2).sum().backward()
        opt.step()
        grads = {"w": 2 * (params["w"] - target)}
        updates, state = ours.update(grads, state, params, 0.01)
        params = {"w": params["w"] + updates["w"]}
    assert torch.allclose(params["w"], ref.detach(), atol=1e-12)


def test_adam_keeps_a_zero_dim_parameter_in_its_dtype():
    """A learned log σ is 0-dim: the float64 bias corrections must not promote it (its
    checkpoint would then not load into the float32 run)."""
    params = {"w": torch.zeros(3), "log_noise": torch.zeros(())}
    opt = Adam()
    updates, _ = opt.update({k: torch.ones_like(v) for k, v in params.items()},
                            opt.init(params), params, 0.1)
    assert {k: u.dtype for k, u in updates.items()} == {"w": torch.float32,
                                                        "log_noise": torch.float32}
