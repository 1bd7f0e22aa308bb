"""Two gloo processes against one: data parallelism, chain groups, kill -9 and resume.

The ranks are real processes (``dist_launch.py``: torchrun's environment variables)
running ``dist_worker.py`` on a small float64 MLP problem; the one-process references run
the same function (:func:`dist_worker.run`) in the test process.
"""

from __future__ import annotations

import time
from pathlib import Path

import dist_launch as launch
import dist_worker
import pytest
import torch
from safetensors.torch import load_file

from bdlkit.engine.runlog import read_log

STEPS = 50
METHODS = ("sghmc", "score_vi", "l2e")


def _ranked(out: Path, method: str, rank: int = 0, prefix: str = "state/"
            ) -> dict[str, torch.Tensor]:
    return _part(load_file(out / f"{method}-rank-{rank}.safetensors"), prefix)


def _part(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k: v for k, v in tensors.items() if k.startswith(prefix)}


def _gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys() and a
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a
               if a[k].is_floating_point())


def test_two_ranks_of_batch_b_equal_one_process_of_batch_2b(tmp_path: Path):
    launch.run(2, [",".join(METHODS), str(tmp_path), "--steps", str(STEPS),
                   "--batch-size", "16"])
    for method in METHODS:
        one = dist_worker.run(method, steps=STEPS, batch_size=32)
        half = dist_worker.run(method, steps=STEPS, batch_size=16)
        two0, two1 = _ranked(tmp_path, method, 0), _ranked(tmp_path, method, 1)
        assert _gap(two0, two1) == 0.0, method  # the replicas are replicas
        assert _gap(two0, _part(one, "state/")) < 1e-6, method
        # the batch size matters, so the parity is not trivial
        assert _gap(_part(half, "state/"), _part(one, "state/")) > 1e-4, method
        if method != "score_vi":  # and the writer's kept draws
            assert _gap(_ranked(tmp_path, method, 0, "draws/"), _part(one, "draws/")) < 1e-6


@pytest.mark.slow
def test_a_failing_callback_on_the_writer_stops_every_rank_after_a_checkpoint(tmp_path: Path):
    run_dir = tmp_path / "run"
    procs = launch.start(2, ["sghmc", str(tmp_path / "out"), "--run-dir", str(run_dir),
                             "--fail-at", "7"])
    outputs = [p.communicate(timeout=120)[0] for p in procs]  # no rank is left waiting
    assert [p.returncode for p in procs] != [0, 0]
    assert "failed on purpose" in outputs[0]
    assert "a callback failed on another rank of chain 0" in outputs[1]
    assert (run_dir / "checkpoints" / "step-000000007.safetensors").exists()


@pytest.mark.slow
def test_chains_on_groups_of_two_data_parallel_ranks(tmp_path: Path):
    launch.run(4, ["sghmc", str(tmp_path), "--chain-groups", "2"])  # 2 chains x 2 ranks
    for chain, writer in ((0, 0), (1, 2)):
        alone = dist_worker.run("sghmc", seed=chain, batch_size=32)
        assert _gap(_ranked(tmp_path, "sghmc", writer, "draws/"), _part(alone, "draws/")) < 1e-6
        assert _gap(_ranked(tmp_path, "sghmc", writer), _ranked(tmp_path, "sghmc", writer + 1)
                    ) == 0.0


@pytest.mark.slow
def test_chain_groups_run_independent_chains_equal_to_single_runs(tmp_path: Path):
    launch.run(2, ["sghmc", str(tmp_path), "--chain-groups", "2"])
    g0, g1 = (_ranked(tmp_path, "sghmc", r, "draws/") for r in (0, 1))
    for chain, got in enumerate((g0, g1)):
        alone = _part(dist_worker.run("sghmc", seed=chain), "draws/")
        assert all(torch.equal(got[k], alone[k]) for k in alone)  # the same stream
    assert _gap(g0, g1) > 1e-3  # different draws: not one chain twice


@pytest.mark.slow
def test_kill_one_rank_then_resume_is_bit_exact(tmp_path: Path):
    common = ["--steps", "60", "--checkpoint-every", "10"]
    run_dir = tmp_path / "run"
    procs = launch.start(2, ["sghmc", str(tmp_path / "killed"), *common, "--run-dir",
                             str(run_dir), "--sleep", "0.1"])
    deadline = time.monotonic() + 120
    while (not (run_dir / "checkpoints" / "step-000000020.safetensors").exists()
           and time.monotonic() < deadline):
        time.sleep(0.05)
    procs[1].kill()  # SIGKILL: no handler runs, nothing is saved
    procs[1].wait()
    try:
        procs[0].wait(timeout=60)  # its peer is gone: its next all-reduce fails
    except Exception:  # noqa: BLE001
        procs[0].kill()
        procs[0].wait()
    assert procs[0].returncode != 0 and procs[1].returncode != 0
    assert not (tmp_path / "killed").exists() or not any((tmp_path / "killed").iterdir())
    launch.run(2, ["sghmc", str(tmp_path / "resumed"), *common, "--run-dir", str(run_dir),
                   "--resume"])
    uninterrupted = tmp_path / "uninterrupted"
    launch.run(2, ["sghmc", str(uninterrupted), *common, "--run-dir",
                   str(tmp_path / "run-uninterrupted")])
    whole = load_file(uninterrupted / "sghmc-rank-0.safetensors")
    resumed = load_file(tmp_path / "resumed" / "sghmc-rank-0.safetensors")
    assert whole.keys() == resumed.keys()
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)  # state and draws
    assert _log(run_dir) == _log(tmp_path / "run-uninterrupted")
    alone = dist_worker.run("sghmc", steps=60, batch_size=32)  # and one process of 2B
    assert _gap(_part(alone, "state/"), _part(resumed, "state/")) < 1e-6


def _log(run_dir: Path) -> list[dict]:
    """The writer's log without its wall times (and the digests, which cover them)."""
    lines = read_log(run_dir / "log.jsonl")
    return [{k: v for k, v in e.items() if k != "time_s"} for e in lines]
