"""The ``runner`` suite: what the Runner costs over a bare ``step`` loop.

SGLD on the digits MLP (64-100-10, batch 128), the same steps three ways, in one
process, repeated ``repeats`` times (the median is reported):

* ``bare``: ``state, info = algorithm.step(state, batches(t))`` and nothing else;
* ``memory``: :class:`~bdlkit.Runner` without a run directory (what ``bdlkit.infer``
  does: NaN check, history, in-memory sample store);
* ``run_dir``: the Runner as ``bdlkit fit`` uses it: ``log.jsonl``, a disk sample store
  and a checkpoint every 10 % of the run.

The ratio to ``bare`` is the overhead. The three trajectories are also compared
bit for bit (``same_final_state``): the Runner must not change the chain.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bdlkit import data, models
from bdlkit.algorithms import get_method
from bdlkit.bench.common import prepare_bench_out, warm_up, write_results
from bdlkit.core.rng import fold_in
from bdlkit.engine.batches import Batches
from bdlkit.engine.runner import DATA_SEED_SALT, Runner
from bdlkit.problems import BayesianModel

DESCRIPTION = "Runner overhead over a bare step loop (memory, run dir with checkpoints)"


def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True, steps: int | None = None, repeats: int | None = None
        ) -> list[dict[str, Any]]:
    prepare_bench_out(out)
    steps = steps or (300 if quick else 2000)
    repeats = repeats or (1 if quick else 3)
    ds = data.load("digits", seed=seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = models.MLP(ds.input_shape, ds.num_classes, hidden=(100,))
    model = BayesianModel(net, "categorical", prior=1.0, num_data=ds.num_train)
    algorithm = get_method("sgld").build(model, lr=0.5)
    times: dict[str, list[float]] = {"bare": [], "memory": [], "run_dir": []}
    finals: dict[str, dict[str, torch.Tensor]] = {}
    warm_up()
    for _ in range(repeats):
        for mode in times:
            start = time.perf_counter()
            finals[mode] = _once(mode, algorithm, ds, steps, seed)
            times[mode].append(time.perf_counter() - start)
    base = statistics.median(times["bare"])
    same = all(torch.equal(finals["bare"][k], finals[m][k]) for m in finals for k in finals[m])
    rows = [{"mode": mode, "seconds": statistics.median(t), "ratio": statistics.median(t) / base,
             "ms_per_step": 1e3 * statistics.median(t) / steps} for mode, t in times.items()]
    write_results(out, "runner", quick, command, "overhead over a bare step loop",
                  f"SGLD on the digits MLP, {steps} steps, median of {repeats}", rows,
                  {"steps": steps, "repeats": repeats, "same_final_state": same},
                  note=f"Bit-identical final state in all three modes: {same}.")
    return rows


def bare_loop(algorithm: Any, batches: Callable[[int], Any], steps: int,
              seed: int) -> dict[str, torch.Tensor]:
    """``steps`` of ``state, info = algorithm.step(state, batches(t))`` and nothing else
    (the floor a Runner is compared with, here and in ``bench efficiency``'s whole-run
    row); returns the final parameters."""
    state = algorithm.init(generator=torch.Generator().manual_seed(seed))
    for t in range(steps):
        state, _ = algorithm.step(state, batches(t))
    return algorithm.params(state)


def _once(mode: str, algorithm: Any, ds: Any, steps: int, seed: int) -> dict[str, torch.Tensor]:
    if mode == "bare":
        batches = Batches(algorithm.problem, ds, 128, fold_in(seed, DATA_SEED_SALT))
        return bare_loop(algorithm, batches, steps, seed)
    if mode == "memory":
        return Runner(algorithm, ds, seed=seed).fit(steps).params
    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner(algorithm, ds, steps=steps, seed=seed, run_dir=tmp, log_every=10,
                        checkpoint_every=max(1, steps // 10))  # the store under tmp/samples
        return runner.fit().params
