"""Kill -9 sweep, the fast subset (issue 19 acceptance; the other method kinds and kill
points are in ``test_kill_sweep_slow.py``).

A ``bdlkit fit`` run SIGKILLed at a random step, or while a checkpoint file is being
written, or stopped by SIGINT, then ``bdlkit fit --resume DIR``, ends byte-identical to an
uninterrupted run of the same command: metrics.json, the draws under samples/, the final
checkpoint's state tensors and log.jsonl but for ``time_s`` (:mod:`kill_sweep`). The
same for ``bdlkit meta-train l2e``, killed between outer steps and rerun with its --out.
The steps are drawn by ``random.Random`` with fixed seeds, so every run of the test
kills at the same points. Every case is a few ``bdlkit`` subprocesses of ~5 s; the
uninterrupted runs are shared.
"""

from __future__ import annotations

import random

import pytest
from kill_sweep import (
    EVERY,
    KILLED,
    META_EVERY,
    META_STEPS,
    METHODS,
    assert_same_meta_train,
    between_checkpoints,
    explain,
    fit_baseline,
    meta_train,
    meta_train_baseline,
    rerun_meta_train,
    sigint_at_step,
    sigkill_at_step,
    sigkill_writing_checkpoint,
)

SGLD, SCORE_VI = METHODS["sgld"], METHODS["score_vi"]


def _rng(case: str) -> random.Random:
    return random.Random(f"issue-19/{case}")


@pytest.fixture(scope="module")
def sgld_run(tmp_path_factory):
    return fit_baseline(tmp_path_factory, SGLD)


@pytest.fixture(scope="module")
def score_vi_run(tmp_path_factory):
    return fit_baseline(tmp_path_factory, SCORE_VI)


@pytest.mark.slow
def test_sampler_sigkill_at_a_random_step_then_resume(sgld_run, tmp_path):
    kill_at = between_checkpoints(_rng("sgld/step"), SGLD.steps)
    sigkill_at_step(SGLD, sgld_run, tmp_path / "run", kill_at)


@pytest.mark.slow
def test_sampler_sigkill_while_writing_a_checkpoint_then_resume(sgld_run, tmp_path):
    step = _rng("sgld/write").randrange(2 * EVERY, SGLD.steps, EVERY)
    sigkill_writing_checkpoint(SGLD, sgld_run, tmp_path / "run", step)


@pytest.mark.slow
def test_sampler_sigint_then_resume_gives_the_same_shards(sgld_run, tmp_path):
    """Defect F11: a run stopped by Ctrl-C and resumed used to end with 6 shards, not 5."""
    at = _rng("sgld/sigint").randrange(SGLD.burnin, SGLD.steps - 1)
    sigint_at_step(SGLD, sgld_run, tmp_path / "run", at)
    assert len(list((tmp_path / "run" / "samples").glob("shard-*.safetensors"))) > 1


@pytest.mark.slow
def test_vi_sigkill_at_a_random_step_then_resume(score_vi_run, tmp_path):
    kill_at = between_checkpoints(_rng("score_vi/step"), SCORE_VI.steps)
    sigkill_at_step(SCORE_VI, score_vi_run, tmp_path / "run", kill_at)


@pytest.mark.slow
def test_meta_train_sigkill_between_outer_steps_then_rerun(tmp_path_factory, tmp_path):
    """Killed on entering outer step ``n`` (``n - 1`` done), rerun with the same --out: it
    resumes from its last checkpoint and ends as the uninterrupted meta-training."""
    ref = meta_train_baseline(tmp_path_factory)
    n = _rng("meta-train/step").randrange(META_EVERY + 1, META_STEPS + 1)
    run = tmp_path / "meta"
    killed = meta_train(run, mode="call", module="bdlkit.l2e.es", name="estimate", at=n)
    assert killed.returncode == KILLED, explain(killed)
    rerun_meta_train(run, expect_from=(n - 1) // META_EVERY * META_EVERY)
    assert_same_meta_train(run, ref)
