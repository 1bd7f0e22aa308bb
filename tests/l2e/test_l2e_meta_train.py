"""Meta-training smoke tests: common random numbers, the outer loop, files and resume."""

import json

import pytest
import torch

from bdlkit import cli
from bdlkit.l2e import load_meta_params
from bdlkit.l2e.kinetic import init_meta_params
from bdlkit.l2e.meta_train import (
    MetaTrainConfig,
    flatten_meta,
    meta_train,
    unflatten_meta,
    unroll_losses,
)
from bdlkit.l2e.tasks import available_families, sample_task

TINY = dict(families=("teacher-mlp",), inner_steps=12, sample_window=6, num_samples=3,
            population=2, batch_size=32, checkpoint_every=1)


def test_pairs_share_random_numbers_and_pairs_differ():
    """Both members of a pair see the same task, init, batches and noise: at equal
    meta-parameters their losses are identical; different pairs start elsewhere."""
    cfg = MetaTrainConfig(**TINY)
    like = init_meta_params(torch.Generator().manual_seed(0))
    phi = flatten_meta(like)
    task = sample_task(3, cfg.families)
    losses = unroll_losses(phi.expand(4, -1).clone(), like, task, cfg, seed=7)
    assert torch.isfinite(losses).all()
    assert losses[0] == losses[1] and losses[2] == losses[3]
    assert losses[0] != losses[2]
    again = unroll_losses(phi.expand(4, -1).clone(), like, task, cfg, seed=7)
    torch.testing.assert_close(again, losses)  # deterministic given the seed


def test_flatten_round_trip():
    like = init_meta_params(torch.Generator().manual_seed(0))
    back = unflatten_meta(flatten_meta(like), like)
    assert all(torch.equal(back[k], like[k]) for k in like)


def test_two_outer_steps_change_the_meta_parameters_and_resume(tmp_path):
    out = tmp_path / "meta"
    cfg = MetaTrainConfig(outer_steps=2, **TINY)
    lines: list[str] = []
    summary = meta_train(out, cfg, echo=lines.append, command="test")
    assert summary["steps"] == 2
    assert [line.split(":")[0] for line in lines if line.startswith("outer step")] == [
        "outer step 1/2", "outer step 2/2"]  # each progress line once, the last one too
    for name in ("checkpoint.safetensors", "history.json", "config.json", "meta_loss.png",
                 "meta_params.safetensors"):
        assert (out / name).is_file(), name
    trained = load_meta_params(out / "meta_params.safetensors")
    init = init_meta_params(torch.Generator().manual_seed(0))
    change = max((trained.meta[k] - init[k]).abs().max().item() for k in init)
    assert change > 1e-3  # two Adam steps of lr 0.01 moved φ
    assert trained.constants == cfg.constants
    history = json.loads((out / "history.json").read_text())
    assert [h["step"] for h in history] == [0, 1]
    assert all(h["meta_loss"] is not None for h in history)

    # resume: the same options continue from step 2; the first steps are kept
    summary = meta_train(out, MetaTrainConfig(outer_steps=3, **TINY), echo=None)
    assert summary["steps"] == 3
    again = json.loads((out / "history.json").read_text())
    assert again[:2] == history and len(again) == 3
    lines.clear()  # a finished run resumed: where it stands, once
    assert meta_train(out, MetaTrainConfig(outer_steps=3, **TINY), echo=lines.append)[
        "steps"] == 3
    assert [line.split(":")[0] for line in lines if line.startswith("outer step")] == [
        "outer step 3/3"]

    with pytest.raises(ValueError, match="other options"):
        meta_train(out, MetaTrainConfig(outer_steps=4, **{**TINY, "sigma": 0.1}), echo=None)


def test_reset_adam_option_and_config_validation(tmp_path):
    cfg = MetaTrainConfig(outer_steps=1, reset_adam_each_step=True, **TINY)
    meta_train(tmp_path / "r", cfg, echo=None)
    with pytest.raises(ValueError, match="num_samples <= sample_window"):
        MetaTrainConfig(**{**TINY, "sample_window": 2})
    with pytest.raises(ValueError, match="population"):
        MetaTrainConfig(**{**TINY, "population": 0})
    with pytest.raises(ValueError, match="families"):
        MetaTrainConfig(**{**TINY, "families": ("cifar-resnet",)})


def test_corrupt_checkpoint_is_refused(tmp_path):
    out = tmp_path / "meta"
    meta_train(out, MetaTrainConfig(outer_steps=1, **TINY), echo=None)
    (out / "checkpoint.safetensors").write_bytes(b"garbage")
    from bdlkit.core.serialization import CorruptFileError

    with pytest.raises(CorruptFileError):
        meta_train(out, MetaTrainConfig(outer_steps=2, **TINY), echo=None)


def test_cli_meta_train_runs(tmp_path, capsys):
    out = tmp_path / "cli"
    rc = cli.main(["meta-train", "l2e", "--out", str(out), "--outer-steps", "1",
                   "--families", "teacher-mlp", "--inner-steps", "12", "--sample-window", "6",
                   "--num-samples", "3", "--population", "2", "--batch-size", "32"])
    assert rc == 0
    assert "meta-training: 1 outer steps" in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["command"].startswith(
        "bdlkit meta-train l2e")
    rc = cli.main(["meta-train", "l2e", "--out", str(out), "--population", "0"])
    assert rc == 2


