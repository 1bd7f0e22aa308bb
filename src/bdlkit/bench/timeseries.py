"""The ``timeseries`` suite: Bayesian Koopa forecasting, score-based VI against the rest.

The score-based VI paper's time-series experiments (M. Kim, arXiv 2602.05873) with the
Koopa forecaster (:class:`bdlkit.models.Koopa`, the official scripts' sizes): does
``score_vi`` beat ELBO-VI (``advi``) and the non-Bayesian Koopa in MSE, MAE and NLL, and does
a flow family improve on ADVI? Measured next to MAP and an SG-MCMC sampler.

Data (:func:`bdlkit.data.load_forecasting`, all channels, ``features="M"``): the official
borders, StandardScaler on the training rows, look-back L = 2H, metrics in scaled units
(``docs/protocols.md``, ``docs/koopa_derivations.md``). Tasks (:data:`TASKS`): ETTh2 H = 48 and 96, Exchange H = 48, ILI H = 24.

Rows (:data:`ROWS`):

* ``koopa``: the deterministic Koopa of the papers (:mod:`bdlkit.bench.forecast_baseline`:
  Adam 1e-3, MSE, ≤ 10 epochs, early stopping on the validation MSE, dropout 0.05); its NLL
  and CRPS use one Gaussian per channel with σ_c² = the validation MSE of channel c (the
  floor for a point model, ``docs/koopa_derivations.md`` §2);
* ``map``, ``advi``, ``score_vi`` (its default, the gradient solver: ADVI's iterates, kept as
  the control it is), ``score_vi_prox`` (the gradient solver with K = 4 inner steps per
  anchor and natural preconditioning, where the proximal term acts), ``advi_flow`` and
  ``score_vi_flow`` (one neural spline coupling on the last block's Koopman operator, a
  diagonal Gaussian on the rest: :data:`FLOW`; on ETTh2 H = 96 only, :data:`ROW_TASKS`) and
  ``sghmc`` (8 draws thinned from the second half). All share the problem: prior N(0, 1)
  on every weight and on the per-channel log σ of the Gaussian likelihood (σ starts at 1),
  N = the training windows (overlapping windows: a composite likelihood, T = 1), batch 32,
  :data:`STEPS` steps, the network initialised by the seed; VI starts at σ₀ = 1e-2 around it.

No tuning: every Adam-based row runs at lr 1e-3 (the Koopa protocol's), sghmc at 1e-4
(:data:`POINTS`): the same single point for every VI row. A first run tuned a two-point grid
(1e-3, 3e-3) on ETTh2 H = 96's validation NLL and carried the choice (3e-3 for every Adam
row) to the other tasks; on ETTh2 H = 48 it diverged (MAP test MSE 1.93, advi 20.7, Koopa
0.238): a learning rate does not carry over between Koopa's sizes, and per-task tuning did
not fit the budget. The learned noise starts at each channel's persistence error
(:func:`bdlkit.data.timeseries.persistence_noise`, training windows), so that lr 1e-3 does
not leave σ far above its optimum after 600 steps. ``--quick`` runs ETTh2 H = 96 and ILI
H = 24 with one seed and :data:`QUICK_STEPS` steps.

Predictive: :data:`EVAL_DRAWS` draws; the BMA mixture's MSE/MAE of its mean, NLL per element
(the mixture's and the moment-matched Gaussian's), CRPS, coverage and width of the central
50/90 % intervals (:mod:`bdlkit.metrics.forecasting`), training seconds, the learned noise σ
and for the VI rows the median σ over σ₀ (a σ that never moved would fake a Bayesian row).
"""

from __future__ import annotations

import dataclasses
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from bdlkit import infer
from bdlkit.bench import timeseries_report as report
from bdlkit.bench.common import prepare_bench_out, warm_up, write_results
from bdlkit.bench.forecast_baseline import train_forecaster
from bdlkit.data import load_forecasting
from bdlkit.evaluation.forecast import forecast_mixture, forecast_values
from bdlkit.metrics.forecasting import GaussianMixture
from bdlkit.models.koopa import koopa_for_data
from bdlkit.problems import BayesianModel
from bdlkit.runs.directory import forecast_likelihood

