"""Block-diagonal flows (more flowed values than a block holds): q₀ is the diagonal
Gaussian, the density is the sampler's change of variables and the blocks are
independent, the table spline is zuko's, parameters and autograd memory grow linearly
with the flowed values."""

import math

import pytest
import torch

from bdlkit.families import flow_modules
from bdlkit.families.flow import FlowFamily

F64 = torch.float64


def _bent(family, seed=0, scale=0.4):
    gen = torch.Generator().manual_seed(seed)
    lam = family.init(torch.linspace(-1, 1, family.features, dtype=F64), 0.8, gen)
    return {k: v + scale * torch.randn(v.shape, generator=gen, dtype=F64)
            if k.startswith("flow.") else v for k, v in lam.items()}


def test_a_block_flow_starts_as_the_diagonal_gaussian():
    family = FlowFamily(12, transforms=2, bins=6, hidden=8, dtype=F64, block=4, flowed=10)
    assert family.blocks == 3 and family._padding == 2  # 10 values in 3 blocks of 4
    mean = torch.linspace(-1, 1, 12, dtype=F64)
    lam = family.init(mean, 0.5, torch.Generator().manual_seed(0))
    theta = torch.randn(16, 12, dtype=F64, generator=torch.Generator().manual_seed(1))
    normal = torch.distributions.Normal(mean, torch.tensor(0.5, dtype=F64))
    assert torch.allclose(family.log_prob(lam, theta), normal.log_prob(theta).sum(-1),
                          atol=1e-12)
    assert torch.allclose(family.score(lam, theta), -(theta - mean) / 0.25, atol=1e-12)
    z = torch.randn(5, 12, dtype=F64, generator=torch.Generator().manual_seed(2))
    head, log_q = family.head(lam, z, log_prob=True)
    assert torch.allclose(head, mean[:10] + 0.5 * z[:, :10], atol=1e-15)
    assert torch.allclose(log_q, normal.log_prob(head @ torch.eye(10, 12, dtype=F64))
                          [:, :10].sum(-1), atol=1e-12)


def test_a_block_flow_is_its_samplers_change_of_variables_with_independent_blocks():
    family = FlowFamily(9, transforms=3, bins=6, hidden=8, dtype=F64, block=4)
    lam = _bent(family)

    def draw(z):
        return family.sample_from(lam, z[None])[0]

    z = torch.randn(9, dtype=F64, generator=torch.Generator().manual_seed(3))
    jacobian = torch.autograd.functional.jacobian(draw, z)
    theta = draw(z)
    expected = torch.distributions.Normal(0.0, 1.0).log_prob(z).sum() \
        - torch.linalg.slogdet(jacobian)[1]
    assert float(family.log_prob(lam, theta[None])) == pytest.approx(float(expected),
                                                                     abs=1e-10)
    _, log_q = family.head(lam, z[None], log_prob=True)  # the one-pass log q
    assert float(log_q) == pytest.approx(float(expected), abs=1e-10)
    blocks = torch.block_diag(*[torch.ones(3, 3)] * 3).bool()  # 9 values: 3 blocks of 3
    assert bool((jacobian[~blocks] == 0).all()) and bool((jacobian[blocks] != 0).all())


def test_the_table_spline_is_zukos_spline():
    from zuko.transforms import MonotonicRQSTransform

    gen = torch.Generator().manual_seed(0)
    phi = torch.randn(400, 23, generator=gen, dtype=F64) * 3
    ours = flow_modules.Spline(8).double()(phi)
    theirs = MonotonicRQSTransform(phi[:, :8], phi[:, 8:16], phi[:, 16:])
    x = torch.randn(400, generator=gen, dtype=F64) * 4  # some beyond the bound: identity
    y, ladj = ours.call_and_ladj(x)
    y_zuko, ladj_zuko = theirs.call_and_ladj(x)
    assert torch.allclose(y, y_zuko, atol=1e-12) and torch.allclose(ladj, ladj_zuko, atol=1e-12)
    back, back_ladj = ours.inverse_and_ladj(y)
    assert torch.allclose(back, x, atol=1e-10) and torch.allclose(back_ladj, -ladj, atol=1e-10)
    assert torch.allclose(ours.inv(y), theirs.inv(y), atol=1e-10)
    zero = flow_modules.Spline(8).double()(torch.zeros(400, 23, dtype=F64))
    assert float(zero.call_and_ladj(x)[1].abs().max()) < 1e-15  # zero: the identity
    assert torch.allclose(zero(x), x, atol=1e-14)


