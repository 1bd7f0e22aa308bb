"""The ``digits`` suite (also ``bdlkit demo``): every method on an MLP, side by side.

Data: scikit-learn's embedded 8x8 digits (no data root needed), 1 257 training and
540 test images. Model: MLP 64-100-10, isotropic Gaussian prior (scale 1), full
temperature. Each method runs ``steps`` steps (300 with ``quick``) with batch 128
through the same runner as ``bdlkit fit``, and is evaluated by its BMA predictive on
the test split: accuracy, NLL, top-label ECE (15 bins), Brier, and wall time
(training, and separately evaluation) with the training-time ratio to MAP.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bdlkit import algorithms
from bdlkit.bench.common import machine_info, prepare_bench_out, warm_up
from bdlkit.core.serialization import atomic_write_bytes, save_json
from bdlkit.runs import figures as report
from bdlkit.runs.config import RunConfig

DESCRIPTION = "every method on an MLP on scikit-learn digits (accuracy, NLL, ECE, wall time)"

#: Step sizes tuned once for this problem; methods not listed use their defaults.
HYPER: dict[str, dict[str, Any]] = {
    "map": {"lr": 1e-3}, "sgld": {"lr": 0.05},
    # GSM/BaM: the diagonal variants (full covariance is for Targets), started like ADVI
    "gsm": {"covariance": "diag", "init_std": 1e-3},
    # lam_scale 1: λ_t = B·d/(t + 1), tuned here; the network default B/(4(t + 1)) gives
    # accuracy 0.72 (NLL 1.84) at B = 4, σ₀ = 1e-3 and 1 500 steps
    "bam": {"covariance": "diag", "init_std": 1e-3, "num_samples": 4, "lam_scale": 1.0},
    "sghmc": {"lr": 0.005, "alpha": 0.1},
    # full-batch reference samplers: fewer, more expensive steps (FRACTION below); the
    # first half of their steps adapts the step size (adapt_steps / warmup, set in run)
    "hmc": {"step_size": 0.005, "num_leapfrog": 20},
    "nuts": {"max_tree_depth": 6},
}
#: Network options of a method (the rest run the MLP 64-100-10 as it is).
MODEL_KWARGS: dict[str, dict[str, Any]] = {"mc_dropout": {"dropout": 0.05}}
#: The hyperparameter holding a full-batch sampler's adaptation length.
WARMUP = {"hmc": "adapt_steps", "nuts": "warmup"}
#: Full-batch samplers run this fraction of the steps (each step is 20-60 gradients).
FRACTION: dict[str, float] = {"hmc": 0.2, "nuts": 0.05}
#: Methods left out of the demo, with the reason printed in the report.
SKIP: dict[str, str] = {} if importlib.util.find_spec("pyro") else {
    "nuts": "Pyro is not installed (pip install bdlkit[reference])"}
#: Notes printed under the table.
NOTES: dict[str, str] = {
    "fisher_vi": "reparameterised Fisher-divergence VI needs Hessian-vector products through "
                 "the network (about 2-5x an SGD step) and its minibatch gradient is biased; "
                 "the SSM-prox paper reports it failing on networks, as it does here",
    "gsm": "diagonal GSM matches each minibatch score exactly at one draw; GSM was designed "
           "for exact scores, and with minibatch noise on a network its variances overshoot "
           "(high NLL)",
    "bam": "diagonal BaM (4 draws per step, lambda_t = B d/(t+1), not the network default "
           "B/(4(t+1))) with minibatch scores: designed for exact scores; on a network it "
           "is a heuristic and its NLL shows it",
    "hmc": "full-batch HMC with 20 leapfrog steps per iteration and a short run: far from a "
           "converged reference (`bdlkit reference hmc` builds one)",
    "nuts": "Pyro NUTS with tree depth <= 6 and half its transitions as warm-up: a smoke run "
            "only",
    "l2e": "the shipped meta-parameters (meta-trained on other tasks, never on digits) with "
           "their constants: grad_scale 50000 and code-form noise, i.e. a cold posterior "
           "(docs/sgmcmc.md)",
    "meta_sgmcmc": "the shipped Q_f/D_f networks (meta-trained by bdlkit on other tasks, never "
                   "on digits) at their constants, step sqrt(0.007/N) (docs/meta_sgmcmc.md)",
    "ensemble": "5 members, each trained for the full number of steps (5x the cost of MAP)",
    "mc_dropout": "the MLP with dropout 0.05 before each Linear layer (its default lr 1e-3, "
                  "MAP's), a mask per predictive draw",
}
COLUMNS = ["method", "kind", "steps", "accuracy", "nll", "ece", "brier", "train_s", "train_ratio",
           "eval_s"]


def runnable() -> list[str]:
    """The registered methods the suite runs (all but :data:`SKIP`), in name order."""
    return sorted(m for m in algorithms.METHODS if m not in SKIP)


def run(out: Path, *, quick: bool = False, seed: int = 0, steps: int | None = None,
        command: str | None = None, echo: bool = True,
        methods: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Fit every registered method (or just ``methods``) into ``out/runs/<method>``; write
    the comparison."""
    from bdlkit.runs import directory as run_module

    steps = steps or (300 if quick else 1500)
    chosen = runnable() if methods is None else list(methods)
    width = max(map(len, chosen), default=0)
    prepare_bench_out(out)
    warm_up()
    rows: list[dict[str, Any]] = []
    for method in chosen:
        method_steps = max(2, round(steps * FRACTION.get(method, 1.0)))
        hyper = dict(HYPER.get(method, {}))
        if method in WARMUP:
            hyper[WARMUP[method]] = method_steps // 2
        cfg = RunConfig(method=method, model="mlp", data="digits", steps=method_steps, seed=seed,
                        model_kwargs={"hidden": [100], **MODEL_KWARGS.get(method, {})},
                        hyper=hyper)
        output = run_module.fit(cfg, out / "runs" / method, overwrite=True)
        values = output.metrics
        rows.append({"method": method, "kind": algorithms.kind_of(method), "steps": method_steps,
                     **{k: values[k] for k in ("accuracy", "nll", "ece", "brier")},
                     "train_s": output.train_seconds, "eval_s": output.eval_seconds})
        if echo:
            print(f"  {method:<{width}} accuracy {values['accuracy']:.4f}  NLL "
                  f"{values['nll']:.4f}  ECE {values['ece']:.4f}  train "
                  f"{output.train_seconds:.1f} s",
                  file=sys.stderr)
    base = next((r["train_s"] for r in rows if r["method"] == "map"), rows[0]["train_s"])
    for r in rows:
        r["train_ratio"] = r["train_s"] / base
    _write(out, rows, steps, seed, quick, command)
    return rows


