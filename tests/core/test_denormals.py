"""Denormals flushed around a step (bdlkit.core.denormals), the caller's setting restored."""

import pytest
import torch

from bdlkit.core import denormals


@pytest.fixture(params=[False, True], ids=["caller_off", "caller_on"])
def caller_setting(request):
    """The caller's setting, restored to off (the process default) after the test."""
    torch.set_flush_denormal(request.param)
    yield request.param
    torch.set_flush_denormal(False)


def test_flushing_reads_torchs_setting(caller_setting):
    smallest = torch.tensor([1], dtype=torch.int32).view(torch.float32)  # 1.4e-45
    assert denormals.flushing() is caller_setting
    assert bool((smallest * 1.0)[0] == 0) is caller_setting  # what torch's kernels see


def test_a_flushed_step_runs_flushed_and_leaves_the_setting_as_it_found_it(caller_setting):
    seen = []

    @denormals.flushed
    def step(x):
        seen.append(denormals.flushing())
        return x * 1e-30

    assert step(torch.tensor([1e-10]))[0] == 0  # 1e-40 is a denormal: flushed
    assert seen == [True]
    assert denormals.flushing() is caller_setting

    @denormals.flushed
    def fails():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fails()
    assert denormals.flushing() is caller_setting
