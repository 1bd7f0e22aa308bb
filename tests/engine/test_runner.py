"""Runner: logs, evaluation, checkpoints and bit-exact resume after a crash, Ctrl-C or NaN."""

import json
import signal

import pytest
import torch

import bdlkit
from bdlkit.algorithms import get_method
from bdlkit.core.serialization import state_to_tensors
from bdlkit.engine.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from bdlkit.engine.collect import DiskStore, MemoryStore
from bdlkit.engine.runner import Interrupted, NonFiniteError, Runner
from cli_helpers import run_cli

STEPS = 120


def _inject(monkeypatch, method, at, fault):
    """Make ``method``'s step misbehave at step ``at``: crash, Ctrl-C/SIGTERM or NaN.

    The step is patched on the class, so the algorithm object (and the hyperparameter
    fingerprint in its checkpoints) is the same as in a normal run.
    """
    cls = type(get_method(method).build(bdlkit.Target(lambda t: -t.sum(-1), dim=1)))
    inner = cls.step

    def step(self, state, batch):
        if state.step == at:
            if fault == "crash":
                raise RuntimeError("simulated crash")
            if fault in ("sigint", "sigterm"):
                signal.raise_signal(signal.SIGINT if fault == "sigint" else signal.SIGTERM)
        new, info = inner(self, state, batch)
        if fault == "nan" and state.step >= at:
            info = {**info, "log_prob": torch.tensor(float("nan"))}
        return new, info

    monkeypatch.setattr(cls, "step", step)


def _runner(blr, run_dir, method="sgld", **kw):
    model, data, _, _ = blr
    algorithm = get_method(method).build(model, lr=1e-3 if method == "sgld" else 1e-2)
    runner = Runner(algorithm, data, seed=0, batch_size=16, run_dir=run_dir,
                    checkpoint_every=25, log_every=5, **kw)
    if algorithm.kind == "sampler":
        runner.store = DiskStore(run_dir / "samples", burnin=30, thin=3, max_samples=12,
                                 shard_size=4, exist_ok=True)
    return runner


def _same(a, b):
    sa, sb = state_to_tensors(a.state), state_to_tensors(b.state)
    assert set(sa) == set(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)
    if a.store is not None:
        assert torch.equal(a.store.load(), b.store.load()) if isinstance(a.store.load(), torch.Tensor) \
            else all(torch.equal(a.store.load()[k], b.store.load()[k]) for k in a.store.load())
    strip = [{k: v for k, v in e.items() if k != "time_s"} for e in a.history]
    assert strip == [{k: v for k, v in e.items() if k != "time_s"} for e in b.history]


