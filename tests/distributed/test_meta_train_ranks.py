"""L2E meta-training on 2 processes: the ES population split across the ranks, the
meta-loss all-gathered, the same outer steps as one process."""

from __future__ import annotations

import json
from pathlib import Path

import dist_launch as launch
import pytest
import torch
from safetensors.torch import load_file

from bdlkit.l2e.meta_train import MetaTrainConfig, meta_train, unroll_losses

TINY = ["--families", "teacher-mlp", "--inner-steps", "12", "--sample-window", "6",
        "--num-samples", "3", "--batch-size", "32", "--population", "4", "--outer-steps", "2"]


@pytest.mark.slow
def test_two_ranks_split_the_population_and_take_one_process_steps(tmp_path: Path):
    procs = launch.start(2, ["meta-train", "l2e", *TINY, "--out", str(tmp_path / "two")],
                         module="bdlkit")
    outputs = launch.wait(procs)
    assert "outer step 2/2" in outputs[0] and "meta-training:" not in outputs[1]
    cfg = MetaTrainConfig(families=("teacher-mlp",), inner_steps=12, sample_window=6,
                          num_samples=3, batch_size=32, population=4, outer_steps=2)
    meta_train(tmp_path / "one", cfg, echo=None)
    two = json.loads((tmp_path / "two" / "history.json").read_text())
    one = json.loads((tmp_path / "one" / "history.json").read_text())
    assert [h["task"] for h in two] == [h["task"] for h in one]
    for a, b in zip(two, one):
        for key in ("meta_loss", "loss_plus", "loss_minus", "grad_norm"):
            assert abs(a[key] - b[key]) <= 1e-5 * abs(b[key]), key
    phi2 = load_file(tmp_path / "two" / "meta_params.safetensors")
    phi1 = load_file(tmp_path / "one" / "meta_params.safetensors")
    assert all(torch.allclose(phi2[k], phi1[k], rtol=1e-4, atol=1e-6) for k in phi1)


def test_a_pair_loss_does_not_depend_on_which_share_evaluates_it():
    from bdlkit.l2e.kinetic import init_meta_params
    from bdlkit.l2e.meta_train import flatten_meta
    from bdlkit.l2e.tasks import sample_task

    cfg = MetaTrainConfig(families=("teacher-mlp",), inner_steps=12, sample_window=6,
                          num_samples=3, batch_size=32, population=4)
    like = init_meta_params(torch.Generator().manual_seed(0))
    phi = flatten_meta(like)
    points = phi + 0.01 * torch.randn(8, phi.numel(), generator=torch.Generator().manual_seed(1))
    task = sample_task(3, cfg.families, None)
    whole = unroll_losses(points, like, task, cfg, 5)
    parts = torch.cat([unroll_losses(points, like, task, cfg, 5, slice(i, i + 2))
                       for i in (0, 2)])
    torch.testing.assert_close(parts, whole, rtol=1e-5, atol=1e-6)
    assert whole.unique().numel() > 1  # the pairs differ: the comparison is not trivial