def test_cli_meta_train_momentum_form_stores_its_constants(tmp_path, capsys):
    out = tmp_path / "momentum"
    rc = cli.main(["meta-train", "l2e", "--out", str(out), "--outer-steps", "1",
                   "--families", "teacher-mlp", "--inner-steps", "12", "--sample-window", "6",
                   "--num-samples", "3", "--population", "2", "--batch-size", "32",
                   "--kinetic-form", "momentum", "--grad-scale", "num_data",
                   "--noise-mode", "paper", "--friction", "10"])
    assert rc == 0, capsys.readouterr().err
    c = load_meta_params(out / "meta_params.safetensors").constants
    assert (c.kinetic_form, c.grad_scale, c.noise_mode, c.friction) == (
        "momentum", "num_data", "paper", 10.0)
    assert json.loads((out / "history.json").read_text())[0]["meta_loss"] is not None
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["meta-train", "l2e", "--out", str(tmp_path / "x"), "--grad-scale", "all"])
    assert exit_info.value.code == 2 and "num_data" in capsys.readouterr().err


def test_momentum_unroll_uses_each_tasks_n():
    """grad_scale "num_data" is resolved per task: the loss is finite and differs from a
    fixed scale's."""
    from dataclasses import replace

    base = MetaTrainConfig(**TINY)
    like = init_meta_params(torch.Generator().manual_seed(0))
    phi = flatten_meta(like).expand(2, -1).clone()
    task = sample_task(3, base.families)
    losses = {}
    for scale in ("num_data", 50_000.0):
        cfg = replace(base, constants=replace(base.constants, kinetic_form="momentum",
                                              grad_scale=scale, noise_mode="paper"))
        losses[scale] = unroll_losses(phi, like, task, cfg, seed=7)
    assert torch.isfinite(losses["num_data"]).all()
    assert not torch.equal(losses["num_data"], losses[50_000.0])


def test_task_distribution_is_deterministic_and_offline():
    fams = available_families()
    assert "teacher-mlp" in fams and "mnist-cnn" in fams
    a, b = sample_task(11, ("teacher-mlp",)), sample_task(11, ("teacher-mlp",))
    assert a.name == b.name and torch.equal(a.x_train, b.x_train)
    assert len(a.x_valid) > 0 and a.num_data == len(a.y_train)
    assert int(a.y_train.max()) < a.num_classes


def test_resumed_run_equals_an_uninterrupted_one(tmp_path):
    """2 outer steps, then 1 resumed step: the same φ and Adam state as 3 straight steps."""
    meta_train(tmp_path / "a", MetaTrainConfig(outer_steps=2, **TINY), echo=None)
    meta_train(tmp_path / "a", MetaTrainConfig(outer_steps=3, **TINY), echo=None)
    meta_train(tmp_path / "b", MetaTrainConfig(outer_steps=3, **TINY), echo=None)
    a = load_meta_params(tmp_path / "a" / "meta_params.safetensors").meta
    b = load_meta_params(tmp_path / "b" / "meta_params.safetensors").meta
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_overwrite_never_resumes_the_old_state(tmp_path):
    """--overwrite removes the old checkpoint at once, so an interrupted new run cannot
    later resume the old φ under the new options."""
    out = tmp_path / "meta"
    meta_train(out, MetaTrainConfig(outer_steps=2, **TINY), echo=None)
    new = MetaTrainConfig(outer_steps=2, budget_minutes=1e-9, **{**TINY, "sigma": 0.02})
    summary = meta_train(out, new, overwrite=True, echo=None)  # stops before any step
    assert summary["steps"] == 0 and summary["final_meta_loss"] is None
    assert not (out / "checkpoint.safetensors").exists() or json.loads(
        (out / "history.json").read_text()) == []
    summary = meta_train(out, MetaTrainConfig(outer_steps=1, **{**TINY, "sigma": 0.02}),
                         echo=None)
    assert summary["steps"] == 1  # started afresh, not at the old step 2


def test_meta_parameter_files_are_checked(tmp_path):
    from bdlkit.core.serialization import CorruptFileError, save_tensors
    from bdlkit.l2e import Constants, save_meta_params

    meta = init_meta_params(torch.Generator().manual_seed(0))
    save_tensors(tmp_path / "plain.safetensors", meta)  # no constants in the metadata
    with pytest.raises(CorruptFileError, match="not an L2E meta-parameter file"):
        load_meta_params(tmp_path / "plain.safetensors")
    bad = dict(meta, w1=torch.zeros(32, 16))
    save_tensors(tmp_path / "shape.safetensors", bad, metadata={"constants": "{}"})
    with pytest.raises(CorruptFileError, match="w1 has shape"):
        load_meta_params(tmp_path / "shape.safetensors")
    save_tensors(tmp_path / "const.safetensors", meta,
                 metadata={"constants": json.dumps({"eps": -1.0})})
    with pytest.raises(CorruptFileError, match="eps"):
        load_meta_params(tmp_path / "const.safetensors")
    path = save_meta_params(tmp_path / "ok.safetensors", meta, Constants(eps=0.01), {"seed": 4})
    pre = load_meta_params(path)
    assert pre.constants.eps == 0.01 and pre.info["seed"] == "4"
