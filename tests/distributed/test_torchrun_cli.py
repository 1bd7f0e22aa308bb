"""``torchrun --nproc-per-node 2 -m bdlkit fit ...`` on the CPU (gloo): one run directory,
written by rank 0; chain groups; what a launch that cannot work says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bdlkit.cli import main

FIT = ["-m", "bdlkit", "fit", "--model", "mlp", "--data", "digits", "--no-progress"]


def _torchrun(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=300, check=False)


@pytest.mark.slow
def test_torchrun_fit_writes_one_run_directory_and_resumes(tmp_path: Path):
    done = _torchrun([*FIT, "--method", "sghmc", "--steps", "200", "--out", "R"], tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["R"]
    run = tmp_path / "R"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["accuracy"] > 0.8
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert (config["data_parallel"], config["chain_groups"], config["batch_size"]) == (2, 1, 128)
    assert done.stdout.count("run directory: R") == 1  # rank 0 alone reports
    log = (run / "log.jsonl").read_text().splitlines()
    assert json.loads(log[-1])["step"] == 200 and len(log) == len(set(log))
    again = _torchrun(["-m", "bdlkit", "fit", "--resume", "R", "--no-progress"], tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((run / "metrics.json").read_text()) == metrics
    # read back in one process: the run is the one-process run of batch 2 x 128
    assert main(["evaluate", str(run), "--no-progress"]) == 0
    assert json.loads((run / "metrics.json").read_text())["accuracy"] == metrics["accuracy"]
    # --overwrite: the writer clears the folder before its replica starts
    done = _torchrun([*FIT, "--method", "sgld", "--steps", "20", "--out", "R", "--overwrite"],
                     tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert yaml.safe_load((run / "config.yaml").read_text())["method"] == "sgld"
    refused = _torchrun([*FIT, "--method", "sgld", "--steps", "20", "--out", "R"], tmp_path)
    assert refused.returncode != 0 and "already exists" in refused.stderr


def test_torchrun_chain_groups_write_a_folder_per_chain_and_the_cross_chain_rhat(tmp_path: Path):
    done = _torchrun([*FIT, "--method", "sgld", "--steps", "60", "--chain-groups", "2",
                      "--out", "C"], tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "C").iterdir()) == [
        ".bdlkit-run", "chain-0", "chain-1", "chains.json"]
    seeds = [yaml.safe_load((tmp_path / "C" / f"chain-{g}" / "config.yaml").read_text())["seed"]
             for g in (0, 1)]
    assert seeds == [0, 1]
    chains = json.loads((tmp_path / "C" / "chains.json").read_text())
    assert chains["chains"] == 2 and chains["draws_per_chain"] > 4
    assert chains["function_rhat_vehtari21"]["num"] == 64 * 10
    assert chains["function_rhat_vehtari21"]["mean"] >= 1.0
    again = _torchrun([*FIT, "--method", "sgld", "--steps", "60", "--chain-groups", "2",
                       "--out", "C"], tmp_path)  # an existing OUT needs --overwrite
    assert again.returncode != 0 and "already exists" in again.stderr


def test_chain_groups_without_the_processes_is_one_line_error(tmp_path: Path, capsys):
    code = main(["fit", "--method", "sgld", "--steps", "5", "--chain-groups", "2",
                 "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and "torchrun --nproc-per-node" in err and "Traceback" not in err
