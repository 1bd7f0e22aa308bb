"""Issue 45, item 6: a Target's log_prob must be a floating density connected to theta by
autograd; a detached or integer-valued one is refused at the first evaluation (it was
sampled as a constant density: a random walk), on every path a sampler takes."""

import warnings

import pytest
import torch

import bdlkit
from bdlkit.core.errors import InputError


def gaussian(t):
    return -0.5 * (t**2).sum(-1)


DETACHED = "log_prob's output has no gradient path to theta"
INTEGER = "log_prob returns torch.int64 values; a log density must be floating"


@pytest.mark.parametrize("method", ["sgld", "hmc", "nuts"])
@pytest.mark.parametrize(("log_prob", "message"), [
    (lambda t: gaussian(t).detach(), DETACHED),
    (lambda t: gaussian(t).long(), INTEGER),
])
def test_item6_a_detached_or_integer_density_is_refused_before_sampling(method, log_prob,
                                                                       message):
    target = bdlkit.Target(log_prob, dim=3)
    with pytest.raises(InputError, match=message):
        bdlkit.infer(target, method, steps=5, seed=0, progress=False)


def test_item6_the_oracle_paths_refuse_it_too_and_an_analytic_score_is_trusted():
    detached = bdlkit.Target(lambda t: gaussian(t).detach(), dim=3)
    theta = torch.randn(2, 3)
    with pytest.raises(InputError, match=DETACHED):
        detached.value_and_score(theta)  # plain autograd
    via_numpy = bdlkit.Target(lambda t: torch.as_tensor(gaussian(t).detach().numpy()), dim=3)
    with pytest.raises(InputError, match=DETACHED):
        via_numpy.value_and_score(theta)
    with pytest.raises(InputError, match=DETACHED):
        torch.func.grad(lambda t: detached.log_prob(t).sum())(theta)  # torch.func
    # no gradient taken: the value alone is fine
    assert torch.equal(detached.log_prob(theta), gaussian(theta))
    with pytest.raises(InputError, match=INTEGER):
        bdlkit.Target(lambda t: gaussian(t).long(), dim=3).log_prob(theta)
    with pytest.raises(InputError, match="must return a torch.Tensor"):
        bdlkit.Target(lambda t: float(gaussian(t).sum()), dim=3).log_prob(theta)
    # a density whose gradient is given (here: constant by design) needs no graph
    flat = bdlkit.Target(lambda t: torch.zeros(t.shape[0]), dim=3,
                         score=torch.zeros_like)
    value, score = flat.value_and_score(theta)
    assert float(value) == 0.0 and torch.equal(score, torch.zeros(2, 3))


def flat_by_design(t):
    return torch.zeros(t.shape[0], dtype=t.dtype)


def uniform_box(t):  # U([-1, 1]^2): both branches are constants, so autograd sees no path
    return torch.where((t.abs() < 1).all(-1), 0.0, -torch.inf).to(t.dtype)


@pytest.mark.parametrize(("method", "hyper"), [
    ("sgld", {}), ("hmc", {}), ("nuts", {"max_tree_depth": 3}), ("advi", {})])
def test_item6_the_zero_score_opt_out_holds_on_every_path(method, hyper):
    """score=torch.zeros_like was honoured on the plain path only: hmc (torch.func), nuts
    (Pyro's torch.autograd) and advi's Laplace start (L-BFGS's backward) refused it."""
    target = bdlkit.Target(flat_by_design, dim=2, dtype=torch.float64,
                           score=torch.zeros_like)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = bdlkit.infer(target, method, steps=6, seed=0, progress=False, **hyper)
    assert torch.isfinite(result.sample(4)).all()
    told = " ".join(str(w.message) for w in caught)
    assert "no Laplace start" not in told and "gradient path" not in told


def test_item6_the_opt_out_reaches_every_autograd_consumer():
    given = bdlkit.Target(lambda t: -0.5 * (t**2).sum(-1), dim=2, dtype=torch.float64,
                          score=lambda t: -t)
    flat = bdlkit.Target(flat_by_design, dim=2, dtype=torch.float64, score=torch.zeros_like)
    theta = torch.tensor([[0.5, -1.0], [2.0, 0.0]], dtype=torch.float64)
    leaf = theta.clone().requires_grad_(True)  # a caller's graph (the composable path)
    assert torch.equal(flat.value_and_score(leaf)[1], torch.zeros(2, 2, dtype=torch.float64))
    assert torch.equal(torch.func.grad(lambda t: flat.log_prob(t).sum())(theta),
                       torch.zeros(2, 2, dtype=torch.float64))
    # torch.autograd (Pyro's NUTS, the mode search): the given score is the gradient
    for target, expected in [(flat, torch.zeros(2, 2, dtype=torch.float64)),
                             (given, -theta)]:
        value = target.log_prob_for_autograd(leaf)
        assert torch.equal(value.detach(), target.log_prob(theta))
        (score,) = torch.autograd.grad(value.sum(), leaf)
        assert torch.equal(score, expected)
    plain = bdlkit.Target(lambda t: -0.5 * (t**2).sum(-1), dim=2)  # no score: log_prob itself
    assert plain.log_prob_for_autograd(leaf).grad_fn is not None


def test_item6_a_uniform_box_is_refused_naming_the_opt_out_and_sampled_with_it():
    """A piecewise-constant density looks detached to autograd: refused with the case and
    the opt-out named; with score=torch.zeros_like, hmc samples U([-1, 1]^2) (sd 1/√3)."""
    box = bdlkit.Target(uniform_box, dim=2, dtype=torch.float64, init_scale=0.3)
    with pytest.raises(InputError, match=r"torch\.where\(inside, 0\.0, -inf\).*"
                                         r"pass score=torch\.zeros_like"):
        bdlkit.infer(box, "sgld", steps=5, seed=0, progress=False)
    box = bdlkit.Target(uniform_box, dim=2, dtype=torch.float64, init_scale=0.3,
                        score=torch.zeros_like)
    draws = bdlkit.infer(box, "hmc", steps=600, seed=0, progress=False, step_size=0.5,
                         num_leapfrog=3).sample(500)
    assert bool((draws.abs() < 1).all())
    assert ((draws.std(0) - 3**-0.5).abs() < 0.12).all(), draws.std(0)
