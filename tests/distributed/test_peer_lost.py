"""Issue 45, item 7: a lost rank of a data-parallel run is one line, not a bdlkit bug.

The backend's error is simulated in-process: ``torch.distributed.all_reduce`` raises what
gloo raises when the peer's process was killed (measured with torch 2.13: a plain
``RuntimeError``), on "rank 0 of 2" (``RANK``/``WORLD_SIZE``, no process group). The real
torchrun case (a rank SIGKILLed, every survivor's one line, the resume with the printed
command) is ``tests/reliability/test_kill_sweep_ranks.py``.
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

import pytest
import torch.distributed as dist
import yaml

from bdlkit.cli_errors import run_guarded
from bdlkit.core import distributed
from bdlkit.core.errors import PeerLost

GLOO = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection "
        "closed by peer [127.0.0.1]:37504. This is typically caused by a remote worker "
        "crashing. Check the logs of the remote worker before reporting an error. GLHF!")


@pytest.fixture
def rank_0_of_2(monkeypatch):
    """This process is rank 0 of 2, and its peer's process is gone."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")

    def all_reduce(*args, **kwargs):
        raise RuntimeError(GLOO)

    monkeypatch.setattr(dist, "all_reduce", all_reduce)


@pytest.fixture
def sigterm_raises():
    """SIGTERM raises here (no test kills its own worker), whatever the code under test
    does; the handler before is restored after."""
    def handler(signum, frame):
        raise AssertionError("SIGTERM reached the test's own handler")

    before = signal.signal(signal.SIGTERM, handler)
    yield
    signal.signal(signal.SIGTERM, before)


def _run_folder(root: Path, data_parallel: int, chain_groups: int = 1,
                checkpoint: int | None = 20) -> Path:
    """A run folder as a launch of data_parallel × chain_groups processes leaves it: each
    chain's config.yaml and (unless ``checkpoint`` is None) its checkpoint of that step."""
    run = root / "R"
    chains = [run] if chain_groups == 1 else [run / f"chain-{g}" for g in range(chain_groups)]
    for chain in chains:
        (chain / "checkpoints").mkdir(parents=True)
        (chain / "config.yaml").write_text(yaml.safe_dump(
            {"method": "sgld", "data_parallel": data_parallel, "chain_groups": chain_groups}))
        if checkpoint is not None:
            (chain / "checkpoints" / f"step-{checkpoint:09d}.safetensors").write_bytes(b"")
    return run


def _fit(out: Path) -> argparse.Namespace:
    return argparse.Namespace(resume=None, out=str(out))


def _stop_in_an_all_reduce() -> int:
    distributed.any_of([False], None)  # the step's decision, taken together
    return 0


def test_a_lost_peer_in_a_collective_is_peer_lost_naming_the_rank(rank_0_of_2):
    with pytest.raises(PeerLost) as lost:
        distributed.any_of([True], None)
    assert (lost.value.rank, lost.value.lost) == (0, (1,))
    assert "rank 1 of this run was lost while rank 0 waited for it" in str(lost.value)
    assert "Connection closed by peer [127.0.0.1]:37504" in str(lost.value)
    assert "GLHF" not in str(lost.value)  # the backend's first sentence only


def test_other_errors_in_a_collective_are_not_a_lost_peer(monkeypatch):
    def all_reduce(*args, **kwargs):
        raise RuntimeError("Tensors must be contiguous")

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    with pytest.raises(RuntimeError, match="contiguous") as err:
        distributed.any_of([True], None)
    assert not isinstance(err.value, PeerLost)


def test_lost_rank_is_one_line_with_last_checkpoint_and_torchrun_resume_command(
        rank_0_of_2, tmp_path, capsys):
    run = _run_folder(tmp_path, data_parallel=2)
    code = run_guarded("fit", _fit(run), _stop_in_an_all_reduce)
    err = capsys.readouterr().err
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bdlkit: stopped: rank 1 of this run was lost")
    assert f"last checkpoint {run}/checkpoints/step-000000020.safetensors" in err
    assert err.rstrip().endswith(
        f"resume with: torchrun --nproc-per-node 2 -m bdlkit fit --resume {run}")
    assert "internal error" not in err and "Traceback" not in err


def test_lost_rank_of_chain_groups_names_its_chain_checkpoint_and_all_processes(
        monkeypatch, tmp_path, capsys):
    run = _run_folder(tmp_path, data_parallel=2, chain_groups=2)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)  # rank 3 of 4: chain 1's
    monkeypatch.setattr(dist, "get_rank", lambda: 3)            # replica, whose writer is
    monkeypatch.setattr(dist, "get_process_group_ranks", lambda group: [2, 3])  # lost

    def body() -> int:
        raise distributed.lost_peer("chain 1's group", "Connection reset by peer")

    assert run_guarded("fit", _fit(run), body) == 1
    err = capsys.readouterr().err
    assert "rank 2 of this run was lost while rank 3 waited for it" in err
    assert f"last checkpoint {run}/chain-1/checkpoints/step-000000020" in err
    assert f"torchrun --nproc-per-node 4 -m bdlkit fit --resume {run}" in err


def test_lost_rank_before_any_checkpoint_says_to_start_again(rank_0_of_2, tmp_path, capsys):
    run = _run_folder(tmp_path, data_parallel=2, checkpoint=None)
    assert run_guarded("fit", _fit(run), _stop_in_an_all_reduce) == 1
    err = capsys.readouterr().err
    assert "no checkpoint was written yet" in err and "--overwrite" in err
    assert "--resume" not in err


def test_the_launchers_sigterm_while_a_lost_rank_is_raised_still_reports_it(
        rank_0_of_2, sigterm_raises, tmp_path, capsys):
    """torchrun SIGTERMs the survivors as soon as it sees a rank die: a SIGTERM that
    arrives while the PeerLost is on its way up is not reported as a plain interruption."""
    run = _run_folder(tmp_path, data_parallel=2)

    def body() -> int:
        try:
            return _stop_in_an_all_reduce()
        finally:  # the launcher's SIGTERM, while the error is raised
            signal.raise_signal(signal.SIGTERM)

    assert run_guarded("fit", _fit(run), body) == 1
    err = capsys.readouterr().err
    assert err.startswith("bdlkit: stopped: rank 1 of this run was lost")
    assert f"torchrun --nproc-per-node 2 -m bdlkit fit --resume {run}" in err