def _write(out: Path, rows: list[dict[str, Any]], steps: int, seed: int, quick: bool,
           command: str | None) -> None:
    command = command or f"bdlkit bench digits{' --quick' if quick else ''} --out {out}"
    machine = machine_info()
    save_json(out / "results.json", {"suite": "digits", "command": command, "steps": steps,
                                     "seed": seed, "machine": machine, "rows": rows})
    table = report.markdown_table(rows, COLUMNS)
    text = [
        "# digits: every method on an MLP (64-100-10)\n",
        f"Command: `{command}`  ",
        f"Steps per method: {steps} (full-batch hmc and nuts: the `steps` column); seed "
        f"{seed}; machine: {json.dumps(machine)}\n",
        table, "",
        "`train_s`: the runner's wall time (steps, sample store, checkpoints); `train_ratio`: "
        "relative to MAP; `eval_s`: BMA predictive over the kept draws, metrics and plots. "
        "Metrics are of the BMA predictive on the 540 test images (ECE: top-label, 15 bins).",
        "",
        *(f"Not run: `{m}`: {why}." for m, why in SKIP.items()),
        *(f"`{m}`: {note}." for m, note in NOTES.items() if m in {r["method"] for r in rows}),
        "",
        "Reliability diagrams: `runs/<method>/reliability.png` under the output folder "
        "(written by the command, not committed), for " + ", ".join(
            f"`{r['method']}`" for r in rows) + ".",
        "",
    ]
    body = "\n".join(text) + "\n"
    atomic_write_bytes(out / "results.md", body.encode())
    atomic_write_bytes(out / "report.md", body.encode())
