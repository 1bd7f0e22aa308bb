"""What the VI algorithm tests share: Gaussian Targets with known answers (float64), a run
loop and checks of checkpoint round trips and of full-covariance recovery."""

import warnings

import torch

import bdlkit
from bdlkit.core.serialization import state_from_tensors, state_to_tensors
from bdlkit.core.tree import tree_leaves

F64 = torch.float64


def quiet_flow(module, problem, **kw):
    """``module.build(problem, family="flow", **kw)`` without score_vi's experimental-flow
    warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # score_vi's flow is experimental
        return module.build(problem, **{"family": "flow", **kw})


def diag_gaussian(std: torch.Tensor, seed: int = 0):
    """N(m, diag std²) with m = std ⊙ N(0, I) (seeded); returns the target and m."""
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(len(std), generator=g, dtype=F64) * std
    target = bdlkit.Target(lambda th: -0.5 * (((th - mean) / std) ** 2).sum(-1), dim=len(std),
                           dtype=F64)
    return target, mean


def correlated_gaussian(d: int = 5, seed: int = 1):
    """N(m, Σ*) with Σ* = AAᵀ + 0.5 I (as in ``docs/vi.md``); returns the target, m, Σ*
    and Λ = Σ*⁻¹."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(d, d, generator=g, dtype=F64)
    cov = a @ a.T + 0.5 * torch.eye(d, dtype=F64)
    prec = torch.linalg.inv(cov)
    mean = torch.randn(d, generator=g, dtype=F64)

    def log_prob(th):
        z = th - mean
        return -0.5 * ((z @ prec) * z).sum(-1)

    return bdlkit.Target(log_prob, dim=d, dtype=F64), mean, cov, prec


def run(alg, steps, params, seed=0, batch=None):
    """``steps`` steps of ``alg`` from ``params``; the last state and info."""
    state = alg.init(params, generator=torch.Generator().manual_seed(seed))
    info = {}
    for _ in range(steps):
        state, info = alg.step(state, batch)
    return state, info


def assert_restores(alg, state, template, batch=None):
    """``state`` survives a checkpoint round trip into ``template``'s structure, leaf for
    leaf, and the restored state steps to the same λ; returns the restored state and the
    step taken from ``state``."""
    restored = state_from_tensors(template, state_to_tensors(state))
    assert restored.step == state.step
    for a, b in zip(tree_leaves(state), tree_leaves(restored), strict=True):
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
    s1, _ = alg.step(state, batch)
    s2, _ = alg.step(restored, batch)
    assert all(torch.equal(a, b) for a, b in zip(tree_leaves(s1.lam), tree_leaves(s2.lam)))
    return restored, s1


def assert_recovers_full_gaussian(alg, state, info, mean, cov, tol=1e-6):
    """A full-covariance approximation that equals N(mean, cov) to ``tol``, with no rejected
    update, consistent accessors, float64 kept and the numeric info keys."""
    q = alg.approximation(state)
    assert state.rejected == 0 and alg.status(state) == "ok"
    assert (q.mean - mean).abs().max() < tol
    assert (q.cov - cov).abs().max() < tol
    assert torch.equal(alg.params(state), q.mean)
    assert q.sample(7, torch.Generator().manual_seed(0)).shape == (7, len(mean))
    assert state.lam.mean.dtype == F64
    assert set(info) == {"log_prob", "elbo", "accepted", "rejected"}


def crash_then_resume(module, make_runner, tmp_path, monkeypatch, at: int = 17):
    """Run ``make_runner(dir)`` uninterrupted, then crash one of ``module.ALGORITHM``'s runs
    at step ``at`` and resume it; assert the two final states are bit-identical; return
    both results."""
    full = make_runner(tmp_path / "full").fit()
    inner = module.ALGORITHM.step

    def crash(self, state, batch):
        if state.step == at:
            raise RuntimeError("simulated crash")
        return inner(self, state, batch)

    with monkeypatch.context() as patch:
        patch.setattr(module.ALGORITHM, "step", crash)
        try:
            make_runner(tmp_path / "cut").fit()
        except RuntimeError as err:
            assert "simulated crash" in str(err)
        else:
            raise AssertionError("the run did not reach the simulated crash")
    resumed = make_runner(tmp_path / "cut").fit(resume=True)
    a, b = state_to_tensors(full.state), state_to_tensors(resumed.state)
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    return full, resumed