def _flow_parameters(flowed):
    family = FlowFamily(flowed, flowed=flowed)
    return sum(p.numel() for p in family._ops.parameters()), family


def test_parameters_and_autograd_memory_grow_linearly_with_the_flowed_values():
    """The structure, not a timing: flow parameters are constant plus 8 per block, and the
    tensors autograd saves for a draw's log q and its backward double with the values."""
    counts = [_flow_parameters(64 * blocks)[0] for blocks in (10, 20, 40)]
    assert counts[1] - counts[0] == 10 * flow_modules.EMBEDDING
    assert counts[2] - counts[1] == 20 * flow_modules.EMBEDDING
    assert counts[2] < 100_000  # one coupling network per transform, not one per value

    def saved_bytes(flowed):
        family = FlowFamily(flowed, flowed=flowed)
        lam = {k: v.requires_grad_(True) for k, v in
               family.init(torch.zeros(flowed), 0.1, torch.Generator().manual_seed(0)).items()}
        total = []

        def pack(tensor):
            total.append(tensor.numel() * tensor.element_size())
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            z = torch.randn(2, flowed, generator=torch.Generator().manual_seed(1))
            _, log_q = family.head(lam, z, log_prob=True)
        return sum(total)

    one, two, four = (saved_bytes(64 * blocks) for blocks in (16, 32, 64))
    assert four - two == pytest.approx(2 * (two - one), rel=0.02)  # affine in m, not m²
    assert two / one < 2.05
    estimate = [flow_modules.step_bytes(m, m, 64, 3, 8, 32, 1, 4) for m in (4096, 8192, 16384)]
    assert estimate[2] - estimate[1] == pytest.approx(2 * (estimate[1] - estimate[0]), rel=0.01)


def test_a_16384_value_block_builds_small_and_its_memory_estimate_is_bounded():
    count, family = _flow_parameters(16_384)
    assert family.blocks == 256 and count < 100_000
    need = flow_modules.step_bytes(16_384, 16_384, 64, 3, 8, 32, 1, 4)
    assert need < 200 * 2**20  # measured: 113 MB above the process's for score_vi, S = 1


def test_a_flow_that_cannot_fit_is_refused_before_anything_is_built(monkeypatch):
    from bdlkit.algorithms.vi import advi
    from bdlkit.models import MLP
    from bdlkit.problems import BayesianModel

    monkeypatch.setattr(flow_modules, "available_bytes", lambda device: 16 * 2**20)
    with pytest.raises(ValueError, match=r"family='flow' on 100000 values \(1563 blocks of "
                       r"64, 3 couplings, 4 draws\) needs about [0-9.]+ GiB per step, more "
                       r"than the 0.02 GiB free on cpu: flow fewer values \(flow_on="):
        flow_modules.check_memory(100_000, 100_000, 64, 3, 8, 32, 4, torch.float32, "cpu")
    flow_modules.check_memory(100, 10, 64, 3, 8, 32, 1, torch.float32, "cpu")  # fits
    monkeypatch.setattr(flow_modules, "available_bytes", lambda device: 1024)
    monkeypatch.setattr(flow_modules, "build", lambda *a: pytest.fail("built before the check"))
    torch.manual_seed(0)
    problem = BayesianModel(MLP(4, 3, hidden=(8,)), "categorical", num_data=100)
    with pytest.raises(ValueError, match="or use family='spline' or family='diag'"):
        advi.build(problem, family="flow", num_samples=2)


def test_the_moments_of_a_wide_flow_are_drawn_in_bounded_chunks(monkeypatch):
    from bdlkit.families import flow

    monkeypatch.setattr(flow, "MOMENT_VALUES", 5200)  # 5200 // 40: 128 draws at a time
    family = FlowFamily(40, transforms=1, hidden=8, dtype=F64, block=8)
    lam = family.init(torch.zeros(40, dtype=F64), 2.0, torch.Generator().manual_seed(0))
    calls = []
    inner = family._call
    monkeypatch.setattr(family.__class__, "_call", lambda self, p, op, t: calls.append(
        t.shape[0]) or inner(p, op, t))
    mean, std = family.moments(lam)
    assert set(calls) == {128} and len(calls) == flow.MOMENT_DRAWS // 128
    assert float(mean.abs().max()) < 4 * 2.0 / math.sqrt(flow.MOMENT_DRAWS) * 1.5
    assert float((std / 2.0 - 1).abs().max()) < 0.1
