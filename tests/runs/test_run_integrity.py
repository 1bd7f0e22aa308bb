"""Nothing damaged is read as good (issue 19, F1-F4, F10, F12): checksummed checkpoints,
shards and saved results, the manifest checked against the checkpoint, one writer per
run folder, and a resume that sets a damaged checkpoint aside and recomputes."""

import json
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import bdlkit
from bdlkit.core.errors import CorruptFileError, RecoveryWarning
from bdlkit.core.lock import HOLDER_NAME, LOCK_NAME, FolderBusyError
from bdlkit.engine.checkpoint import latest_checkpoint, list_checkpoints
from bdlkit.runs import directory as run
from bdlkit.runs.config import RunConfig
from bdlkit.runs.yaml_files import load_yaml, save_yaml

CONFIG = dict(method="sgld", data="digits", model_kwargs={"hidden": [8]}, steps=60,
              batch_size=64, burnin=10, thin=1, max_samples=50, checkpoint_every=10,
              log_every=10, eval_samples=8, hyper={"lr": 1e-3})


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished sgld run (50 draws: shards of 50 under the default shard size) and its
    metrics.json bytes."""
    out = tmp_path_factory.mktemp("integrity") / "run"
    run.fit(RunConfig(**CONFIG), out)
    return out, (out / "metrics.json").read_bytes()


@pytest.fixture
def copy(finished, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(finished[0], out)
    return out


def _flip(path, offset_from_end, mask=0x01):
    raw = bytearray(path.read_bytes())
    raw[-offset_from_end] ^= mask
    path.write_bytes(bytes(raw))


def test_the_newest_two_checkpoints_are_kept(finished):
    names = [p.name for p in list_checkpoints(finished[0] / "checkpoints")]
    assert names == ["step-000000050.safetensors", "step-000000060.safetensors"]


def test_f1_a_flipped_checkpoint_byte_is_refused_and_resume_recomputes(copy, finished):
    """F1: a byte flipped inside the final checkpoint's tensor data (header intact) used
    to give evaluate and --resume exit 0 with other metrics."""
    final = latest_checkpoint(copy / "checkpoints")
    _flip(final, 100)
    with pytest.raises(CorruptFileError, match=f"{final.name}.*damaged.*--resume"):
        run.reevaluate(copy)
    with pytest.warns(RecoveryWarning, match="set it aside"):
        run.resume(copy)
    assert (copy / "checkpoints" / f"{final.name}.damaged").exists()
    assert (copy / "metrics.json").read_bytes() == finished[1]
    run.reevaluate(copy)
    assert (copy / "metrics.json").read_bytes() == finished[1]


def test_f2_a_flipped_exponent_bit_in_a_shard_is_refused(copy):
    """F2: flipped exponent bits in a sample shard used to change the metrics silently."""
    shard = sorted((copy / "samples").glob("shard-*.safetensors"))[0]
    _flip(shard, 2, mask=0x40)  # the high byte of a little-endian float32: its exponent
    with pytest.raises(CorruptFileError, match=f"{shard.name}.*damaged"):
        run.reevaluate(copy)


@pytest.mark.parametrize("edit", ["drop_shard", "offset", "total_seen", "truncate"])
def test_f3_an_edited_manifest_is_refused_and_resume_rewrites_it(copy, finished, edit):
    """F3: removing a shard entry or editing the offset used to make evaluate silently
    use fewer draws; the manifest is now checked against the final checkpoint's record."""
    path = copy / "samples" / "manifest.json"
    manifest = json.loads(path.read_text())
    if edit == "drop_shard":
        manifest["shards"] = manifest["shards"][1:] or []
        manifest["offset"] = 0
    elif edit == "offset":
        manifest["offset"] = 3
    elif edit == "total_seen":
        manifest["total_seen"] += 1
    path.write_text(json.dumps(manifest)[: 40 if edit == "truncate" else None])
    with pytest.raises(CorruptFileError, match="manifest.json (does not match|is not valid).*"
                                               "--resume"):
        run.reevaluate(copy)
    run.resume(copy)  # the checkpoint's record is the truth
    assert (copy / "metrics.json").read_bytes() == finished[1]


