"""Deep ensembles: M MAP runs in lockstep, returned as a set of draws."""

import pytest
import torch

import bdlkit
from bdlkit import algorithms, evaluation
from bdlkit.algorithms.point import ensemble
from bdlkit.algorithms.point import map as map_
from bdlkit.core.tree import index
from bdlkit.data import Dataset
from bdlkit.engine.batches import Batches
from bdlkit.engine.runner import Runner
from bdlkit.models import MLP, ResNetFRN


def blobs(n=90, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[3.0, 0.0], [-3.0, 0.0], [0.0, 3.0]], dtype=dtype)
    y = torch.arange(n) % 3
    return centres[y] + torch.randn(n, 2, generator=g, dtype=dtype), y


def classifier(n=90, dtype=torch.float32, seed=0, oracle="functional"):
    torch.manual_seed(seed)
    net = MLP(2, 3, hidden=(8,)).to(dtype)
    return bdlkit.BayesianModel(net, "categorical", prior=1.0, num_data=n, oracle=oracle)


@pytest.mark.parametrize("optimizer,lr", [("adam", 1e-2), ("sgd", 0.1)])
def test_each_member_follows_its_own_map_run(optimizer, lr):
    x, y = blobs(dtype=torch.float64)
    model = classifier(dtype=torch.float64)
    alg = ensemble.build(model, members=3, lr=lr, optimizer=optimizer, momentum=0.5)
    state = alg.init(generator=torch.Generator().manual_seed(1))
    batches = Batches(model, (x, y), 16, seed=0)
    # the members run MAP's update on the tree of stacked members: bit for bit MAP's tree
    # storage (the flat default's oracle differs from it at float rounding only)
    mp = map_.build(model, lr=lr, optimizer=optimizer, momentum=0.5, storage="tree")
    singles = [mp.init(index(state.params, m), generator=torch.Generator()) for m in range(3)]
    for t in range(12):
        state, info = alg.step(state, batches(t))
        outs = [mp.step(s, batches(t)) for s in singles]
        singles = [s for s, _ in outs]
        # logged on one model's scale: the mean over members, not their sum
        torch.testing.assert_close(info["log_prob"], sum(i["log_prob"] for _, i in outs) / 3,
                                   rtol=1e-14, atol=0)
    for m, single in enumerate(singles):
        for k, v in single.params.items():
            assert torch.equal(state.params[k][m], v), (optimizer, m, k)
    flat_map = map_.build(model, lr=lr, optimizer=optimizer, momentum=0.5)  # flat storage
    flat = flat_map.init(index(alg.init(generator=torch.Generator().manual_seed(1)).params, 0),
                         generator=torch.Generator())
    for t in range(12):
        flat, _ = flat_map.step(flat, batches(t))
    for k, v in flat.params.items():
        torch.testing.assert_close(state.params[k][0], v, rtol=1e-10, atol=1e-12)
    assert alg.params(state).keys() == model.init_params().keys()
    assert info["log_prob_min"] <= info["log_prob_max"]

    # a Target: one call on the (M, d) stack equals M separate MAP runs
    target = bdlkit.Target(lambda th: -0.5 * ((th - 1.0) ** 2 * torch.arange(1.0, 4.0)).sum(-1),
                           dim=3, dtype=torch.float64)
    alg = ensemble.build(target, members=4, lr=0.05, optimizer=optimizer)
    state = alg.init(generator=torch.Generator().manual_seed(2))
    mp = map_.build(target, lr=0.05, optimizer=optimizer)
    singles = [mp.init(state.params[m], generator=torch.Generator()) for m in range(4)]
    for _ in range(20):
        before = state.params
        state, info = alg.step(state, None)
        singles = [mp.step(s, None)[0] for s in singles]
        torch.testing.assert_close(info["log_prob"], target.log_prob(before).mean())
    assert torch.allclose(state.params, torch.stack([s.params for s in singles]),
                          rtol=0, atol=1e-12)


def test_members_start_from_different_initialisations():
    model = classifier()
    alg = ensemble.build(model, members=4)
    members = alg.member_stack(alg.init(generator=torch.Generator().manual_seed(0)))
    first = model.init_params()
    assert all(torch.equal(members[k][0], v) for k, v in first.items())
    for i in range(4):
        for j in range(i):
            assert not torch.equal(members["net.0.weight"][i], members["net.0.weight"][j])
    # a stack of M points is used as given; any other shape is refused
    again = alg.init(members, generator=torch.Generator())
    assert all(torch.equal(again.params[k], members[k]) for k in members)
    with pytest.raises(ValueError, match="members=4"):
        alg.init(index(members, slice(0, 2)), generator=torch.Generator())

    draw = model.random_init(torch.Generator().manual_seed(5))
    same = model.random_init(torch.Generator().manual_seed(5))
    other = model.random_init(torch.Generator().manual_seed(6))
    assert list(draw) == list(first)
    for k, v in first.items():
        assert draw[k].shape == v.shape and draw[k].dtype == v.dtype
        assert draw[k].device == v.device
        assert torch.equal(draw[k], same[k]) and not torch.equal(draw[k], other[k])
        assert not torch.equal(draw[k], v)
    rng_before = torch.get_rng_state()
    model.random_init(torch.Generator())
    assert torch.equal(torch.get_rng_state(), rng_before)  # the global RNG is untouched

    frn = bdlkit.BayesianModel(ResNetFRN(depth=8, num_classes=3, in_channels=1, width=4),
                               num_data=10)
    fresh = frn.random_init(torch.Generator())
    assert torch.equal(fresh["stem_frn.gamma"], torch.ones(4))  # FRN constants kept
    assert not torch.equal(fresh["stem.weight"], frn.init_params()["stem.weight"])
    assert fresh["head.weight"].abs().sum() == 0  # the root reset_parameters: zero head


