"""The diagonal-Gaussian VI steps on a network's flat vectors (issue 46): run with
the caller's denormal setting left as it was, a fixed short list of element-wise
passes over the vectors beyond the oracle, and a new update-rule version."""

import collections
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import bdlkit
from bdlkit import algorithms
from bdlkit.core import denormals
from bdlkit.core.flat import FlatProblem
from bdlkit.engine.resume import check_fingerprint, run_fingerprint

pytestmark = pytest.mark.usefixtures("one_thread")

#: (method, options, the most passes over d-sized tensors a step may take outside the
#: oracle: the noise, σ, θ, the gradients, copies of λ, m, v and Adam's fused kernel, ...)
CASES = [
    ("advi", {}, 14),
    ("score_vi", {}, 14),
    ("score_vi", {"solver": "closed_form"}, 33),
    ("ivon", {}, 23),
]


def network():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(),
                                  torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                  torch.nn.Linear(64, 3))
    g = torch.Generator().manual_seed(1)
    batch = (torch.randn(32, 20, generator=g), torch.randint(0, 3, (32,), generator=g))
    return bdlkit.BayesianModel(net, "categorical", prior=1.0, num_data=1000), batch


def started(method, options):
    model, batch = network()
    alg = algorithms.get_method(method).build(model, **options).for_run(100)
    state = alg.init(generator=torch.Generator().manual_seed(2))
    state, _ = alg.step(state, batch)
    return alg, state, batch, sum(p.numel() for p in model.module.parameters())


@pytest.fixture(params=[False, True], ids=["caller_off", "caller_on"])
def caller_setting(request):
    torch.set_flush_denormal(request.param)
    yield request.param
    torch.set_flush_denormal(False)


@pytest.mark.parametrize(("method", "options", "passes"), CASES)
def test_the_step_leaves_the_denormal_setting_as_it_found_it(
        method, options, passes, caller_setting, monkeypatch):
    """The step neither flushes nor unflushes denormals: its forward/backward runs in the
    caller's mode, and after the step the process's setting is the caller's, on or off
    (switching it per step on the main thread alone made two-thread steps 5-60x slower:
    bdlkit.core.denormals)."""
    alg, state, batch, _ = started(method, options)
    seen = []
    oracle = FlatProblem.value_and_score

    def watched(self, theta, data):
        seen.append(denormals.flushing())
        return oracle(self, theta, data)

    monkeypatch.setattr(FlatProblem, "value_and_score", watched)
    alg.step(state, batch)
    assert seen and all(s is caller_setting for s in seen)
    assert denormals.flushing() is caller_setting


class _Passes(TorchDispatchMode):
    """Counts the operations that read or write a tensor of at least ``size`` values (views
    aside), outside the oracle."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size, self.paused, self.ops = size, False, collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        if not self.paused and not func.is_view and any(t.numel() >= self.size for t in tensors) \
                and func.overloadpacket.__name__ not in ("empty", "new_empty", "new_full"):
            self.ops[func.overloadpacket.__name__] += 1
        return out


@pytest.mark.parametrize(("method", "options", "passes"), CASES)
def test_the_step_is_a_short_list_of_passes_over_the_flat_vectors(
        method, options, passes, monkeypatch):
    alg, state, batch, size = started(method, options)
    counter = _Passes(size)
    oracle = FlatProblem.value_and_score

    def paused(self, theta, data):
        counter.paused = True
        try:
            return oracle(self, theta, data)
        finally:
            counter.paused = False

    monkeypatch.setattr(FlatProblem, "value_and_score", paused)
    with counter:
        alg.step(state, batch)
    assert sum(counter.ops.values()) <= passes, dict(counter.ops)


@pytest.mark.parametrize("method", ["advi", "score_vi", "ivon"])
def test_a_checkpoint_of_the_former_update_rule_is_refused(method):
    model, _ = network()
    alg = algorithms.get_method(method).build(model)
    expected = run_fingerprint(alg, model, "batch 32", None, "off")
    assert expected["algorithm_version"] == "2"
    with pytest.raises(ValueError, match=f"version 1 of {method}"):
        check_fingerprint({**expected, "algorithm_version": "1"}, expected,
                          Path("ckpt"), method)
