"""Compiled steps (bdlkit.engine.compiled): the same iterates as eager steps, chunked runs
that keep, log, stop and resume like eager ones, and an eager fallback that says why."""

import math
import sys
import warnings
from pathlib import Path

import pytest
import torch

import bdlkit
from bdlkit.algorithms import get_method
from bdlkit.core import rng
from bdlkit.core.tree import tree_leaves
from bdlkit.engine import compiled as compiled_module
from bdlkit.engine.checkpoint import list_checkpoints
from bdlkit.engine.collect import MemoryStore
from bdlkit.engine.compiled import CompiledSteps, positions
from bdlkit.engine.runner import NonFiniteError, Runner

sys.path.insert(0, str(Path(__file__).parents[1] / "algorithms"))
from test_flat_storage import CASES, problem  # noqa: E402  (the element-wise methods)

MEAN = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
SD = torch.tensor([1.0, 0.3, 2.0], dtype=torch.float64)
GAUSSIAN = bdlkit.Target(lambda t: (-0.5 * ((t - MEAN) / SD) ** 2).sum(-1), 3,
                         dtype=torch.float64)
EAGER = staticmethod(lambda fn: fn)  # the same chunk function, not compiled


def _floats(state):
    return [x for x in tree_leaves(state) if isinstance(x, torch.Tensor)
            and x.dtype.is_floating_point]


def _assert_same(a, b, rtol=1e-12, atol=1e-14):
    fa, fb = _floats(a), _floats(b)
    assert len(fa) == len(fb) > 0
    for x, y in zip(fa, fb, strict=True):
        torch.testing.assert_close(x, y, rtol=rtol, atol=atol)


def _chunks(algorithm, state, steps, *, whole_graph, size, compiler=None, batches=None):
    runner = CompiledSteps(algorithm, whole_graph=whole_graph, size=size, compiler=compiler)
    for t in range(0, steps, size):
        out = runner.run(state, t, None if batches is None else [batches] * size)
        assert out is not None, runner.fallback
        state = out[0]
    return state, runner


@pytest.mark.parametrize(("method", "hyper"), CASES)
def test_a_compiled_network_step_equals_the_eager_step(method, hyper):
    """Every element-wise method on a network (float64): 4 compiled steps (the update
    compiled, the forward/backward eager) equal 4 plain ``step`` calls to rounding."""
    model, batch = problem()
    alg = get_method(method).build(model, **hyper)
    start = alg.init(generator=torch.Generator().manual_seed(3))
    eager = start
    for _ in range(4):
        eager, _ = alg.step(eager, batch)
    done, runner = _chunks(alg, start, 4, whole_graph=False, size=1, batches=batch)
    assert runner.fallback is None
    assert eager.step == done.step == 4
    _assert_same(done, eager)
    assert not torch.equal(_floats(done)[0], _floats(start)[0])  # it moved


@pytest.mark.parametrize(("method", "hyper"), [
    ("sgld", {"lr": 0.05}), ("sghmc", {"lr": 0.05}), ("psgld", {"lr": 0.01}),
    ("map", {"lr": 0.05}), ("advi", {"lr": 0.05, "init_std": 0.5}),
    ("ivon", {"lr": 0.1}),
])
def test_a_compiled_target_chunk_equals_the_same_chunk_run_eagerly(method, hyper):
    """The whole chunk (log density, torch.func score, update) compiles as one graph and
    gives the iterates of the same chunk run eagerly, on the same tape of normals."""
    alg = get_method(method).build(GAUSSIAN, **hyper)
    init = torch.zeros(2, 3, dtype=torch.float64) if alg.collects_draws else None
    start = alg.init(init, generator=rng.generator(0))
    done, runner = _chunks(alg, start, 8, whole_graph=True, size=4)
    eager, _ = _chunks(alg, start, 8, whole_graph=True, size=4, compiler=EAGER)
    assert runner.fallback is None and runner.compile_s > 0
    assert done.step == 8
    _assert_same(done, eager)


@pytest.mark.parametrize("method", ["advi", "ivon"])
@pytest.mark.slow
def test_the_cosine_and_the_tail_average_compile_with_the_chunk(method):
    """Bound to the run's length, a VI step decays its rate with the cosine and averages
    the last half of its iterates as tensor operations on the chunk's step counter: the
    compiled chunk equals the eager one, and the average holds the last 4 iterates."""
    alg = get_method(method).build(GAUSSIAN, lr=0.05).for_run(8)
    start = alg.init(None, generator=rng.generator(0))
    done, runner = _chunks(alg, start, 8, whole_graph=True, size=4)
    eager, _ = _chunks(alg, start, 8, whole_graph=True, size=4, compiler=EAGER)
    assert runner.fallback is None
    _assert_same(done, eager)
    assert int(done.average.count) == 4


