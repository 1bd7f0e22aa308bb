"""Issue 45, smaller item: a log density that is NaN at the initial parameters is not
blamed on the step size (step 1 evaluates it at the start, before any step acted)."""

import pytest
import torch

import bdlkit
from bdlkit.core.errors import NonFiniteError


@pytest.mark.parametrize("method", ["sgld", "hmc", "advi"])
def test_a_density_nan_at_the_start_says_so_not_step_size(method):
    # log(θ₀ − 100) is NaN at every starting point N(0, I) draws
    target = bdlkit.Target(lambda t: -0.5 * (t**2).sum(-1) + torch.log(t[:, 0] - 100), dim=3)
    with pytest.raises(NonFiniteError) as err:
        bdlkit.infer(target, method, steps=5, seed=0, progress=False)
    message = str(err.value)
    assert "NaN or infinite at step 1, where it is evaluated at the initial parameters" in message
    assert "initial (or --pretrained) parameters" in message and "check the" in message
    assert "step size is probably too large" not in message


def test_a_density_that_diverges_later_still_names_the_step_size():
    target = bdlkit.Target(lambda t: -0.5e30 * (t**2).sum(-1), dim=3)
    with pytest.raises(NonFiniteError, match=r"at step 2\. The step size is probably too large"):
        bdlkit.infer(target, "sgld", steps=5, seed=0, progress=False)
