"""The ``hmc-agreement`` suite: SG-MCMC (with L2E), deep ensembles and MAP against HMC.

Task: an MLP 64-50-10 on scikit-learn digits (1 257 training, 540 test images), prior
N(0, 1), T = 1. The reference is ``bdlkit reference hmc`` with its defaults (4 chains of
400 full-batch HMC iterations, trajectory length π/2, the first half burn-in), built once
into ``DIR/runs/reference`` and reused when the suite runs again. Every method then runs
1 000 steps (batch 128) for 3 seeds and is scored on the test set: BMA accuracy, NLL,
top-label ECE, and agreement and total variation against the HMC predictive
(``docs/metrics.md``), mean ± std over seeds. ``--quick``: a 10-unit MLP, 2 chains of
120 iterations, 300 steps and one seed, as a smoke test of the whole pipeline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bdlkit import metrics
from bdlkit.bench.common import cached_reference, mean_std, warm_up, write_results
from bdlkit.runs import directory as run_module
from bdlkit.runs import reference
from bdlkit.runs.config import RunConfig
from bdlkit.runs.out_folder import prepare_out

DESCRIPTION = ("SG-MCMC, deep ensembles and MAP against an HMC reference on digits "
               "(agreement, total variation, accuracy, NLL, ECE)")
#: Step sizes: the digits suite's (sgld, sghmc, map) and the methods' defaults otherwise.
METHODS: dict[str, dict[str, Any]] = {
    "map": {"lr": 1e-3},
    "ensemble": {"lr": 1e-3},
    "sgld": {"lr": 0.05},
    "psgld": {},
    "sghmc": {"lr": 0.005, "alpha": 0.1},
    "csghmc": {},
    "csgld": {},
    "l2e": {},  # the shipped meta-parameters and their constants
}
VALUES = ("accuracy", "nll", "ece", "agreement", "total_variation")


def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True) -> list[dict[str, Any]]:
    """Build (or reuse) the reference, fit every method, score it against the reference."""
    hidden = [10] if quick else [50]
    steps, seeds = (300, 1) if quick else (1000, 3)
    runs = out / "runs"
    # refresh the results but keep runs/: the reference is the expensive part and
    # reference.build reuses it (or resumes it) when the options match
    prepare_out(out, overwrite=True, marker=".bdlkit-bench",
                entries=("results.json", "results.md", "report.md", "plots"))
    warm_up()
    base = {"model": "mlp", "data": "digits", "model_kwargs": {"hidden": hidden}}
    ref_values = {"method": "hmc", "seed": seed, **base}
    if quick:
        ref_values["steps"] = 120
    chains = 2 if quick else 4
    ref, ref_cfg, reused, ref_seconds = cached_reference(ref_values, runs / "reference", chains)
    rows = [_reference_row(ref, ref_cfg)]
    for method, hyper in METHODS.items():
        per_seed = []
        for s in range(seeds):
            cfg = RunConfig(method=method, steps=steps, seed=seed + s, hyper=dict(hyper),
                            **base)
            run_dir = runs / f"{method}-seed{seed + s}"
            output = run_module.fit(cfg, run_dir, overwrite=True)
            values = run_module.reevaluate(run_dir, reference=runs / "reference")
            per_seed.append({**{k: values[k] for k in VALUES}, "train_s": output.train_seconds})
        rows.append(_summary(method, per_seed))
        if echo:
            r = rows[-1]
            print(f"  {method:<9} agreement {r['agreement']:.4f}  TV {r['total_variation']:.4f}"
                  f"  accuracy {r['accuracy']:.4f}  NLL {r['nll']:.4f}")
    conv = ref.manifest["convergence"]
    setup = (f"MLP 64-{hidden[0]}-10 on digits, prior N(0, 1), T = 1; reference: "
             f"{ref.manifest['chains']} HMC chains x {ref.manifest['draws_per_chain']} draws "
             f"(`{ref_cfg.hyper}`, {ref_cfg.steps} iterations), split R-hat of the test "
             f"predictive median {conv['rhat_split']['median']:.4f}, max "
             f"{conv['rhat_split']['max']:.4f}; chains of "
             f"{max(ref.manifest['chain_seconds']):.0f} s at most, "
             f"{sum(ref.manifest['chain_seconds']):.0f} s in total "
             f"({'reused from an earlier run' if reused else f'built in {ref_seconds:.0f} s'}"
             "); each method: "
             f"{steps} steps, batch 128, {seeds} seed(s), mean (std over seeds)")
    note = ("agreement = fraction of test points whose top class matches HMC's; total_variation "
            "= mean of 1/2 sum_c |p - p_HMC| (lower is better). The `hmc` row is the reference "
            "itself; its `train_s` is the sum over its chains (run in parallel worker "
            "processes), the "
            "others' the runner's wall time per seed.")
    write_results(out, "hmc-agreement", quick, command, "agreement with an HMC reference",
                  setup, rows, {"steps": steps, "seeds": seeds, "reference": ref.manifest},
                  note, table=[_display(r) for r in rows])
    return rows


def _display(row: dict[str, Any]) -> dict[str, str]:
    """``mean ± std`` cells for the Markdown table."""
    out = {"method": row["method"]}
    for key in (*VALUES, "train_s"):
        std = row.get(f"{key}_std")
        digits = 1 if key == "train_s" else 4
        out[key] = f"{row[key]:.{digits}f}" + (f" ± {std:.4f}" if std is not None else "")
    return out


def _reference_row(ref: reference.ReferencePredictive, cfg: RunConfig) -> dict[str, Any]:
    ds = run_module.load_dataset(cfg)
    values = metrics.classification_metrics(ref.probs, ds.y_test)
    return {"method": "hmc", **{k: float(values[k]) for k in ("accuracy", "nll", "ece")},
            "agreement": 1.0, "total_variation": 0.0,
            "train_s": float(sum(ref.manifest["chain_seconds"]))}


def _summary(method: str, per_seed: list[dict[str, float]]) -> dict[str, Any]:
    return {"method": method, **mean_std(per_seed, (*VALUES, "train_s"), no_std=("train_s",))}