DESCRIPTION = ("Bayesian Koopa forecasting (ETTh2, Exchange, ILI): score_vi against ADVI, MAP, "
               "the deterministic Koopa, flows and SGHMC (MSE, MAE, NLL, CRPS, coverage)")
TASKS: dict[str, tuple[str, int]] = {
    "etth2-48": ("ett/ETTh2", 48), "etth2-96": ("ett/ETTh2", 96),
    "exchange-48": ("exchange_rate", 48), "ili-24": ("ili", 24),
}
QUICK_TASKS = ("etth2-96", "ili-24")
BATCH = 32
STEPS = 600  # every Bayesian row, every task (2.3 epochs of ETTh2, 33 of ILI)
QUICK_STEPS = 300
EVAL_DRAWS = 8
INIT_STD = 1e-2
SEEDS = 3
FLOW_ON = "last_block"
#: One spline coupling of width 16 on the last block's operator (D² = 4 096 values on
#: ETTh2): 0.23-0.26 s a step against 0.79-0.88 s for the default three of width 32, and a
#: flow on D = 128's 16 384 values ran out of 24 GB (docs/koopa_derivations.md §3).
FLOW = {"family": "flow", "flow_on": FLOW_ON, "flow_transforms": 1, "flow_hidden": 16}
#: Rows run on some tasks only (the flow fits on D = 64's operator, and costs 15x a step).
ROW_TASKS: dict[str, tuple[str, ...]] = {"advi_flow": ("etth2-96",),
                                         "score_vi_flow": ("etth2-96",)}
#: label -> (registered method, fixed hyperparameters); "koopa" is the deterministic row.
ROWS: dict[str, tuple[str, dict[str, Any]]] = {
    "koopa": ("koopa", {}),
    "map": ("map", {}),
    "advi": ("advi", {}),
    "score_vi": ("score_vi", {}),
    "score_vi_prox": ("score_vi", {"inner_steps": 4, "precondition": "natural",
                                   "num_samples": 2, "antithetic": True}),
    "advi_flow": ("advi", FLOW),
    "score_vi_flow": ("score_vi", FLOW),
    "sghmc": ("sghmc", {}),
}
VI_ROWS = ("advi", "score_vi", "score_vi_prox", "advi_flow", "score_vi_flow")
#: Every row's one hyperparameter point, fixed a priori (no tuning; module docstring).
POINTS: dict[str, dict[str, Any]] = {
    **{label: {"lr": 1e-3} for label in ("map", "advi", "score_vi", "score_vi_prox",
                                         "advi_flow", "score_vi_flow")},
    "sghmc": {"lr": 1e-4},
}


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one run of the suite covers (tests pass a tiny one)."""

    tasks: tuple[str, ...]
    seeds: int
    rows: tuple[str, ...] = tuple(ROWS)
    steps: int = STEPS
    max_windows: int | None = None  # cap on train/val/test windows (tests only)


def make_plan(quick: bool) -> Plan:
    if quick:
        return Plan(QUICK_TASKS, 1, steps=QUICK_STEPS)
    return Plan(tuple(TASKS), SEEDS)


def load_task(task: str, max_windows: int | None = None) -> Any:
    name, horizon = TASKS[task]
    ds = load_forecasting(name, horizon=horizon, features="M")
    if max_windows is None:
        return ds
    cut = {k: getattr(ds, k)[:max_windows] for k in
           ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test")}
    return dataclasses.replace(ds, **cut)


def hyper_for(label: str) -> dict[str, Any]:
    """The row's fixed hyperparameters, its :data:`POINTS` point and σ₀ for the VI rows."""
    hyper = {**ROWS[label][1], **POINTS.get(label, {})}
    if label in VI_ROWS:
        hyper["init_std"] = INIT_STD
    return hyper


def _network(task: str, ds: Any, seed: int) -> torch.nn.Module:
    name, horizon = TASKS[task]
    torch.manual_seed(seed)
    return koopa_for_data(ds.x_train, horizon, dataset=name)


