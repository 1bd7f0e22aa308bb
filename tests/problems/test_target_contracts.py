"""Issue 45, item 6: a Target's log_prob must be a floating density connected to theta by
autograd; a detached or integer-valued one is refused at the first evaluation (it was
sampled as a constant density: a random walk), on every path a sampler takes."""

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