def test_a_chunk_on_a_tape_of_single_draws_equals_eager_steps():
    """With one normal per step the tape holds the eager stream itself (CPU draws of
    fewer than 16 normals are sequential), so a chunk equals eager steps exactly."""
    target = bdlkit.Target(lambda t: -0.5 * (t**2).sum(-1), 1, dtype=torch.float64)
    alg = get_method("sgld").build(target, lr=0.1)
    start = alg.init(torch.zeros(1, dtype=torch.float64), generator=rng.generator(0))
    eager = start
    for _ in range(4):
        eager, _ = alg.step(eager, None)
    done, _ = _chunks(alg, start, 4, whole_graph=True, size=4, compiler=EAGER)
    assert torch.equal(done.params, eager.params)
    assert torch.equal(done.rng_state, eager.rng_state)


@pytest.mark.parametrize("method", ["csgld", "csghmc", "hmc", "score_vi"])
def test_a_step_that_decides_on_values_falls_back_to_eager_with_a_warning(method):
    """The cyclical samplers' phase, HMC's accept/reject and score_vi's checks of its
    solve are Python decisions on tensors (HMC also draws uniforms): a whole graph cannot
    hold them, and the run says so and goes on eagerly."""
    alg = get_method(method).build(GAUSSIAN)
    init = torch.zeros(2, 3, dtype=torch.float64) if alg.collects_draws else None
    state = alg.init(init, generator=rng.generator(0))
    runner = CompiledSteps(alg, whole_graph=True, size=4)
    with pytest.warns(UserWarning, match=f"{method}.*cannot run as compiled.*eagerly"):
        assert runner.run(state, 0, None) is None
    assert runner.fallback
    assert runner.run(state, 4, None) is None  # and does not try again


def _sgld_runner(**kw):
    alg = get_method("sgld").build(GAUSSIAN, lr=0.05)
    return Runner(alg, steps=kw.pop("steps", 40), seed=0, chains=2, **kw)


ONE_D = bdlkit.Target(lambda t: (-0.5 * ((t - 0.5) / 0.7) ** 2).sum(-1), 1,
                      dtype=torch.float64)


def test_a_compiled_run_keeps_logs_and_reports_like_an_eager_run(monkeypatch):
    """One chain in 1-D draws one normal per step, so the chunks' tape holds the eager
    stream itself: a compiled run of 42 steps (chunks of 4 up to step 40, then two eager
    steps) keeps the draws of an eager run, after the same steps, to rounding; the log has
    an entry per chunk end and per eager step; the config reports the compile."""
    monkeypatch.setattr(compiled_module, "CHUNK_STEPS", 4)
    runs = [Runner(get_method("sgld").build(ONE_D, lr=0.05), steps=42, seed=0, chains=1,
                   burnin=10, thin=3, compile=compile).fit() for compile in (True, False)]
    compiled, eager = runs
    assert compiled.samples.shape == eager.samples.shape == (10, 1, 1)  # steps 13, .., 40
    torch.testing.assert_close(compiled.samples, eager.samples, rtol=1e-12, atol=1e-14)
    _assert_same(compiled.state, eager.state)
    assert [e["step"] for e in compiled.history] == [*range(4, 41, 4), 41, 42]
    report = compiled.config["compile"]
    assert report["chunk_steps"] == 4 and report["fallback"] is None and report["compile_s"] > 0
    assert "compile" not in eager.config


def test_map_runs_compiled_without_noise(monkeypatch):
    monkeypatch.setattr(compiled_module, "CHUNK_STEPS", 5)
    runs = [Runner(get_method("map").build(GAUSSIAN, lr=0.05), steps=20, seed=0,
                   compile=compile).fit() for compile in (True, False)]
    assert runs[0].config["compile"]["fallback"] is None
    _assert_same(runs[0].state, runs[1].state)


def test_a_compiled_run_samples_the_gaussian(monkeypatch):
    """A statistical check of the compiled sampler: 20 000 SGLD steps on
    the 3-D Gaussian (chunks of 10 here); the mean and sd of the draws within 4 Monte Carlo errors (the chains
    are correlated: the error uses the draws' ESS from ArviZ) plus SGLD's O(lr) bias."""
    import arviz as az

    monkeypatch.setattr(compiled_module, "CHUNK_STEPS", 10)  # a 100-step graph takes ~30 s
    alg = get_method("sgld").build(GAUSSIAN, lr=0.01)
    result = Runner(alg, steps=20000, seed=1, chains=4, compile=True).fit()
    assert result.config["compile"]["fallback"] is None
    draws = result.samples  # (kept, chains, 3)
    ess = torch.tensor([float(az.ess(draws[..., i].T.numpy())) for i in range(3)])
    mean, sd = draws.reshape(-1, 3).mean(0), draws.reshape(-1, 3).std(0)
    assert torch.all((mean - MEAN).abs() < 4 * SD / ess.sqrt() + 0.02 * SD)
    assert torch.all((sd / SD - 1).abs() < 4 / (2 * ess).sqrt() + 0.03)