@pytest.mark.parametrize(("method", "at"), [("sgld", 87), ("sgld", 28), ("map", 87)])
def test_resume_after_a_crash_is_bit_exact(blr, tmp_path, monkeypatch, method, at):
    """Crashes after the first kept draw and during burn-in (no draw kept yet)."""
    full = _runner(blr, tmp_path / "full", method).fit(STEPS)
    with monkeypatch.context() as patch:
        _inject(patch, method, at, "crash")
        with pytest.raises(RuntimeError, match="simulated crash"):
            _runner(blr, tmp_path / "cut", method).fit(STEPS)
    assert load_checkpoint(latest_checkpoint(tmp_path / "cut" / "checkpoints")).step == at // 25 * 25
    resumed = _runner(blr, tmp_path / "cut", method).fit(STEPS, resume=True)
    _same(full, resumed)
    if method == "sgld":
        assert resumed.num_kept == 12
        leftover = {p.name for p in (tmp_path / "cut" / "samples").glob("shard-*")}
        assert leftover == {p.name for p in (tmp_path / "full" / "samples").glob("shard-*")}
    log = [json.loads(line) for line in (tmp_path / "cut" / "log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log] == list(range(5, STEPS + 1, 5))


@pytest.mark.parametrize(("fault", "at"), [("sigint", 40), ("sigterm", 10)])
def test_ctrl_c_and_sigterm_checkpoint_and_resume_exactly(blr, tmp_path, monkeypatch, fault, at):
    full = _runner(blr, tmp_path / "full").fit(STEPS)
    before = signal.getsignal(signal.SIGTERM)
    with monkeypatch.context() as patch:
        _inject(patch, "sgld", at, fault)
        with pytest.raises(Interrupted) as info:
            _runner(blr, tmp_path / "cut").fit(STEPS)
    assert info.value.step == at + 1
    assert info.value.checkpoint.name == f"step-{at + 1:09d}.safetensors"
    assert fault.upper() in str(info.value)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers restored
    assert signal.getsignal(signal.SIGTERM) is before
    _same(full, _runner(blr, tmp_path / "cut").fit(STEPS, resume=True))


def test_nan_stops_naming_step_method_and_fix_and_keeps_last_good_checkpoint(
    blr, tmp_path, monkeypatch
):
    _inject(monkeypatch, "sgld", 60, "nan")
    with pytest.raises(NonFiniteError) as info:
        _runner(blr, tmp_path).fit(STEPS)
    text = str(info.value)
    assert "step 61" in text and "sgld" in text and "lower lr" in text
    assert "step-000000050.safetensors" in text
    assert load_checkpoint(latest_checkpoint(tmp_path / "checkpoints")).step == 50


def test_resume_refuses_a_different_configuration_and_fresh_runs_refuse_a_used_dir(blr, tmp_path):
    run_dir = tmp_path / "run"  # (beside "empty": run folders do not nest)
    _runner(blr, run_dir).fit(50)
    with pytest.raises(ValueError, match="total_steps=50"):
        _runner(blr, run_dir).fit(60, resume=True)
    model, data, _, _ = blr
    other = Runner(get_method("sgld").build(model, lr=2e-3), data, seed=0, batch_size=16,
                   run_dir=run_dir)
    with pytest.raises(ValueError, match="lr"):
        other.fit(50, resume=True)
    with pytest.raises(FileExistsError, match="resume=True"):
        _runner(blr, run_dir).fit(50)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        _runner(blr, tmp_path / "empty").fit(50, resume=True)


def test_resume_refuses_a_checkpoint_of_another_update_rule_version(blr, tmp_path, monkeypatch):
    _runner(blr, tmp_path).fit(20)
    sgld_class = type(get_method("sgld").build(blr[0]))
    monkeypatch.setattr(sgld_class, "VERSION", sgld_class.VERSION + 1)
    with pytest.raises(ValueError, match="update rule differs"):
        _runner(blr, tmp_path).fit(20, resume=True)


def _as_format_1(run_dir, hyperparameters=None):
    """Rewrite the run's checkpoint as bdlkit before 0.2 wrote it (no checkpoint_format)."""
    path = latest_checkpoint(run_dir / "checkpoints")
    ckpt = load_checkpoint(path)
    ckpt.meta.pop("checkpoint_format")
    ckpt.meta.pop("format", None), ckpt.meta.pop("step", None)
    if hyperparameters is not None:
        ckpt.meta["hyperparameters"] = hyperparameters
    path.unlink()
    save_checkpoint(run_dir / "checkpoints", ckpt)


def test_a_checkpoint_written_before_the_protocol_resumes_or_is_refused_by_version(blr, tmp_path):
    full = _runner(blr, tmp_path / "full").fit(40)
    _runner(blr, tmp_path / "same").fit(40)
    _as_format_1(tmp_path / "same")  # the same record: it resumes
    _same(full, _runner(blr, tmp_path / "same").fit(40, resume=True))
    _runner(blr, tmp_path / "old").fit(40)
    _as_format_1(tmp_path / "old", json.dumps({"kind": "'sampler'", "lr": "0.001",
                                               "name": "'sgld'", "num_members": "5"}))
    with pytest.raises(ValueError, match="checkpoint format 1 .written before bdlkit 0.2.0"):
        _runner(blr, tmp_path / "old").fit(40, resume=True)


def test_eval_every_and_log_every(blr):
    model, data, _, _ = blr
    calls = []

    def evaluate(params):
        calls.append(1)
        return {"rmse": 1.0}

    algorithm = get_method("map").build(model)
    res = Runner(algorithm, data, log_every=20, eval_fn=evaluate, eval_every=15).fit(60)
    steps = [e["step"] for e in res.history]
    assert steps == [15, 20, 30, 40, 45, 60]
    assert len(calls) == 4 and all(("eval/rmse" in e) == (e["step"] % 15 == 0) for e in res.history)


def test_epochs_and_memory_store(blr):
    model, (x, y), _, _ = blr
    runner = Runner(get_method("sgld").build(model, lr=1e-3), (x, y), batch_size=30,
                    store=MemoryStore(burnin=2, thin=2))
    assert runner.num_steps(epochs=3) == 12  # ceil(100/30) = 4 batches per epoch
    res = runner.fit(epochs=3)
    assert res.config["steps"] == 12 and res.num_kept == 5


def test_bad_arguments(blr):
    model, data, _, _ = blr
    algorithm = get_method("map").build(model)
    with pytest.raises(ValueError, match="log_every"):
        Runner(algorithm, data, log_every=0)
    with pytest.raises(ValueError, match="eval_fn"):
        Runner(algorithm, data, eval_every=5)
    with pytest.raises(ValueError, match="exactly one"):
        Runner(algorithm, data).fit()
    with pytest.raises(ValueError, match="run_dir"):
        Runner(algorithm, data).fit(5, resume=True)


ACCEPTANCE = ["fit", "--method", "sgld", "--model", "mlp", "--data", "digits", "--steps", "500",
              "--seed", "0", "--no-progress", "--out"]


def _cli(*argv, kill_at=None):
    return run_cli(*argv, method=("bdlkit.algorithms.sgmcmc.sgld", "SGLD"), kill_at=kill_at)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("acceptance") / "full"
    done = _cli(*ACCEPTANCE, str(out))
    assert done.returncode == 0, done.stderr
    return (out / "metrics.json").read_bytes()


@pytest.mark.parametrize(("kill_at", "checkpoint"), [(250, 250), (390, 350)])
def test_issue_acceptance_sigkill_then_resume_gives_identical_metrics(
    tmp_path, uninterrupted, kill_at, checkpoint
):
    """`bdlkit fit ... --steps 500` killed with SIGKILL midway (at the end of burn-in, or
    with sample shards written after the last checkpoint), then `bdlkit fit --resume`."""
    killed = _cli(*ACCEPTANCE, str(tmp_path / "cut"), kill_at=kill_at)
    assert killed.returncode == -signal.SIGKILL
    assert not (tmp_path / "cut" / "metrics.json").exists()
    assert load_checkpoint(latest_checkpoint(tmp_path / "cut" / "checkpoints")).step == checkpoint
    again = _cli("fit", "--resume", str(tmp_path / "cut"), "--no-progress")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "cut" / "metrics.json").read_bytes() == uninterrupted
    assert {"accuracy", "nll", "ece"} <= set(json.loads(uninterrupted))


def test_infer_still_runs_in_memory():
    target = bdlkit.Target(lambda th: -0.5 * (th**2).sum(-1), dim=2)
    res = bdlkit.infer(target, "sgld", steps=200, seed=0)
    assert res.store is not None and isinstance(res.store, MemoryStore) and res.num_kept == 400


def test_a_checkpoint_of_a_newer_format_is_refused(blr, tmp_path):
    _runner(blr, tmp_path).fit(20)
    path = latest_checkpoint(tmp_path / "checkpoints")
    ckpt = load_checkpoint(path)
    ckpt.meta["checkpoint_format"] = 99
    ckpt.meta.pop("format", None), ckpt.meta.pop("step", None)
    path.unlink()
    save_checkpoint(tmp_path / "checkpoints", ckpt)
    with pytest.raises(ValueError, match="format 99, newer than this bdlkit's"):
        _runner(blr, tmp_path).fit(20, resume=True)


def test_a_store_warning_points_at_the_users_line():
    target = bdlkit.Target(lambda t: -0.5 * (t**2).sum(-1), dim=2)
    with pytest.warns(UserWarning, match="burnin=10 keeps draws") as record:
        bdlkit.infer(target, "hmc", steps=40, adapt_steps=20, burnin=10, num_leapfrog=2)
    assert record[0].filename == __file__


class _Spy(torch.Tensor):
    """A log density that records the torch functions called on it."""

    calls: list[str] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls.append(getattr(func, "__name__", str(func)))
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("value", [None, float("nan"), [0.0, float("inf")]])
def test_the_runner_reads_a_steps_log_density_once(monkeypatch, value):
    """The NaN check and the log entry share one host read of a one-value log density
    (the per-step cost of a small target); a Python float and a several-value tensor are
    checked too."""
    cls = type(get_method("sgld").build(bdlkit.Target(lambda t: -t.sum(-1), dim=1)))
    inner = cls.step

    def step(self, state, batch):
        new, info = inner(self, state, batch)
        log_prob = info["log_prob"].as_subclass(_Spy) if value is None else (
            torch.tensor(value) if isinstance(value, list) else value)
        return new, {**info, "log_prob": log_prob}

    monkeypatch.setattr(cls, "step", step)
    monkeypatch.setattr(_Spy, "calls", [])
    target = bdlkit.Target(lambda t: -0.5 * (t**2).sum(-1), dim=2)
    run = lambda: bdlkit.infer(target, "sgld", steps=6, seed=0, progress=False)  # noqa: E731
    if value is not None:
        with pytest.raises(NonFiniteError, match="step 1"):
            run()
        return
    result = run()
    assert _Spy.calls == ["numel", "__float__"] * 6
    assert [type(e["log_prob"]) for e in result.history] == [float] * 6