def test_members_find_both_modes_of_a_mixture():
    def log_prob(th):
        x = th[:, 0]
        return torch.logaddexp(-0.5 * (x - 4) ** 2, -0.5 * (x + 4) ** 2)

    target = bdlkit.Target(log_prob, dim=1, init_scale=3.0, dtype=torch.float64)
    alg = ensemble.build(target, members=12, lr=0.2)
    state = alg.init(generator=torch.Generator().manual_seed(0))
    for _ in range(300):
        state, info = alg.step(state, None)
    ends = alg.member_stack(state)[:, 0]
    assert torch.allclose(ends.abs(), torch.full_like(ends, 4.0), atol=1e-3)
    assert (ends > 0).any() and (ends < 0).any()


@pytest.fixture
def fitted():
    x, y = blobs(90)
    x_test, y_test = blobs(60, seed=1)
    ds = Dataset("blobs", "classification", x, y, x_test, y_test, num_classes=3)
    model = classifier()
    alg = ensemble.build(model, members=3, lr=0.02)
    res = Runner(alg, ds, seed=3, batch_size=32).fit(40, config={"hyper": {"members": 3,
                                                                           "lr": 0.02}})
    return res, ds, model


def test_runner_result_is_the_bma_over_members(fitted):
    res, ds, model = fitted
    members = res.algorithm.member_stack(res.state)
    assert res.kind == "ensemble" and res.num_kept == 3
    manual = torch.stack([model.predictive(index(members, m), ds.x_test) for m in range(3)])
    assert torch.allclose(res.predict(ds.x_test), manual.mean(0), atol=1e-6)
    draws = res.sample(3)
    assert all(draws[k].shape == (3, *v.shape) for k, v in model.init_params().items())
    assert torch.equal(res.sample(2)["net.0.weight"], members["net.0.weight"][:2])
    assert all(torch.equal(res.params[k], members[k][0]) for k in members)
    with pytest.raises(ValueError, match="M=3"):
        res.sample(4)
    ev = evaluation.evaluate(res, ds)
    assert {"accuracy", "nll", "ece", "mutual_information"} <= set(ev.metrics)
    assert ev.metrics["num_draws"] == 3 and ev.metrics["accuracy"] > 0.9
    assert "diagnostics" not in ev.metrics and ev.diagnostics is None
    assert {"log_prob", "log_prob_min", "log_prob_max"} <= set(res.history[-1])


def test_save_and_load_restore_the_members(fitted, tmp_path):
    assert algorithms.METHODS["ensemble"] is ensemble  # bdlkit.load builds it by name
    res, ds, _ = fitted
    res.save(tmp_path)
    back = bdlkit.load(tmp_path, problem=classifier())
    members = res.algorithm.member_stack(res.state)
    assert back.num_kept == 3 and back.state.step == 40
    assert all(torch.equal(back.algorithm.member_stack(back.state)[k], v) for k, v in members.items())
    assert torch.equal(back.predict(ds.x_test), res.predict(ds.x_test))
    alone = bdlkit.load(tmp_path)  # without the problem there are no members
    assert alone.num_kept == 0
    with pytest.raises(ValueError, match="pass problem="):
        alone.sample(1)


def test_build_validates_hyperparameters():
    model = classifier()
    for bad, match in (({"members": 0}, "members"), ({"members": 2.5}, "members"),
                       ({"lr": 0.0}, "lr"), ({"optimizer": "rmsprop"}, "optimizer"),
                       ({"momentum": 1.0}, "momentum")):
        with pytest.raises(ValueError, match=match):
            ensemble.build(model, **bad)
    assert ensemble.KIND == "ensemble" and ensemble.build(model).num_members == 5


def test_module_oracle_gives_the_same_members():
    x, y = blobs(dtype=torch.float64)
    batches = Batches(classifier(), (x, y), 30, seed=0)
    ends = []
    for oracle in ("functional", "module"):
        alg = ensemble.build(classifier(dtype=torch.float64, oracle=oracle), members=2, lr=0.01)
        state = alg.init(generator=torch.Generator().manual_seed(4))
        for t in range(5):
            state, _ = alg.step(state, batches(t))
        ends.append(alg.member_stack(state))
    assert all(torch.allclose(ends[0][k], ends[1][k], rtol=0, atol=1e-12) for k in ends[0])
