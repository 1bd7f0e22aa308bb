"""Recovery (issue 19, item 6): after a NaN stop the kept checkpoint has finite, bounded
parameters, and the run continues from it with a smaller step size."""

import pytest
import torch

import bdlkit
from bdlkit.algorithms import get_method
from bdlkit.core.errors import CorruptFileError, RecoveryWarning
from bdlkit.core.lock import run_lock
from bdlkit.engine.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint
from bdlkit.engine.resume import open_newest
from bdlkit.engine.runner import NonFiniteError, Runner

TARGET = bdlkit.Target(lambda t: -0.5 * (t**2).sum(-1), dim=2)


def _runner(tmp_path, lr):
    """sgld on N(0, I) (θ ← θ + lr ∇log p + noise): with lr = 2.5 each step multiplies θ
    by about -1.5, so |θ| passes the sane bound (1e6) by step ~35 and the log density
    overflows float32 near step 110."""
    algorithm = get_method("sgld").build(TARGET, lr=lr)
    return Runner(algorithm, steps=400, seed=0, run_dir=tmp_path, checkpoint_every=20,
                  log_every=20, chains=2)


def test_a_nan_stop_keeps_the_last_sane_checkpoint_and_resume_takes_a_smaller_lr(tmp_path):
    """The checkpoint kept after a NaN stop used to hold parameters of ~1e22, from which no
    smaller lr could recover."""
    with pytest.raises(NonFiniteError, match="step-000000020.*--resume.*--lr") as info:
        _runner(tmp_path, lr=2.5).fit()
    assert "diverged" in str(info.value)
    folder = tmp_path / "checkpoints"
    kept = list_checkpoints(folder)
    assert [p.name for p in kept] == ["step-000000020.safetensors"]
    assert load_checkpoint(kept[0]).meta["max_abs"] < 1e6
    aside = sorted(folder.glob("*.diverged"))
    assert aside, "the checkpoints after step 20 are kept under another name"
    with pytest.raises(ValueError, match="lr"):  # a changed lr must be declared
        _runner(tmp_path, lr=0.1).fit(resume=True)
    result = _runner(tmp_path, lr=0.1).fit(resume=True, changed={"lr": 20})
    assert result.samples.abs().max() < 20
    assert load_checkpoint(latest_checkpoint(folder)).step == 400


def test_diverged_checkpoints_are_set_aside_not_deleted(tmp_path):
    with pytest.raises(NonFiniteError):
        _runner(tmp_path, lr=2.5).fit()
    aside = sorted((tmp_path / "checkpoints").glob("*.diverged"))
    assert [p.name for p in aside] == [f"step-{s:09d}.safetensors.diverged" for s in (80, 100)]
    with open(aside[0], "rb") as f:  # a real checkpoint, kept for inspection
        assert f.read(8)


def test_resume_falls_back_past_a_damaged_checkpoint_and_refuses_when_all_are(tmp_path):
    runner = Runner(get_method("sgld").build(TARGET, lr=0.1), steps=40, seed=0,
                    run_dir=tmp_path, checkpoint_every=10, chains=2)
    full = runner.fit()
    folder = tmp_path / "checkpoints"
    _damage(latest_checkpoint(folder))
    with pytest.warns(RecoveryWarning, match="step-000000040.*previous checkpoint"):
        again = Runner(get_method("sgld").build(TARGET, lr=0.1), steps=40, seed=0,
                       run_dir=tmp_path, checkpoint_every=10, chains=2).fit(resume=True)
    assert torch.equal(again.samples, full.samples)
    for path in list_checkpoints(folder):
        _damage(path)
    with pytest.raises(CorruptFileError, match="every checkpoint.*damaged"), \
            pytest.warns(RecoveryWarning):
        open_newest(folder)


def _damage(path):
    raw = bytearray(path.read_bytes())
    raw[-4] ^= 0x10
    path.write_bytes(bytes(raw))


def test_the_runner_locks_its_run_dir(tmp_path):
    runner = Runner(get_method("sgld").build(TARGET, lr=0.1), steps=5, seed=0,
                    run_dir=tmp_path, chains=2)
    with run_lock(tmp_path):  # re-entrant in one process: the CLI locks, then the runner
        runner.fit()
    assert latest_checkpoint(tmp_path / "checkpoints") is not None
