"""The learned samplers (``l2e``, ``meta_sgmcmc``) on flat storage: the iterates of the tree
storage, states of views into one buffer per field (L2E's rolling means one (6, d) buffer),
pure steps, and no hidden layer of the per-coordinate networks over all d coordinates."""

import pytest
import torch
from sampler_helpers import small_classifier
from torch import nn

import bdlkit
from bdlkit.algorithms import get_method
from bdlkit.core.chunks import CHUNK_FLOATS
from bdlkit.core.flat import FlatLayout
from bdlkit.core.tree import tree_leaves
from bdlkit.l2e import kinetic
from bdlkit.meta_sgmcmc import dynamics
from memory_helpers import largest_allocation

CASES = [("l2e", {}), ("l2e", {"kinetic_form": "momentum"}), ("l2e", {"kinetic": "identity"}),
         ("meta_sgmcmc", {}), ("meta_sgmcmc", {"gamma": "autograd"})]


def _run(method, hyper, storage, steps=6):
    model, (x, y) = small_classifier(0.7)
    alg = get_method(method).build(model, storage=storage, **hyper)
    state = alg.init(generator=torch.Generator().manual_seed(3))
    for t in range(steps):
        state, _ = alg.step(state, (x[t % 4 * 16:(t % 4 + 1) * 16], y[t % 4 * 16:(t % 4 + 1) * 16]))
    return alg, state


@pytest.mark.parametrize(("method", "hyper"), CASES)
def test_flat_and_tree_storage_give_the_same_iterates(method, hyper):
    """Every state tensor after 6 steps agrees to float64 rounding: the flat update, its
    module oracle on the flat vector and the per-tensor normalisation of L2E's features
    are the tree's."""
    _, flat = _run(method, hyper, "flat")
    _, tree = _run(method, hyper, "tree")
    a, b = tree_leaves(flat), tree_leaves(tree)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor) and x.dtype.is_floating_point:
            torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-13)
        else:
            assert torch.equal(torch.as_tensor(x), torch.as_tensor(y))
    start = _run(method, hyper, "flat", steps=0)[1]
    assert any(not torch.equal(p, q) for p, q in zip(tree_leaves(start.params),
                                                      tree_leaves(flat.params), strict=True))


@pytest.mark.parametrize(("method", "hyper"), [CASES[0], CASES[3]])
def test_flat_state_holds_views_of_one_buffer_per_field_and_steps_are_pure(method, hyper):
    alg, state = _run(method, hyper, "flat", steps=2)
    layout = FlatLayout.of(state.params)
    fields = [state.params, state.momentum] + ([state.moments] if method == "l2e" else [])
    for tree in fields:
        buffer = layout.flatten(tree, layout.lead(tree))
        assert all(v._base is buffer for v in tree.values())  # no copy: views of one buffer
    if method == "l2e":
        assert state.moments["0.weight"]._base.shape == (len(kinetic.DECAYS), layout.features)
    batch = small_classifier()[1]
    before = [t.clone() for t in tree_leaves(state) if isinstance(t, torch.Tensor)]
    once, _ = alg.step(state, batch)
    after = [t for t in tree_leaves(state) if isinstance(t, torch.Tensor)]
    assert all(torch.equal(x, y) for x, y in zip(before, after, strict=True))  # untouched
    twice, _ = alg.step(state, batch)
    assert all(torch.equal(torch.as_tensor(x), torch.as_tensor(y))
               for x, y in zip(tree_leaves(once), tree_leaves(twice), strict=True))


def _wide_model(chunk):
    """A float32 network of d = 2·chunk + 260 or so parameters (one weight across chunks) and
    a batch of 4: its activations are small beside the per-coordinate networks'."""
    torch.manual_seed(0)
    width = -(-2 * chunk // 256)
    net = nn.Sequential(nn.Linear(width, 256), nn.Tanh(), nn.Linear(256, 1))
    x = torch.randn(4, width)
    y = torch.randint(0, 2, (4,)).float()
    return bdlkit.BayesianModel(net, "bernoulli", prior=1.0, num_data=100), (x, y)


@pytest.mark.parametrize(("method", "hyper", "nets"),
                         [("l2e", {}, kinetic), ("meta_sgmcmc", {}, dynamics),
                          ("meta_sgmcmc", {"gamma": "autograd"}, dynamics)])
def test_a_step_allocates_no_hidden_layer_of_all_coordinates(method, hyper, nets):
    """On d > 2 chunks, the largest tensor one step allocates is a chunk's hidden layer
    (CHUNK_FLOATS floats) or a d-sized state field (L2E's rolling means: 6 × d), never a
    hidden layer of the per-coordinate network over all d coordinates (before: d × 32 for
    L2E, the largest weight's size × 10 for Meta-SGMCMC)."""
    model, batch = _wide_model(nets.CHUNK)
    alg = get_method(method).build(model, **hyper)
    state, _ = alg.step(alg.init(generator=torch.Generator().manual_seed(0)), batch)
    d = sum(v.numel() for v in state.params.values())
    state, _ = alg.step(state, batch)  # finite differences: the memory is in use
    biggest = largest_allocation(lambda: alg.step(state, batch))
    bound = 4 * max(len(kinetic.DECAYS) * d if method == "l2e" else d, CHUNK_FLOATS)
    assert biggest <= bound < 4 * nets.HIDDEN * d, (biggest, bound)
