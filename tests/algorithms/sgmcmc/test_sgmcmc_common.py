"""What the SG-MCMC samplers share: the noise's scale as a factor of the sampler's dtype."""

import pytest
import torch

from bdlkit.algorithms.sgmcmc.common import add_noise, factor
from bdlkit.core.tree import randn_like


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("size", [3, 17, 100_003])
def test_add_noise_scales_by_a_tensor_factor_bit_for_bit_as_by_the_float(dtype, size):
    """On a CPU float32/float64 tensor the scale is a 0-d tensor of its dtype (a Python
    float is cast at every call, twice the time of a small mul_), cached, and the
    product is the float's to the bit: the samplers' iterates do not change."""
    sd = 0.1**0.5
    scale = factor(sd, torch.empty(1, dtype=dtype))
    assert isinstance(scale, torch.Tensor) and scale.dtype == dtype and scale.ndim == 0
    assert factor(sd, torch.empty(1, dtype=dtype)) is scale  # cached
    tree = torch.randn(size, dtype=dtype, generator=torch.Generator().manual_seed(1))
    noisy = add_noise(tree, sd**2, torch.Generator().manual_seed(2))
    z = randn_like(tree, torch.Generator().manual_seed(2))  # the samplers' noise
    expected = z.mul_(sd).add_(tree)
    assert noisy.numpy().tobytes() == expected.numpy().tobytes()


def test_other_dtypes_keep_the_float_factor():
    """A half-precision tensor multiplies by the float (a 0-d half would round the scale
    first)."""
    assert factor(0.3, torch.empty(1, dtype=torch.bfloat16)) == 0.3
