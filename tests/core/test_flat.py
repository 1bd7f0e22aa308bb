"""bdlkit.core.flat: layouts, zero-copy flattening, pack/unpack, the problem on R^d."""

import torch

from bdlkit.core.flat import FlatLayout, FlatProblem, pack, unpack
from bdlkit.core.optim import AdamState
from bdlkit.core.tree import randn_like
from bdlkit.problems import BayesianModel


def tree():
    g = torch.Generator().manual_seed(0)
    return {"w": torch.randn(3, 4, generator=g), "b": torch.randn(4, generator=g),
            "s": torch.randn((), generator=g)}


def test_flatten_and_views_round_trip_without_copies():
    t = tree()
    layout = FlatLayout.of(t)
    assert layout.features == 17 and layout.names == ("w", "b", "s")
    flat = layout.flatten(t)  # separate tensors: concatenated
    torch.testing.assert_close(flat, torch.cat([v.reshape(-1) for v in t.values()]))
    views = layout.views(flat)
    assert all(v._base is flat for v in views.values())
    assert layout.flatten(views) is flat  # views of one buffer: that buffer, no copy
    for k in t:
        assert torch.equal(views[k], t[k])


def test_views_out_of_order_or_of_a_bigger_buffer_are_copied():
    t = tree()
    layout = FlatLayout.of(t)
    flat = layout.flatten(t)
    views = layout.views(flat)
    swapped = {"w": views["w"], "b": views["w"].reshape(-1)[:4], "s": views["s"]}
    out = layout.flatten(swapped)
    assert out is not flat
    torch.testing.assert_close(out[12:16], views["w"].reshape(-1)[:4])
    big = torch.zeros(40)
    part = FlatLayout.of({"a": big[:17]})
    assert part.flatten({"a": big[:17]}) is not big


def test_batched_flatten_and_views():
    t = {"w": torch.randn(2, 3, 4), "b": torch.randn(2, 4)}
    layout = FlatLayout(names=("w", "b"), shapes=((3, 4), (4,)), sizes=(12, 4),
                        dtype=torch.float32, device=torch.device("cpu"))
    flat = layout.flatten(t, batch=1)
    assert flat.shape == (2, 16)
    back = layout.views(flat)
    assert torch.equal(back["w"], t["w"]) and torch.equal(back["b"], t["b"])


def test_pack_and_unpack_every_parameter_shaped_dict():
    t = tree()
    layout = FlatLayout.of(t)
    state = AdamState(count=torch.zeros(()), mu=t, nu={k: v * 2 for k, v in t.items()})
    packed = pack(layout, state)
    assert packed.mu.shape == (17,) and packed.nu.shape == (17,)
    assert packed.count is state.count
    back = unpack(layout, state, packed)
    for k in t:
        assert torch.equal(back.nu[k], state.nu[k])


def test_randn_like_draws_one_vector_for_a_dict():
    t = tree()
    a = randn_like(t, torch.Generator().manual_seed(5))
    flat = torch.randn(17, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(FlatLayout.of(t).flatten(a), flat, rtol=0, atol=0)
    b = randn_like(t, torch.Generator().manual_seed(5), n=3)
    assert b["w"].shape == (3, 3, 4)
    flat3 = torch.randn(3, 17, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(FlatLayout.of(t).flatten(b, batch=1), flat3, rtol=0, atol=0)


def test_flat_problem_score_is_the_flattened_score():
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2).double()
    model = BayesianModel(net, "categorical", num_data=10)
    x, y = torch.randn(4, 3, dtype=torch.float64), torch.tensor([0, 1, 1, 0])
    params = model.init_params()
    layout = FlatLayout.of(params)
    flat = FlatProblem(model, layout)
    v1, s1 = model.value_and_score(params, (x, y))
    v2, s2 = flat.value_and_score(layout.flatten(params), (x, y))
    torch.testing.assert_close(v1, v2)
    torch.testing.assert_close(layout.flatten(s1), s2)
    assert flat.num_data == 10 and flat.temperature == 1.0
    torch.testing.assert_close(flat.log_prior(layout.flatten(params)), model.log_prior(params))


def test_views_covering_part_of_a_buffer_are_not_taken_for_it():
    buffer = torch.arange(6.0)
    tree = {"a": buffer[:2], "b": buffer[2:5]}  # 5 of its 6 elements
    layout = FlatLayout.of(tree)
    out = layout.flatten(tree)
    assert out is not buffer and torch.equal(out, torch.arange(5.0))
    wrong_shape = {"a": buffer[:3], "b": buffer[3:]}  # same total, other split
    layout = FlatLayout.of({"a": torch.zeros(2), "b": torch.zeros(4)})
    assert layout.flatten(wrong_shape) is not buffer
    assert not layout.matches({"a": torch.zeros(2), "b": None})


def test_pack_takes_leaves_with_leading_dimensions_to_one_buffer_without_copies():
    """A dict whose leaves are (6, *shape) (L2E's rolling means) packs to one (6, d) buffer
    and back to views of it; packing those views again returns that buffer (before, pack
    concatenated them to (6·d,) and unpack failed)."""
    t = tree()
    layout = FlatLayout.of(t)
    means = {k: torch.randn(6, *v.shape, generator=torch.Generator().manual_seed(1))
             for k, v in t.items()}
    state = AdamState(count=torch.zeros(()), mu=t, nu=means)
    packed = pack(layout, state)
    assert packed.mu.shape == (17,) and packed.nu.shape == (6, 17)
    torch.testing.assert_close(packed.nu, torch.cat([v.reshape(6, -1) for v in means.values()],
                                                    dim=1))
    back = unpack(layout, state, packed)
    assert all(back.nu[k]._base is packed.nu and torch.equal(back.nu[k], means[k]) for k in t)
    assert pack(layout, back).nu is packed.nu  # views of one buffer: that buffer
