"""The ``bnn-lowdata`` suite: BNNs on small MNIST training sets, score-based VI against the rest.

The low-data MNIST experiment of the score-based VI paper (M. Kim, arXiv 2602.05873):
does ``score_vi`` with its closed-form proximal solver (``score_vi_prox``) reach ADVI's test
error with better calibration (lower ECE and NLL)? The suite measures it next to the
controls that tell a real posterior from a point estimate.

Data: :func:`bdlkit.data.images.load_mnist` with ``train_size`` n in {500, 1000, 2000} and
split seed = the run's seed; the test set is the rest of the 10 000 shipped images (full
runs; ``--quick`` caps it at 2 000). OOD: the first :data:`OOD_POINTS` (2 000) notMNIST
letters (:func:`~bdlkit.data.images.load_notmnist`; the file is shuffled, so they are
class-balanced), AUROC of the predictive entropy (``metrics.ood_metrics``, as in the ``l2e``
suite). Models: MLP 784-100-10 and the L2E-family CNN ``ConvNet(width=4, depth=1)`` (3x3 conv
with 4 channels, 2x2 max-pool, 784-20-10 head: the cheapest member of the family; measured
with one thread its step costs 1.5-2.5x an MLP step, width 8 or depth 2 about twice that
again, which the budget below cannot pay), prior N(0, 1), T = 1, batch 128, the network's
initialisation seeded by the run's seed. Every method runs the same number of steps
(:data:`STEPS`: 600 for the MLP, 400 for the CNN; quick: 300) and is scored by its BMA predictive over
:data:`EVAL_DRAWS` draws (VI: 16 draws of q; sghmc/l2e: 16 draws thinned from the second
half; csghmc: 4 per cycle; ensemble: its 5 members; MAP: the point).

Methods (:data:`METHODS`, label -> (method, fixed hyper)): ``map``; ``advi``, ``advi_stl``
(sticking the landing), ``score_vi_grad`` (score_vi's gradient solver, Adam) and
``score_vi_prox`` (the closed-form solver), all four from the same q₀ (σ₀ =
:data:`INIT_STD`); ``sghmc`` (lr 0.005, α 0.1, the ``digits``/``l2e`` suites'), ``csghmc`` (4
cycles, its default lr 0.5 on the MLP and 0.05 on the CNN, where 0.5 diverges as in the
``l2e`` suite's CIFAR-10 task), ``l2e`` (the shipped meta-parameters and their constants) and
``ensemble`` (5 members, lr 1e-3); ``advi_flow`` and ``score_vi_flow``, the two with a
neural spline flow on the last layer (784-100-**10**: 1 010 weights) and a diagonal
Gaussian on the rest (``family="flow"``, its defaults; σ of the flow rows: Monte Carlo
marginal stds). Samplers and the ensemble keep these fixed hyperparameters (no tuning).

Tuning, never on the test split: for each (model, n), 20 % of the first seed's training
images are held out as validation; every grid point of a tuned row runs on the other 80 %
(same steps) and the point with the lowest validation NLL is kept (recorded as ``chosen``
in the rows, every grid run in ``results.json``). Grids of the same size: ``map``,
``advi``, ``advi_stl``, ``score_vi_grad``, ``advi_flow``, ``score_vi_flow`` over
:data:`LR_GRID`; ``score_vi_prox`` over its
damping :data:`OMEGA_GRID`. The chosen point then runs on :data:`SEEDS` seeds (seed s:
network init, data order, algorithm noise and the split seed).

Per row, mean ± std over seeds: test error, NLL, top-label ECE (15 bins), Brier, OOD AUROC,
training seconds, and for the VI rows the 10/50/90 % quantiles of σ over all weights
(:func:`bdlkit.families.diag_gaussian.sigma_summary`) and σ moved = median σ / σ₀. The
claims and their verdicts: :mod:`bdlkit.bench.bnn_lowdata_report`. A failing run keeps its
record with the error in ``status``.

``--quick``: n = 1000, MLP only, one seed, no tuning (the middle grid point), 300 steps.

Budget, measured with one torch thread on the 2-core development machine: at 600 steps and
all 10 000 OOD images one (model, n) cell (15 tuning runs, then 9 methods × 3 seeds) took
542 s for the MLP and 1 065 s for the CNN. Evaluating the conv net over test + OOD images
× draws dominates, hence 2 000 OOD images and 400 CNN steps. The wall time of the committed
run is in its ``results.json``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bdlkit import infer, metrics, models
from bdlkit.bench import bnn_lowdata_report as report
from bdlkit.bench.common import prepare_bench_out, warm_up, write_results
from bdlkit.data.images import load_mnist, load_notmnist
from bdlkit.families.diag_gaussian import DiagGaussianParams, sigma_summary
from bdlkit.problems import BayesianModel

DESCRIPTION = ("BNNs on 500-2000 MNIST images (MLP, CNN): score_vi's closed-form prox against "
               "ADVI, MAP, SG-MCMC, L2E and ensembles (error, NLL, ECE, OOD, σ)")
INIT_STD = 1e-2  # σ₀ of every VI row (advi's and score_vi's default)
LR_GRID = (3e-3, 1e-2, 3e-2)
OMEGA_GRID = (0.01, 0.03, 0.1)
EVAL_DRAWS = 16
VAL_FRACTION = 0.2
SEEDS = 3
SIZES = (500, 1000, 2000)
STEPS = {"mlp": 600, "cnn": 400}
OOD_POINTS = 2000  # the first notMNIST images (a shuffled, class-balanced prefix)
#: label -> (registered method, fixed hyperparameters).
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "map": ("map", {}),
    "advi": ("advi", {}),
    "advi_stl": ("advi", {"stl": True}),
    "score_vi_grad": ("score_vi", {"solver": "gradient"}),
    "score_vi_prox": ("score_vi", {"solver": "closed_form"}),
    "sghmc": ("sghmc", {"lr": 0.005, "alpha": 0.1}),
    "csghmc": ("csghmc", {"cycles": 4, "samples_per_cycle": EVAL_DRAWS // 4}),
    "l2e": ("l2e", {}),
    "ensemble": ("ensemble", {"members": 5, "lr": 1e-3}),
    "advi_flow": ("advi", {"family": "flow"}),
    "score_vi_flow": ("score_vi", {"family": "flow"}),
}
VI_ROWS = ("advi", "advi_stl", "score_vi_grad", "score_vi_prox", "advi_flow", "score_vi_flow")
_LR = tuple({"lr": lr} for lr in LR_GRID)
#: Tuned rows and their grids (the others run their fixed hyperparameters only).
GRIDS: dict[str, tuple[dict[str, Any], ...]] = {
    "map": _LR, "advi": _LR, "advi_stl": _LR, "score_vi_grad": _LR,
    "score_vi_prox": tuple({"omega": w} for w in OMEGA_GRID),
    "advi_flow": _LR, "score_vi_flow": _LR,
}
#: Per-model overrides of the fixed hyperparameters.
MODEL_HYPER: dict[str, dict[str, dict[str, Any]]] = {"cnn": {"csghmc": {"lr": 0.05}}}
THINNED = ("sghmc", "l2e")  # samplers whose draws are thinned to EVAL_DRAWS
MODEL_TEXT = {"mlp": "MLP 784-100-10", "cnn": "ConvNet(width=4, depth=1)"}


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one run of the suite covers (:func:`make_plan`; tests pass a tiny one)."""

    models: tuple[str, ...]
    sizes: tuple[int, ...]
    seeds: int
    steps: dict[str, int]
    tune: bool
    methods: tuple[str, ...] = tuple(METHODS)
    test_size: int | None = None  # None: the rest of the 10k images
    ood_points: int | None = None  # first notMNIST images (None: all)


