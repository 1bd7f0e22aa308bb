"""The ``flow-stability`` suite: score_vi with a flow started far from the posterior, and
what keeps it on course: ``bdlkit bench flow-stability [--quick] --out DIR``.

Target: N((3, −2), diag(0.5², 2²)), started from q₀ = N(0, I) (the flow's q₀ is exactly
that Gaussian): 6 and 1 target stds off, with the wrong scales. Every configuration runs
600 steps of 16 draws on seeds 0, 1, 2 (quick: 300 steps, seeds 0 and 1). Measured on
20 000 draws of the fitted q: the mean error in target stds (the worst coordinate) and
the worst relative error of the marginal stds. A run the runner stops for a NaN is
recorded as ``diverged``.

Configurations (:data:`CONFIGS`): score_vi's constant lr (its default 3e-3, and 1e-2),
the same lrs annealed geometrically by 100× over the run, lr 1e-2 with 64 draws per step,
the proximal term at full weight (K = 3 inner steps per anchor, α = 1, the largest α
allowed), and advi with the same flow as the control.
"""

from __future__ import annotations

import statistics
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from bdlkit.bench.common import prepare_bench_out, write_results
from bdlkit.core.schedules import exponential
from bdlkit.engine.runner import NonFiniteError

DESCRIPTION = "score_vi with a flow far from the posterior: constant or annealed lr, more draws, K > 1"
F64 = torch.float64
MEAN = (3.0, -2.0)
STD = (0.5, 2.0)
DRAWS = 16
#: label -> (method, options); "annealed" lrs are bound to the run length
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "score_vi lr 3e-3 (default)": ("score_vi", {"lr": 3e-3}),
    "score_vi lr 1e-2": ("score_vi", {"lr": 1e-2}),
    "score_vi lr 3e-3 annealed": ("score_vi", {"lr": ("annealed", 3e-3)}),
    "score_vi lr 1e-2 annealed": ("score_vi", {"lr": ("annealed", 1e-2)}),
    "score_vi lr 1e-2, 64 draws": ("score_vi", {"lr": 1e-2, "num_samples": 64}),
    "score_vi lr 3e-3, K=3, alpha 1": ("score_vi", {"lr": 3e-3, "inner_steps": 3,
                                                     "alpha_max": 1.0}),
    "advi lr 1e-2 (control)": ("advi", {"lr": 1e-2}),
    "advi lr 1e-2 annealed (control)": ("advi", {"lr": ("annealed", 1e-2)}),
}


def target() -> Any:
    import bdlkit

    mean, std = torch.tensor(MEAN, dtype=F64), torch.tensor(STD, dtype=F64)
    return bdlkit.Target(lambda x: -0.5 * (((x - mean) / std) ** 2).sum(-1), dim=2,
                         dtype=F64, name="far gaussian")


def run_one(method: str, options: dict[str, Any], steps: int, seed: int) -> dict[str, Any]:
    import bdlkit

    opts = {"num_samples": DRAWS, **options}
    if isinstance(opts["lr"], tuple):
        opts["lr"] = exponential(opts["lr"][1], opts["lr"][1] / 100, steps)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # score_vi's flow warns that it is experimental
            result = bdlkit.infer(target(), method, family="flow", steps=steps, seed=seed,
                                  start="init", init=torch.zeros(2, dtype=F64), init_std=1.0,
                                  **opts)
    except NonFiniteError as err:
        return {"seed": seed, "status": "diverged", "message": str(err).splitlines()[0][:200],
                "seconds": time.perf_counter() - start}
    draws = result.sample(20_000, generator=torch.Generator().manual_seed(seed))
    mean, std = torch.tensor(MEAN, dtype=F64), torch.tensor(STD, dtype=F64)
    return {"seed": seed, "status": "ok", "seconds": time.perf_counter() - start,
            "mean_err_sd": float(((draws.mean(0) - mean).abs() / std).max()),
            "std_rel_err": float((draws.std(0) / std - 1).abs().max())}


def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True, steps: int | None = None) -> list[dict[str, Any]]:
    """Every configuration on every seed; one row per configuration (medians, worst);
    ``steps`` overrides the run length (tests)."""
    out = prepare_bench_out(Path(out))
    seeds = (seed, seed + 1) if quick else (seed, seed + 1, seed + 2)
    steps = steps or (300 if quick else 600)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows, runs, began = [], [], time.perf_counter()
    try:
        for label, (method, options) in CONFIGS.items():
            got = [run_one(method, options, steps, s) for s in seeds]
            runs += [{"config": label, **r} for r in got]
            ok = [r for r in got if r["status"] == "ok"]
            row = {"config": label, "diverged": len(got) - len(ok),
                   "mean_err_sd_median": _median([r["mean_err_sd"] for r in ok]),
                   "mean_err_sd_worst": max((r["mean_err_sd"] for r in ok), default=None),
                   "std_rel_err_median": _median([r["std_rel_err"] for r in ok]),
                   "per_seed": " / ".join(f"{r['mean_err_sd']:.2f}" if r["status"] == "ok"
                                          else "NaN" for r in got)}
            rows.append(row)
            if echo:
                print(f"  {label:34s} {row['per_seed']}", flush=True)
    finally:
        torch.set_num_threads(threads)
    setup = (f"N({MEAN}, diag{tuple(s * s for s in STD)}) from q₀ = N(0, I), flow defaults, "
             f"{DRAWS} draws per step, {steps} steps, seeds {list(seeds)}; `per_seed`: the "
             f"mean error in target stds of each seed; wall time "
             f"{time.perf_counter() - began:.0f} s")
    write_results(out, "flow-stability", quick, command,
                  "score_vi with a flow far from the posterior", setup, rows,
                  {"runs": runs, "steps": steps, "seeds": list(seeds)}, floatfmt=".3g")
    return rows


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


__all__ = ["CONFIGS", "DESCRIPTION", "run", "run_one", "target"]
