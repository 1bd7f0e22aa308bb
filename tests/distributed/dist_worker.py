"""One rank of a multi-process test run (``tests/distributed``): launched by
:func:`dist_launch.start` with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR/PORT).
It runs methods on a small float64 MLP problem and saves the final state (and the kept
draws of a sampler) of its chain to ``<out>/<method>-rank-<r>.safetensors``. :func:`run`
is the same run inside the calling process (the one-process reference).

    python dist_worker.py METHOD[,METHOD...] OUT --steps S --batch-size B [--chain-groups G]
                     [--run-dir D] [--resume] [--seed S] [--checkpoint-every K] [--sleep SEC]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

import torch

from bdlkit.algorithms import get_method
from bdlkit.core import distributed
from bdlkit.core.errors import PointEstimateWarning
from bdlkit.core.serialization import save_tensors, state_to_tensors
from bdlkit.core.tree import tree_flatten_with_path
from bdlkit.engine.callbacks import Hooks
from bdlkit.engine.runner import Runner
from bdlkit.models.mlp import MLP
from bdlkit.problems import BayesianModel

ROWS, FEATURES, CLASSES = 97, 6, 3  # batches of 2 x 16: each epoch ends with 1 row
HYPER = {"sghmc": {"lr": 1e-3}, "score_vi": {"lr": 1e-3}, "l2e": {},
         "sgld": {"lr": 1e-3}, "ensemble": {"members": 2, "lr": 1e-3}}


def problem_and_data() -> tuple[BayesianModel, tuple[torch.Tensor, torch.Tensor]]:
    """The same float64 problem in every process: an MLP on a fixed random data set."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(ROWS, FEATURES, generator=g, dtype=torch.float64)
    y = torch.randint(0, CLASSES, (ROWS,), generator=g)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        net = MLP(FEATURES, CLASSES, hidden=(16,)).double()
    return BayesianModel(net, "categorical", prior=1.0, num_data=ROWS), (x, y)


class Sleep(Hooks):
    """Slow each logged step down (so a test can kill a rank mid-run)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_log(self, event) -> None:  # noqa: ANN001
        time.sleep(self.seconds)


class FailAt(Hooks):
    """A callback that raises at one step (on the rank it is given to)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_log(self, event) -> None:  # noqa: ANN001
        if event.step == self.step:
            raise OSError("the test's callback failed on purpose")


def run(method: str, *, steps: int = 50, batch_size: int = 16, seed: int = 0,
        topology: distributed.Topology = distributed.SINGLE, run_dir: Path | None = None,
        resume: bool = False, checkpoint_every: int | None = None, sleep: float = 0.0,
        fail_at: int | None = None) -> dict[str, torch.Tensor]:
    """This rank's part of a run; returns its final state (``state/...``) and, on a
    writer of a sampler, the kept draws (``draws/...``)."""
    problem, data = problem_and_data()
    algorithm = get_method(method).build(problem, **HYPER[method])
    if run_dir is not None and topology.chain_groups > 1:
        run_dir = run_dir / f"chain-{topology.chain}"
    runner = Runner(algorithm, data, steps=steps, seed=seed + topology.chain,
                    batch_size=batch_size, run_dir=run_dir, topology=topology,
                    checkpoint_every=checkpoint_every, burnin=steps // 2, thin=1,
                    callbacks=([Sleep(sleep)] if sleep else [])
                    + ([FailAt(fail_at)] if fail_at is not None and topology.writer else []))
    with warnings.catch_warnings():  # 50 steps: σ has barely moved (not the question here)
        warnings.simplefilter("ignore", PointEstimateWarning)
        result = runner.fit(resume=resume)
    tensors = {f"state/{k}": v for k, v in state_to_tensors(result.state).items()}
    if algorithm.collects_draws and topology.writer:
        paths, leaves, _ = tree_flatten_with_path(result.draws.stacked())
        tensors.update({f"draws/{k}": v for k, v in zip(paths, leaves, strict=True)})
    return tensors


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("methods", help="comma-separated: run each in turn")
    p.add_argument("out", type=Path)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--chain-groups", type=int, default=1)
    p.add_argument("--run-dir", type=Path)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-every", type=int)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--fail-at", type=int, help="the writer's callback raises at this step")
    args = p.parse_args()
    topology = distributed.init(args.chain_groups)
    args.out.mkdir(parents=True, exist_ok=True)
    for method in args.methods.split(","):
        tensors = run(method, steps=args.steps, batch_size=args.batch_size, seed=args.seed,
                      topology=topology, run_dir=args.run_dir, resume=args.resume,
                      checkpoint_every=args.checkpoint_every, sleep=args.sleep,
                      fail_at=args.fail_at)
        save_tensors(args.out / f"{method}-rank-{topology.rank}.safetensors",
                     {k: v.contiguous() for k, v in tensors.items()})
    distributed.barrier()  # no rank leaves while another still talks to it
    if distributed.launched():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