def make_plan(quick: bool) -> Plan:
    """The full plan, or ``--quick``'s (module docstring)."""
    if quick:
        return Plan(("mlp",), (1000,), 1, {"mlp": 300}, tune=False, test_size=2000,
                    ood_points=OOD_POINTS)
    return Plan(("mlp", "cnn"), SIZES, SEEDS, dict(STEPS), tune=True, ood_points=OOD_POINTS)


def make_net(model: str, input_shape: tuple[int, ...], seed: int) -> torch.nn.Module:
    """The network ``model`` with its initialisation seeded by ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if model == "mlp":
            return models.MLP(input_shape, 10, hidden=(100,))
        if model == "cnn":
            return models.ConvNet(input_shape, 10, width=4, depth=1)
    raise ValueError(f"unknown model {model!r}; valid: {list(MODEL_TEXT)}")


def hyper_for(model: str, label: str, point: dict[str, Any]) -> dict[str, Any]:
    """The full hyperparameters of ``label`` at grid ``point`` (σ₀ for the VI rows)."""
    fixed = METHODS[label][1]
    hyper = {**fixed, **MODEL_HYPER.get(model, {}).get(label, {}), **point}
    if label in VI_ROWS:
        hyper["init_std"] = INIT_STD
    return hyper


# ------------------------------------------------------------------------ runs
def fit_and_score(model: str, label: str, point: dict[str, Any], train: tuple[Tensor, Tensor],
                  evals: dict[str, Tensor | None], steps: int, seed: int) -> dict[str, Any]:
    """One run of ``label`` on ``train`` scored on ``evals`` (``x``, ``y``, optional
    ``ood``); a failure becomes the record's ``status``."""
    method, _ = METHODS[label]
    hyper = hyper_for(model, label, point)
    record: dict[str, Any] = {"label": label, "method": method, "hyper": hyper, "status": "ok"}
    try:
        x, y = train
        problem = BayesianModel(make_net(model, tuple(x.shape[1:]), seed), "categorical",
                                prior=1.0, num_data=len(x))
        keep = {"thin": max(1, (steps - steps // 2) // EVAL_DRAWS),
                "max_samples": EVAL_DRAWS} if label in THINNED else {}
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:  # kept in the record, not echoed
            warnings.simplefilter("always")
            result = infer(problem, method, data=(x, y), steps=steps, seed=seed, **keep,
                           **hyper)
        record["train_s"] = time.perf_counter() - start
        if caught:
            record["warnings"] = sorted({f"{w.category.__name__}: {str(w.message)[:200]}"
                                         for w in caught})
        start = time.perf_counter()
        record.update(score(result, evals, label in VI_ROWS))
        record["eval_s"] = time.perf_counter() - start
    except Exception as err:  # noqa: BLE001 - a failing method keeps its record
        record["status"] = f"error: {type(err).__name__}: {str(err)[:300]}"
    return record


def score(result: Any, evals: dict[str, Tensor | None], vi: bool) -> dict[str, float]:
    """Error, NLL, ECE and Brier of the BMA on ``evals["x"]``, OOD AUROC against
    ``evals["ood"]`` when given, and σ's quantiles for a VI result."""
    pred = result.predictive(evals["x"], num_samples=EVAL_DRAWS)
    values = metrics.classification_metrics(pred.probs, evals["y"], pred.log_probs)
    out = {"error": 1.0 - values["accuracy"], **{k: values[k] for k in ("nll", "ece", "brier")},
           "draws": pred.num_samples}
    if evals.get("ood") is not None:
        ood = result.predictive(evals["ood"], num_samples=EVAL_DRAWS)
        out["ood_auroc"] = metrics.ood_metrics(pred, ood)["ood_auroc"]
    if vi:
        out.update(sigma_quantiles(result))
    return out


def sigma_quantiles(result: Any) -> dict[str, float]:
    """σ's 10/50/90 % quantiles over all weights: the diagonal Gaussian's own σ, a flow's
    marginal stds by Monte Carlo (4 096 draws), and the median over σ₀."""
    lam = result.state.lam
    if isinstance(lam, DiagGaussianParams):
        rows = sigma_summary(lam)
        sig = next(r for r in rows if r["tensor"] == "all") if len(rows) > 1 else rows[0]
        q10, median, q90 = sig["q10"], sig["median"], sig["q90"]
    else:
        std = result.algorithm.approximation(result.state).std
        values = torch.cat([v.reshape(-1) for v in std.values()]).double()
        q10, median, q90 = torch.quantile(values, torch.tensor([0.1, 0.5, 0.9],
                                                               dtype=torch.float64)).tolist()
    return {"sigma_q10": q10, "sigma_median": median, "sigma_q90": q90,
            "sigma_moved": median / INIT_STD}


def select(plan: Plan, model: str, n: int, seed: int,
           echo: bool) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """The chosen grid point of every tuned row for (``model``, ``n``) and the tuning
    records: each point trained on 80 % of seed ``seed``'s training images and ranked by
    NLL on the other 20 %. Without tuning: the middle grid point."""
    tuned = [label for label in plan.methods if label in GRIDS]
    if not plan.tune:
        return {label: GRIDS[label][len(GRIDS[label]) // 2] for label in tuned}, []
    ds = load_mnist(train_size=n, test_size=1, seed=seed)
    cut = n - max(1, round(VAL_FRACTION * n))
    train = (ds.x_train[:cut], ds.y_train[:cut])
    val: dict[str, Tensor | None] = {"x": ds.x_train[cut:], "y": ds.y_train[cut:]}
    chosen, records = {}, []
    for label in tuned:
        grid = []
        for point in GRIDS[label]:
            rec = {"model": model, "n": n, "phase": "tune", "seed": seed, "point": point,
                   **fit_and_score(model, label, point, train, val, plan.steps[model], seed)}
            records.append(rec)
            grid.append(rec)
            if echo:
                print("  " + report.echo_line(rec), file=sys.stderr)
        ok = [r for r in grid if r["status"] == "ok"]
        best = min(ok, key=lambda r: r["nll"]) if ok else grid[len(grid) // 2]
        chosen[label] = best["point"]
    return chosen, records


def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True, plan: Plan | None = None) -> list[dict[str, Any]]:
    """Tune, run and score every (model, n, method); write the tables and the claims."""
    start = time.perf_counter()
    plan = plan or make_plan(quick)
    prepare_bench_out(out)
    warm_up()
    ood_x = load_notmnist().x_test[: plan.ood_points]
    tuning: list[dict[str, Any]] = []
    final: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for model in plan.models:
        for n in plan.sizes:
            chosen, records = select(plan, model, n, seed, echo)
            tuning += records
            cell = []
            for s in range(seed, seed + plan.seeds):
                ds = load_mnist(train_size=n, test_size=plan.test_size, seed=s)
                evals = {"x": ds.x_test, "y": ds.y_test, "ood": ood_x}
                for label in plan.methods:
                    point = chosen.get(label, {})
                    rec = {"model": model, "n": n, "phase": "final", "seed": s, "point": point,
                           **fit_and_score(model, label, point, ds.train(), evals,
                                           plan.steps[model], s)}
                    cell.append(rec)
                    if echo:
                        print("  " + report.echo_line(rec), file=sys.stderr)
            final += cell
            rows += [report.summarize([r for r in cell if r["label"] == label],
                                      chosen.get(label, "fixed")) for label in plan.methods]
    claims = report.compute_claims(final, rows)
    settings = {"plan": dataclasses.asdict(plan), "seed": seed, "init_std": INIT_STD,
                "lr_grid": LR_GRID, "omega_grid": OMEGA_GRID, "eval_draws": EVAL_DRAWS,
                "val_fraction": VAL_FRACTION, "methods": METHODS, "model_hyper": MODEL_HYPER,
                "models": {m: MODEL_TEXT[m] for m in plan.models}, "batch_size": 128,
                "prior_scale": 1.0, "wall_s": time.perf_counter() - start}
    setup = (f"{', '.join(MODEL_TEXT[m] for m in plan.models)} on MNIST with n in "
             f"{list(plan.sizes)} training images, prior N(0, 1), batch 128, steps "
             f"{plan.steps}, {plan.seeds} seed(s), "
             + ("tuned on a 20 % validation split of the first seed"
                if plan.tune else "no tuning (middle grid point)")
             + f", OOD notMNIST ({plan.ood_points or 'all'} images); wall time "
             f"{settings['wall_s']:.0f} s")
    note = "\n\n".join((*report.NOTES, report.claims_markdown(claims, INIT_STD)))
    write_results(out, "bnn-lowdata", quick, command, "BNNs on small MNIST training sets",
                  setup, rows, {"claims": claims, "settings": settings, "runs": final,
                                "tuning": tuning},
                  note=note, table=report.table(rows))
    return rows