def run_row(task: str, ds: Any, label: str, seed: int,
            steps: int) -> tuple[dict[str, Any], GaussianMixture | None]:
    """One run of ``label`` scored on the test split; a failure becomes the record's status."""
    method = ROWS[label][0]
    hyper = hyper_for(label) if label != "koopa" else {}
    record: dict[str, Any] = {"task": task, "label": label, "method": method, "seed": seed,
                              "hyper": hyper, "status": "ok"}
    x_eval, y_eval = ds.x_test, ds.y_test
    try:
        net = _network(task, ds, seed)
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if label == "koopa":
                trained = train_forecaster(net, ds.x_train, ds.y_train, ds.x_val, ds.y_val,
                                           seed=seed, batch_size=BATCH)
                record.update(steps=len(trained.history) * (len(ds.x_train) // BATCH),
                              best_epoch=trained.best_epoch)
            else:
                problem = BayesianModel(net, forecast_likelihood(ds), prior=1.0,
                                        num_data=len(ds.x_train))
                keep = ({"thin": max(1, (steps - steps // 2) // EVAL_DRAWS),
                         "max_samples": EVAL_DRAWS} if method == "sghmc" else {})
                result = infer(problem, method, data=(ds.x_train, ds.y_train), steps=steps,
                               seed=seed, batch_size=BATCH, **keep, **hyper)
                record["steps"] = steps
        record["train_s"] = time.perf_counter() - start
        if caught:
            record["warnings"] = sorted({f"{w.category.__name__}: {str(w.message)[:200]}"
                                         for w in caught})
        start = time.perf_counter()
        if label == "koopa":
            with torch.no_grad():
                loc = torch.cat([net(x_eval[i : i + 1024]) for i in range(0, len(x_eval), 1024)])
            sigma = trained.val_channel_mse.sqrt()  # (C,): broadcast over windows and steps
            record["noise_sigma"] = float(sigma.mean())
            mixture = GaussianMixture(loc[None].float(), sigma[None].float())
        else:
            mixture = forecast_mixture(problem, result.iter_draws(EVAL_DRAWS), x_eval)
            record["noise_sigma"] = float(result.params["likelihood.log_noise"].exp().mean())
            if label in VI_ROWS:
                record["sigma_moved"] = report.sigma_moved(result, INIT_STD)
        record.update(forecast_values(mixture, y_eval, ds))
        record["draws"] = mixture.num_components
        record["eval_s"] = time.perf_counter() - start
        return record, mixture
    except Exception as err:  # noqa: BLE001 - a failing method keeps its record
        record["status"] = f"error: {type(err).__name__}: {str(err)[:300]}"
        return record, None


def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True, methods: tuple[str, ...] = (),
        plan: Plan | None = None) -> list[dict[str, Any]]:
    """Run the suite into ``out`` (module docstring); returns the per-run records.

    ``methods`` (``--rows``) runs only these rows; ``echo`` prints progress to stderr."""
    plan = plan or make_plan(quick)
    if methods:
        plan = dataclasses.replace(plan, rows=tuple(methods))

    def say(text: str) -> None:
        if echo:
            print(text, file=sys.stderr, flush=True)

    out = prepare_bench_out(Path(out))
    warm_up()
    start = time.perf_counter()
    records: list[dict[str, Any]] = []
    for task in plan.tasks:
        ds = load_task(task, plan.max_windows)
        for s in range(plan.seeds):
            for label in plan.rows:
                if task not in ROW_TASKS.get(label, (task,)):
                    continue
                record, mixture = run_row(task, ds, label, seed + s, plan.steps)
                records.append(record)
                say(f"{task} seed {seed + s} {label}: {record['status']} mse "
                     f"{record.get('mse')} nll {record.get('nll')}")
                if s == 0 and mixture is not None and label in report.PLOTTED:
                    report.plot(out, task, label, ds, mixture)
    rows = report.summarize(records)
    meta = {"quick": quick, "plan": dataclasses.asdict(plan), "points": POINTS,
            "records": records, "wall_s": time.perf_counter() - start}
    cmd = write_results(out, "timeseries", quick, command, report.TITLE, report.setup(plan),
                        rows, meta, note=report.notes(rows, records), floatfmt=".4g")
    report.write_report(out, cmd, rows, records, plan)
    return records
