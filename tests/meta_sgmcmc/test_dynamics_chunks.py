"""Meta-SGMCMC's step by chunks (``dynamics.step``, bdlkit.core.chunks): the same step as on
all coordinates at once, and a transient memory bounded by the chunk, not by d."""

import pytest
import torch

from bdlkit.meta_sgmcmc import dynamics as dyn
from memory_helpers import largest_allocation

F64 = torch.float64
C = dyn.Constants()
S = C.scales(500)


def _meta(dtype=F64):
    return {k: v.to(dtype) for k, v in
            dyn.init_meta_params(torch.Generator().manual_seed(2)).items()}


def _state(shape, dtype=F64, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda scale: scale * torch.randn(*shape, generator=g, dtype=dtype)  # noqa: E731
    theta, p, grad, noise = r(1.0), r(0.3), r(0.1), r(1.0)
    memory = dyn.Memory(torch.tensor(0.9, dtype=dtype), p + r(1e-3), r(1.0), r(1.0))
    return theta, p, grad, noise, memory


def _whole(meta, u, theta, p, g, z, memory, t):
    """The step on every coordinate at once, as the sampler took it before the chunks."""
    if memory is None:
        mom = dyn.momentum_terms(meta, C, S, u, p, g)
    else:
        mom = dyn.momentum_terms_fd(meta, C, S, u, p, g, memory)
    p_new = dyn.momentum_update(p, 500 * g, mom, S.eps, t, z)
    pos = (dyn.position_terms(meta, C, u, p_new) if memory is None
           else dyn.position_terms_fd(meta, C, u, p, p_new, mom.q))
    return dyn.position_update(theta, p_new, pos, S.eps, t), p_new, mom.q, pos.q


@pytest.mark.parametrize("gamma", ["finite_difference", "autograd"])
@pytest.mark.parametrize("chunk", [2, 7, 60, 1000])
def test_step_by_chunks_equals_the_step_on_all_coordinates(gamma, chunk):
    """A (3, 4, 5) tensor (60 coordinates, chunks across its rows) and a Target's (4, 15)
    chain stack with one u per chain: float64 rounding, which the finite-difference
    quotients (differences of about 1e-3 in p) magnify a thousandfold."""
    meta = _meta()
    for shape, u in (((3, 4, 5), torch.tensor(1.1, dtype=F64)),
                     ((4, 15), torch.linspace(0.5, 2.0, 4, dtype=F64).unsqueeze(1))):
        theta, p, g, z, memory = _state(shape)
        memory = memory if gamma == "finite_difference" else None
        got = dyn.step(meta, C, S, u, theta, p, g, z, 500, 0.7, memory, chunk=chunk)
        want = _whole(meta, u, theta, p, g, z, memory, 0.7)
        for a, b in zip(got[:4], want, strict=True):
            assert a.shape == shape
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
        assert bool(got.finite)


def test_a_non_finite_term_in_any_chunk_is_reported():
    theta, p, g, z, memory = _state((50,))
    p_prev = memory.p.clone()
    p_prev[37] = p[37]  # a zero difference in time: Γ's quotient 0/1e-7 stays finite...
    g = g.clone()
    g[41] = float("inf")  # ...but an infinite gradient makes D_f's input infinite
    out = dyn.step(_meta(), C, S, torch.tensor(1.0, dtype=F64), theta, p, g, z, 500, 1.0,
                   memory._replace(p=p_prev), chunk=8)
    assert not bool(out.finite)


@pytest.mark.parametrize("gamma", ["finite_difference", "autograd"])
def test_step_allocates_no_hidden_layer_of_all_coordinates(gamma):
    """d = 512 float32 coordinates by chunks of 128: the largest tensor allocated is one of
    the d-sized results or a chunk's hidden layer (chunk × 10), never the networks' hidden
    layer of d × 10 (which the step on all coordinates at once allocates)."""
    d, chunk, itemsize = 512, 128, 4
    meta = _meta(torch.float32)
    theta, p, g, z, memory = _state((d,), torch.float32)
    memory = memory if gamma == "finite_difference" else None
    u = torch.tensor(1.0)

    def step(c):
        return lambda: dyn.step(meta, C, S, u, theta, p, g, z, 500, 1.0, memory, chunk=c)

    assert largest_allocation(step(chunk)) <= itemsize * max(d, dyn.HIDDEN * chunk)
    assert largest_allocation(step(d)) >= itemsize * dyn.HIDDEN * d  # what that rules out
