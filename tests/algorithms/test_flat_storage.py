"""Flat storage (bdlkit.algorithms.storage): the same iterates as the tree, pure steps."""

import pytest
import torch

from bdlkit import algorithms
from bdlkit.core.flat import FlatLayout
from bdlkit.core.serialization import state_from_tensors, state_to_tensors
from bdlkit.core.tree import tree_leaves
from bdlkit.problems import BayesianModel

#: every element-wise method, with the options that take another code path
CASES = [
    ("sgld", {}), ("psgld", {}), ("sghmc", {}), ("sghmc", {"noise_estimate": True}),
    ("sghmc", {"alpha": 1.0}), ("csghmc", {"cycle_steps": 4}), ("csgld", {"cycle_steps": 4}),
    ("map", {}), ("map", {"optimizer": "sgd"}), ("advi", {}), ("advi", {"stl": True}),
    ("advi", {"optimizer": "sgd", "num_samples": 2}), ("score_vi", {}),
    ("score_vi", {"loss": "mc", "num_samples": 2}), ("score_vi", {"inner_steps": 2}),
    ("ivon", {}), ("ivon", {"mc_samples": 2, "clip_radius": 0.1}),
]


def problem(dtype=torch.float64, likelihood="categorical"):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    net = net.to(dtype)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 5, generator=g, dtype=dtype)
    y = torch.randint(0, 3, (16,), generator=g)
    return BayesianModel(net, likelihood, prior=1.0, num_data=100), (x, y)


def run(method, hyper, storage, steps=6):
    model, batch = problem()
    alg = algorithms.get_method(method).build(model, storage=storage, **hyper)
    state = alg.init(generator=torch.Generator().manual_seed(3))
    for _ in range(steps):
        state, info = alg.step(state, batch)
    return alg, state


@pytest.mark.parametrize(("method", "hyper"), CASES)
def test_flat_and_tree_give_the_same_iterates(method, hyper):
    """Every state tensor after 6 steps agrees to float64 rounding (the noise is one draw
    of all coordinates either way)."""
    _, flat = run(method, hyper, "flat")
    _, tree = run(method, hyper, "tree")
    a, b = tree_leaves(flat), tree_leaves(tree)
    assert len(a) == len(b)
    moved = False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor) and x.dtype.is_floating_point:
            torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-14)
        else:
            assert torch.equal(torch.as_tensor(x), torch.as_tensor(y))
    first, _ = run(method, hyper, "flat", steps=1)
    moved = any(not torch.equal(p, q) for p, q in zip(
        tree_leaves(first.params(run(method, hyper, "flat", steps=0)[1])),
        tree_leaves(first.params(flat)), strict=True))
    assert moved  # the comparison is not between two untouched initial states


@pytest.mark.parametrize(("method", "hyper"), [CASES[0], CASES[2], CASES[7], CASES[9],
                                               CASES[12]])
def test_flat_state_holds_views_of_one_buffer_and_steps_are_pure(method, hyper):
    model, batch = problem()
    alg = algorithms.get_method(method).build(model, **hyper)
    state = alg.init(generator=torch.Generator().manual_seed(3))
    state, _ = alg.step(state, batch)
    params = alg.params(state)
    layout = FlatLayout.of(params)
    buffer = layout.flatten(params)
    assert all(p._base is buffer for p in params.values())  # no copy: views of the buffer
    before = [t.clone() for t in tree_leaves(state) if isinstance(t, torch.Tensor)]
    again, _ = alg.step(state, batch)
    after = [t for t in tree_leaves(state) if isinstance(t, torch.Tensor)]
    for x, y in zip(before, after, strict=True):  # the old state is untouched
        assert torch.equal(x, y)
    # the same step from the same state gives the same new state (the generator is state)
    twice, _ = alg.step(state, batch)
    for x, y in zip(tree_leaves(again), tree_leaves(twice), strict=True):
        assert torch.equal(torch.as_tensor(x), torch.as_tensor(y))


def test_a_checkpointed_flat_state_resumes_bit_exactly():
    """A state of views saves as separate named tensors and, loaded (no views), steps to
    exactly what the live state steps to."""
    model, batch = problem()
    alg = algorithms.get_method("sghmc").build(model)
    state = alg.init(generator=torch.Generator().manual_seed(3))
    for _ in range(3):
        state, _ = alg.step(state, batch)
    tensors = {k: v.clone() for k, v in state_to_tensors(state).items()}
    loaded = state_from_tensors(alg.init(generator=torch.Generator().manual_seed(9)), tensors)
    assert all(p._base is None for p in loaded.params.values())
    a, _ = alg.step(state, batch)
    b, _ = alg.step(loaded, batch)
    for x, y in zip(tree_leaves(a), tree_leaves(b), strict=True):
        assert torch.equal(torch.as_tensor(x), torch.as_tensor(y))


