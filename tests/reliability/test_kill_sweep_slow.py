"""Kill -9 sweep, the slow set (``make test-slow``; the fast subset and what is compared
are described in ``test_kill_sweep.py``).

Every method kind: samplers (SGLD, SGHMC, full-batch HMC), VI (score_vi, ADVI), a deep
ensemble and MAP, each SIGKILLed at a seeded random step and while writing a seeded random
checkpoint; the samplers also stopped by SIGINT; SGLD killed while writing its last
checkpoint, while writing a sample shard and twice in a row; meta-training killed while
writing its checkpoint.
"""

from __future__ import annotations

import random

import pytest
from kill_sweep import (
    EVERY,
    KILLED,
    META_EVERY,
    METHODS,
    assert_same_fit,
    assert_same_meta_train,
    bdlkit,
    between_checkpoints,
    explain,
    fit_baseline,
    meta_train,
    meta_train_baseline,
    newest_step,
    rerun_meta_train,
    resume,
    sigint_at_step,
    sigkill_at_step,
    sigkill_writing_checkpoint,
    stale_temps,
)

pytestmark = pytest.mark.slow

SGLD = METHODS["sgld"]


def _rng(case: str) -> random.Random:
    return random.Random(f"issue-19/slow/{case}")


@pytest.fixture(scope="module")
def baselines(tmp_path_factory):
    """``baselines(name)``: the uninterrupted run of method ``name``."""
    return lambda name: fit_baseline(tmp_path_factory, METHODS[name])


@pytest.mark.parametrize("name", ["sgld", "sghmc", "hmc", "advi", "ensemble", "map"])
def test_sigkill_at_a_random_step_then_resume(baselines, tmp_path, name):
    method = METHODS[name]
    kill_at = between_checkpoints(_rng(f"{name}/step"), method.steps)
    sigkill_at_step(method, baselines(name), tmp_path / "run", kill_at)


@pytest.mark.parametrize("name", ["sghmc", "hmc", "score_vi", "advi", "ensemble", "map"])
def test_sigkill_while_writing_a_checkpoint_then_resume(baselines, tmp_path, name):
    method = METHODS[name]
    step = _rng(f"{name}/write").randrange(2 * EVERY, method.steps + 1, EVERY)
    sigkill_writing_checkpoint(method, baselines(name), tmp_path / "run", step)


@pytest.mark.parametrize("name", ["sghmc", "hmc"])
def test_sampler_sigint_then_resume_gives_the_same_shards(baselines, tmp_path, name):
    method = METHODS[name]
    at = _rng(f"{name}/sigint").randrange(method.burnin, method.steps - 1)
    sigint_at_step(method, baselines(name), tmp_path / "run", at)


def test_sampler_sigkill_while_writing_the_last_checkpoint(baselines, tmp_path):
    """The last shard is on disk, the final checkpoint is not: the resume goes back to the
    one before, drops the shards written after it and writes them again."""
    sigkill_writing_checkpoint(SGLD, baselines("sgld"), tmp_path / "run", SGLD.steps)


def test_sampler_sigkill_while_writing_a_sample_shard(baselines, tmp_path):
    run = tmp_path / "run"
    killed = bdlkit(*SGLD.fit(run), mode="write", target=r"shard-\d+\.safetensors", at=2)
    assert killed.returncode == KILLED, explain(killed)
    assert [p.name for p in stale_temps(run)] and not (run / "metrics.json").exists()
    resume(run)
    assert stale_temps(run) == []
    assert_same_fit(run, baselines("sgld"), draws=True)


def test_sampler_sigkill_twice_then_resume(baselines, tmp_path):
    """Killed, killed again during the resume, resumed: still the uninterrupted run."""
    rng = _rng("sgld/twice")
    first = rng.randrange(EVERY, SGLD.steps // 2)
    second = rng.randrange(first // EVERY * EVERY + 1, SGLD.steps)
    run = tmp_path / "run"
    how = dict(mode="step", module=SGLD.module, name=SGLD.cls, signal="SIGKILL")
    killed = bdlkit(*SGLD.fit(run), **how, at=first)
    assert killed.returncode == KILLED, explain(killed)
    killed = bdlkit("fit", "--resume", str(run), "--no-progress", **how, at=second)
    assert killed.returncode == KILLED, explain(killed)
    assert newest_step(run) == second // EVERY * EVERY
    resume(run)
    assert_same_fit(run, baselines("sgld"), draws=True)


def test_meta_train_sigkill_while_writing_its_checkpoint_then_rerun(tmp_path_factory,
                                                                     tmp_path):
    """Killed before the rename of the second checkpoint (history.json already holds
    4 steps, the checkpoint 2): the rerun resumes from step 2."""
    ref = meta_train_baseline(tmp_path_factory)
    run = tmp_path / "meta"
    killed = meta_train(run, mode="write", target=r"checkpoint\.safetensors", at=2)
    assert killed.returncode == KILLED, explain(killed)
    assert [p.name for p in stale_temps(run)]  # the temporary checkpoint file
    rerun_meta_train(run, expect_from=META_EVERY)
    assert stale_temps(run) == []  # the rerun, holding the folder's lock, removed it
    assert_same_meta_train(run, ref)