def test_a_compiled_run_resumes_bit_exactly(tmp_path, monkeypatch):
    monkeypatch.setattr(compiled_module, "CHUNK_STEPS", 4)
    full = _sgld_runner(compile=True, run_dir=tmp_path / "a", checkpoint_every=10).fit()
    assert full.config["compile"]["fallback"] is None
    folder = tmp_path / "a" / "checkpoints"
    steps = [int(p.stem.split("-")[1]) for p in list_checkpoints(folder)]
    assert steps == [32, 40]  # chunk ends where a due one falls in (12, 20, 32, 40), 2 kept
    list_checkpoints(folder)[-1].unlink()  # a crash after step 32
    again = _sgld_runner(compile=True, run_dir=tmp_path / "a", checkpoint_every=10).fit(
        resume=True)
    assert torch.equal(again.samples, full.samples)
    assert torch.equal(again.state.params, full.state.params)
    assert torch.equal(again.state.rng_state, full.state.rng_state)
    with pytest.raises(ValueError, match="compile='chunks of 4'.*compile='off'"):
        _sgld_runner(run_dir=tmp_path / "a", checkpoint_every=10).fit(resume=True)


def test_a_diverging_compiled_run_stops_with_the_nan_message(monkeypatch):
    monkeypatch.setattr(compiled_module, "CHUNK_STEPS", 4)
    alg = get_method("sgld").build(GAUSSIAN, lr=3.0)
    runner = Runner(alg, steps=2000, seed=0, chains=2, compile=True)
    with pytest.raises(NonFiniteError, match="NaN or infinite at step .*lower lr"), \
            warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*cannot run as compiled")  # compiled
        runner.fit()
    assert runner.compiled.fallback is None


@pytest.mark.slow
def test_each_run_compiles_its_own_graph_beyond_torchs_recompile_limit():
    """torch.compile allows 8 recompilations per code object, and once a float it saw
    change becomes a graph input it may serve one run's graph to another (an sgld chunk
    with lr=0.5 ran with the previous run's lr=3.0): each run has a code object of its
    own, and each equals its own eager chunk."""
    for i in range(10):
        alg = get_method("sgld").build(GAUSSIAN, lr=0.01 * (i + 1))
        state = alg.init(torch.zeros(2, 3, dtype=torch.float64), generator=rng.generator(i))
        runner = CompiledSteps(alg, whole_graph=True, size=2)
        out = runner.run(state, 0, None)
        assert out is not None, runner.fallback
        eager = CompiledSteps(alg, whole_graph=True, size=2, compiler=EAGER).run(state, 0, None)
        assert out[2]["lr"] == alg.lr
        _assert_same(out[0], eager[0])


def test_infer_compiles_on_request(monkeypatch):
    monkeypatch.setattr(compiled_module, "CHUNK_STEPS", 4)
    result = bdlkit.infer(GAUSSIAN, "sgld", steps=300, lr=0.05, compile=True)
    assert result.config["compile"]["chunk_steps"] == compiled_module.CHUNK_STEPS
    assert result.config["compile"]["fallback"] is None


@pytest.mark.parametrize("seed", range(20))
def test_positions_cover_every_kept_step_of_every_chunk(seed):
    g = torch.Generator().manual_seed(seed)
    size, burnin, thin = (int(torch.randint(1, n, (1,), generator=g)) for n in (60, 300, 90))
    store = MemoryStore(burnin=burnin, thin=thin)
    where = positions(size, 0, burnin, thin)
    for t in range(0, 1200, size):
        assert positions(size, t, burnin, thin) == where  # one graph for the whole run
        wanted = {s - t - 1 for s in range(t + 1, t + size + 1) if store.wants(s)}
        assert wanted <= set(where)
    assert len(where) == size // math.gcd(size, thin)


@pytest.mark.parametrize(("start", "stop", "burnin", "thin"),
                         [(1, 50, 0, 1), (1, 50, 7, 3), (13, 200, 7, 5), (5, 9, 20, 4)])
def test_wanted_is_the_steps_wants_accepts(start, stop, burnin, thin):
    store = MemoryStore(burnin=burnin, thin=thin)
    assert list(store.wanted(start, stop)) == [s for s in range(start, stop) if store.wants(s)]


def test_a_noise_tape_hands_out_its_normals_in_order_and_counts():
    block = torch.arange(10.0)
    tape = rng.NoiseTape(block)
    first, second = tape.normal((2, 2), torch.float32, "cpu"), tape.normal((3,), torch.float32,
                                                                             "cpu")
    assert torch.equal(first.reshape(-1), block[:4]) and torch.equal(second, block[4:7])
    first.mul_(0)  # a step may scale its noise in place: the tape is not touched
    assert torch.equal(block, torch.arange(10.0))
    with pytest.raises(TypeError, match="holds torch.float32"):
        tape.normal((1,), torch.float64, "cpu")
    counter = rng.NoiseTape(None)
    assert torch.equal(counter.normal((4,), torch.float64, "cpu"), torch.zeros(4,
                                                                                 dtype=torch.float64))
    assert counter.used == 4
    with pytest.raises(TypeError, match="one dtype"):
        counter.normal((1,), torch.float32, "cpu")
    with pytest.raises(TypeError, match="used up"):
        tape.normal((4,), torch.float32, "cpu")
    assert rng.from_state(tape) is tape and rng.state_of(tape) is tape