def test_f4_a_second_writer_is_refused_while_the_first_runs(copy):
    """F4: two writers on one folder used to interleave log.jsonl."""
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from bdlkit.core.lock import run_lock
        with run_lock({str(copy)!r}, "a test holding the lock"):
            print("held", flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = (copy / "log.jsonl").read_bytes()
        for attempt in (lambda: run.resume(copy), lambda: run.reevaluate(copy),
                        lambda: run.fit(RunConfig(**CONFIG), copy, overwrite=True)):
            with pytest.raises(FolderBusyError, match=f"PID {holder.pid}.*holding the lock"):
                attempt()
        assert (copy / "log.jsonl").read_bytes() == before
    finally:
        holder.kill()
        holder.wait()
    run.reevaluate(copy)  # the kernel released the dead holder's lock: taken over


def test_a_lock_file_left_by_a_dead_process_is_taken_over(copy):
    (copy / LOCK_NAME).write_text("")
    (copy / HOLDER_NAME).write_text(json.dumps({"pid": 999999, "host": "elsewhere",
                                                "purpose": "x", "command": "y", "since": "z"}))
    run.reevaluate(copy)
    assert not (copy / HOLDER_NAME).exists()


def test_f10_stale_temporary_files_are_removed_on_resume(copy, finished):
    """F10: a kill during a checkpoint write used to leave .step-*.tmp files forever."""
    stale = [copy / "checkpoints" / ".step-000000060.safetensors.ab12cd34.tmp",
             copy / "samples" / ".shard-000001.safetensors.zz99yy88.tmp",
             copy / ".metrics.json.k3j4h5g6.tmp"]
    for path in stale:
        path.write_bytes(b"half a file")
    run.resume(copy)
    assert not any(p.exists() for p in stale)
    assert (copy / "metrics.json").read_bytes() == finished[1]


def test_an_edited_burnin_is_refused_by_resume_and_evaluate(copy):
    """Resume used to ignore an edited burnin, and evaluate did not check config.yaml
    against the checkpoint."""
    values = load_yaml(copy / "config.yaml")
    save_yaml(copy / "config.yaml", {**values, "burnin": 20})
    with pytest.raises(ValueError, match="samples='burnin=10.*burnin=20"):
        run.resume(copy)
    with pytest.raises(ValueError, match="config.yaml was edited"):
        run.reevaluate(copy)
    save_yaml(copy / "config.yaml", {**values, "prior_scale": 3.0})
    with pytest.raises(ValueError, match=r"different problem: prior=IsotropicGaussian\(scale=1.0, mean=0\) in the checkpoint.*config.yaml was edited"):
        run.reevaluate(copy)


@pytest.mark.parametrize("damage", ["flip_samples", "delete_samples", "flip_state",
                                    "no_method", "swap_samples"])
def test_f12_a_damaged_saved_result_is_refused(tmp_path, damage):
    """F12: bdlkit.load of a saved Result with a bit-flipped or deleted samples file used
    to succeed with other draws or samples=None."""
    target = bdlkit.Target(lambda t: -0.5 * (t**2).sum(-1), dim=3)
    result = bdlkit.infer(target, "sgld", steps=60, seed=0, lr=0.1)
    result.save(tmp_path / "a")
    assert torch.equal(bdlkit.load(tmp_path / "a").samples, result.samples)
    folder = tmp_path / "a"
    if damage == "flip_samples":
        _flip(folder / "samples.safetensors", 5)
    elif damage == "delete_samples":
        (folder / "samples.safetensors").unlink()
    elif damage == "flip_state":
        _flip(folder / "state.safetensors", 3)
    elif damage == "swap_samples":
        other = bdlkit.infer(target, "sgld", steps=60, seed=1, lr=0.1)
        other.save(tmp_path / "b")
        shutil.copy(tmp_path / "b" / "samples.safetensors", folder / "samples.safetensors")
    else:
        meta = json.loads((folder / "result.json").read_text())
        del meta["config"]["method"]
        (folder / "result.json").write_text(json.dumps(meta))
    problem = target if damage == "flip_state" else None
    with pytest.raises(CorruptFileError, match="safetensors|method"):
        bdlkit.load(folder, problem=problem)


def test_the_lock_is_released_after_a_run(finished):
    time.sleep(0)  # the fixture's run has returned: a new writer takes the lock at once
    from bdlkit.core.lock import run_lock

    with run_lock(finished[0]):
        pass


def test_resume_changes_only_the_step_size(copy):
    from bdlkit.core.errors import InputError

    with pytest.raises(InputError, match="only the step size.*--lr; got --prior-scale"):
        run.resume(copy, step_size=("prior_scale", 0.5))
    with pytest.raises(InputError, match="--lr must be a finite number > 0"):
        run.resume(copy, step_size=("lr", float("nan")))
    before = (copy / "config.yaml").read_bytes()
    with pytest.raises(InputError, match="has finished.*nothing to continue"):
        run.resume(copy, step_size=("lr", 1e-4))
    assert (copy / "config.yaml").read_bytes() == before


def test_a_declared_absurd_class_count_is_refused_before_allocating(tmp_path):
    import numpy as np

    from bdlkit.core.errors import InputError

    path = tmp_path / "d.npz"
    np.savez(path, x=np.random.default_rng(0).normal(size=(20, 3)), y=np.arange(20) % 2)
    cfg = RunConfig(method="map", data=str(path), steps=2,
                    data_kwargs={"num_classes": 10**9})
    with pytest.raises(InputError, match="1000000000 network outputs"):
        run.fit(cfg, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["resume", "evaluate"])
def test_a_folder_that_is_not_a_run_is_refused_untouched(tmp_path, command):
    """--resume and evaluate of a user's folder used to leave a lock file in it (or create
    a missing one) and delete its *.tmp files before refusing it."""
    user = tmp_path / "mine"
    user.mkdir()
    (user / ".swap.abcd1234.tmp").write_text("an editor's file")
    for folder in (user, tmp_path / "missing"):
        with pytest.raises(FileNotFoundError, match="not a bdlkit run directory"):
            run.resume(folder) if command == "resume" else run.reevaluate(folder)
    assert sorted(p.name for p in user.iterdir()) == [".swap.abcd1234.tmp"]
    assert not (tmp_path / "missing").exists()


def test_a_resume_with_a_new_lr_interrupted_before_its_first_checkpoint_resumes_plainly(
        tmp_path, monkeypatch):
    """config.yaml gets the new lr before the run continues; the checkpoints written before
    the change (with the old lr) stay resumable and the change is recorded once."""
    from bdlkit.core.errors import NonFiniteError
    from bdlkit.engine.runner import Runner

    out = tmp_path / "r"
    cfg = RunConfig(**{**CONFIG, "hyper": {"lr": 10.0}, "checkpoint_every": 5})  # NaN at 27
    with pytest.raises(NonFiniteError):
        run.fit(cfg, out)
    inner = Runner._fit

    def interrupted(self, resume, config):
        raise KeyboardInterrupt  # Ctrl-C before the first new checkpoint

    monkeypatch.setattr(Runner, "_fit", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run.resume(out, step_size=("lr", 1e-3))
    monkeypatch.setattr(Runner, "_fit", inner)
    saved = load_yaml(out / "config.yaml")
    assert saved["hyper"]["lr"] == 1e-3 and len(saved["changes"]) == 1
    run.resume(out)  # plain: the old-lr checkpoint is at the change's step
    run.reevaluate(out)
    assert load_yaml(out / "config.yaml")["changes"] == saved["changes"]