def test_mixed_dtypes_stay_a_tree():
    """A tree of two dtypes has no flat layout; the method runs on the tree."""
    assert FlatLayout.of({"a": torch.zeros(2), "b": torch.zeros(2, dtype=torch.float64)}) is None
    assert FlatLayout.of(torch.zeros(3)) is None


def test_storage_is_checked_and_not_part_of_the_checkpoint_record():
    model, batch = problem()
    with pytest.raises(ValueError, match="storage must be one of"):  # at build, not later
        algorithms.get_method("sgld").build(model, storage="sideways")
    assert "storage" not in algorithms.get_method("sgld").build(model).record()
    with pytest.raises(TypeError):
        algorithms.get_method("sgld").build(model, 0.1, "flat")  # storage is keyword-only


def test_a_returned_state_steps_without_packing_again_and_a_changed_one_is_packed(monkeypatch):
    """The step remembers the packed state behind the state it returned: given that state
    back it skips the pack; with one of its tensors replaced it packs again (and steps
    what it was given)."""
    from bdlkit.algorithms import storage

    packs = []
    real_pack = storage.pack
    monkeypatch.setattr(storage, "pack", lambda layout, state: packs.append(1) or real_pack(
        layout, state))
    model, batch = problem()
    alg = algorithms.get_method("advi").build(model)
    state = alg.init(generator=torch.Generator().manual_seed(3))
    state, _ = alg.step(state, batch)
    assert len(packs) == 1
    fresh = state_from_tensors(state, {k: v.clone() for k, v in state_to_tensors(state).items()})
    remembered, _ = alg.step(state, batch)
    assert len(packs) == 1  # the returned state was not packed again
    packed, _ = alg.step(fresh, batch)
    assert len(packs) == 2
    for x, y in zip(tree_leaves(remembered), tree_leaves(packed), strict=True):
        assert torch.equal(torch.as_tensor(x), torch.as_tensor(y))
    name = next(iter(remembered.lam.mu))
    remembered.lam.mu[name] = remembered.lam.mu[name] + 1.0  # a dict is mutable: replaced
    moved, _ = alg.step(remembered, batch)
    assert len(packs) == 3
    copy = state_from_tensors(remembered, {k: v.clone() for k, v in
                                           state_to_tensors(remembered).items()})
    for x, y in zip(tree_leaves(moved), tree_leaves(alg.step(copy, batch)[0]), strict=True):
        assert torch.equal(torch.as_tensor(x), torch.as_tensor(y))


def test_a_returned_state_given_an_extra_leaf_is_packed_afresh(monkeypatch):
    """The packed state is reused only for as many leaves as it was remembered with: the
    returned state itself, given one more field at its end (its leaves so far the very
    tensors remembered), is packed again and steps with that field."""
    from bdlkit.algorithms import storage
    from bdlkit.algorithms.vi.schedule import RunningMean

    packs = []
    real_pack = storage.pack
    monkeypatch.setattr(storage, "pack", lambda layout, state: packs.append(1) or real_pack(
        layout, state))
    model, batch = problem()
    alg = algorithms.get_method("advi").build(model)  # no averaging: the average is None
    state, _ = alg.step(alg.init(generator=torch.Generator().manual_seed(3)), batch)
    remembered = tree_leaves(state)
    assert len(packs) == 1 and state.average is None
    object.__setattr__(state, "average", RunningMean(
        lam=state_from_tensors(state.lam, {k: v.clone() for k, v in
                                           state_to_tensors(state.lam).items()}), count=0))
    leaves = tree_leaves(state)
    assert len(leaves) > len(remembered)  # the extra leaves come last, after the step
    assert all(x is y for x, y in zip(leaves, remembered))
    stepped, _ = alg.step(state, batch)
    assert len(packs) == 2  # packed afresh, not the remembered packed state
    assert stepped.average is not None
    copy = state_from_tensors(state, {k: v.clone() for k, v in state_to_tensors(state).items()})
    for x, y in zip(tree_leaves(stepped), tree_leaves(alg.step(copy, batch)[0]), strict=True):
        assert torch.equal(torch.as_tensor(x), torch.as_tensor(y))
