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


@pytest.mark.parametrize("fused", [False, True])
def test_adam_apply_is_params_plus_update_and_leaves_its_inputs_untouched(fused):
    """apply (element-wise, or torch's fused kernel: one call per dtype) equals update's
    step, with two dtypes in one tree, and returns new tensors."""
    g = torch.Generator().manual_seed(0)
    params = {"w": torch.randn(7, 3, generator=g, dtype=torch.float64),
              "b": torch.randn(3, generator=g), "s": torch.zeros(())}
    opt = Adam()
    state = opt.init(params)
    for _ in range(15):
        grads = {k: torch.randn(v.shape, generator=g, dtype=v.dtype) for k, v in params.items()}
        updates, expected_state = opt.update(grads, state, params, 0.05)
        kept = [t.clone() for t in (*params.values(), *grads.values(), *state.mu.values(),
                                    *state.nu.values())]
        new, new_state = opt.apply(grads, state, params, 0.05, fused=fused)
        for old, now in zip(kept, (*params.values(), *grads.values(), *state.mu.values(),
                                   *state.nu.values()), strict=True):
            assert torch.equal(old, now)
        for k in params:
            assert new[k].dtype == params[k].dtype
            tol = 1e-12 if params[k].dtype == torch.float64 else 1e-6
            torch.testing.assert_close(new[k], params[k] + updates[k], rtol=0, atol=tol)
            torch.testing.assert_close(new_state.nu[k], expected_state.nu[k], rtol=1e-6, atol=0)
        params, state = new, new_state
    assert float(state.count) == 15
