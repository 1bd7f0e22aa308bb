"""The ``uci`` suite: the nine UCI regression sets with their standard splits.

The protocol of Hernández-Lobato & Adams (2015), which MC dropout (Gal & Ghahramani 2016),
deep ensembles and most BNN papers since report: one hidden layer of 50 ReLU units (100 for
protein), inputs and targets standardised on each split's training rows
(:func:`bdlkit.data.uci.load_uci`), test RMSE and test log-likelihood in the original
units, mean ± standard error over the 20 splits (5 for protein).

Rows (:data:`METHODS`): ``map`` (the control), ``mc_dropout``, ``advi``, ``score_vi`` (its
default solver), ``score_vi_prox`` (its closed form), ``ivon``, ``sghmc``, ``csghmc`` and
``ensemble`` (5 members). Every row: prior N(0, 1), batch :data:`BATCH`, the same
:attr:`Plan.steps` steps, and the **same noise rule**: the ``gaussian`` likelihood, its σ
learned with the weights (a random parameter for the Bayesian rows). The test
log-likelihood is that of the BMA mixture over :data:`EVAL_DRAWS` draws (the samplers keep
that many from the second half of their run; an ensemble its members).

Tuning, never on test rows: on the first split of each set, the last 20 % of the training
rows are held out; every point of a row's grid (:data:`GRIDS`) trains on the rest and the
point with the highest validation log-likelihood is kept for all splits. ``mc_dropout`` and
``ensemble`` train at ``map``'s chosen lr (:data:`INHERITS`); ``mc_dropout`` chooses its
rate on Gal's grid. Reference rows (:mod:`.uci_report`): MC dropout's published per-split
results (shipped with the splits, paired split by split) and the published means of PBP,
deep ensembles and SGHMC (:mod:`.uci_published`).

``--quick``: yacht, boston and energy, 3 splits, 300 steps, tuned the same way.
``bdlkit bench uci-gal-budget``: the control of verdict (a), ``mc_dropout`` alone at Gal's
4 000 epochs on yacht and boston (:func:`make_gal_budget_plan`).
``--settings NAME ...``: only these data sets; each (set, split) is a cell in ``cells/``,
so processes with disjoint sets share one folder and a last run writes the whole table.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from bdlkit import infer, models
from bdlkit.bench import uci_report as report
from bdlkit.bench.common import cached_cell, prepare_bench_out, write_results
from bdlkit.core.errors import InputError
from bdlkit.data.uci import UCI_FOLDERS, load_uci, published_tau_grid, split_count
from bdlkit.problems import BayesianModel

DESCRIPTION = ("the nine UCI regression sets on their standard splits: MC dropout, VI, "
               "SG-MCMC and ensembles against the published tables")
DATASETS = tuple(UCI_FOLDERS)
BATCH = 128  # Gal's batch size
EVAL_DRAWS = 100
PRIOR = 1.0
VAL_FRACTION = 0.2
LIKELIHOOD = "gaussian"  # σ learned: the one noise rule of every row
CYCLES = 4  # csghmc's
GAL_EPOCHS = 4000  # Gal & Ghahramani's UCI runs: 40 base epochs x 100 (2 000 on protein)
#: label -> (registered method, fixed options)
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "map": ("map", {}),
    "mc_dropout": ("mc_dropout", {}),
    "advi": ("advi", {}),
    "score_vi": ("score_vi", {}),
    "score_vi_prox": ("score_vi", {"solver": "closed_form"}),
    "ivon": ("ivon", {}),
    "sghmc": ("sghmc", {}),
    "csghmc": ("csghmc", {"cycles": CYCLES, "samples_per_cycle": EVAL_DRAWS // CYCLES}),
    "ensemble": ("ensemble", {"members": 5}),
}
#: one knob per row, three or four points; MC dropout's rates are Gal's grid
GRIDS: dict[str, tuple[dict[str, Any], ...]] = {
    "map": tuple({"lr": lr} for lr in (1e-3, 3e-3, 1e-2)),
    "mc_dropout": tuple({"rate": p} for p in (0.005, 0.01, 0.05, 0.1)),
    "advi": tuple({"lr": lr} for lr in (1e-3, 3e-3, 1e-2)),
    "score_vi": tuple({"lr": lr} for lr in (1e-3, 3e-3, 1e-2)),
    "score_vi_prox": tuple({"omega": w} for w in (0.03, 0.1, 0.3)),
    "ivon": tuple({"lr": lr} for lr in (0.01, 0.03, 0.1)),
    "sghmc": tuple({"lr": lr} for lr in (0.005, 0.02)),
    "csghmc": tuple({"lr": lr} for lr in (0.005, 0.02)),
}
#: rows that train at another row's chosen point (then tune their own grid, if any)
INHERITS = {"mc_dropout": "map", "ensemble": "map"}
THINNED = ("sghmc",)  # keeps EVAL_DRAWS draws from the second half of its run


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one run of the suite covers (:func:`make_plan`; tests pass a tiny one)."""

    datasets: tuple[str, ...]
    splits: int | None  # per set (None: all of them)
    steps: int  # per run, unless ``epochs`` is set
    tune: bool = True
    methods: tuple[str, ...] = tuple(METHODS)
    epochs: int | None = None  # per run instead of ``steps``: epochs of batch BATCH
    #: "learned": σ learned with the weights (``gaussian``); "validation": a fixed σ per
    #: row, τ = 1/σ² chosen on validation from Gal's grid of the set (``gaussian:<σ>``)
    noise: str = "learned"

    def split_count(self, available: int) -> int:
        return available if self.splits is None else min(self.splits, available)

    def steps_for(self, rows: int) -> int:
        """The steps of one run on ``rows`` training rows."""
        return self.steps if self.epochs is None else self.epochs * -(-rows // BATCH)

    def grid(self, name: str, label: str) -> tuple[dict[str, Any], ...]:
        """The points tuned for ``label`` on ``name`` (crossed with τ on ``validation``)."""
        grid = GRIDS.get(label, ({},))
        grid = grid if self.tune else (grid[len(grid) // 2],)
        if self.noise == "learned":
            return grid
        taus = published_tau_grid(name)
        return tuple({**p, "tau": tau} for p in grid for tau in taus)

    @property
    def budget(self) -> str:
        return f"{self.steps} steps" if self.epochs is None else f"{self.epochs} epochs"


def make_plan(quick: bool) -> Plan:
    """The full plan, or ``--quick``'s (module docstring)."""
    if quick:
        return Plan(("yacht", "boston", "energy"), 3, 300)
    return Plan(DATASETS, None, 1000)


def make_gal_budget_plan(quick: bool) -> Plan:
    """The control of verdict (a): ``mc_dropout`` alone under Gal's protocol (4 000 epochs;
    its default lr 1e-3, Keras' Adam default, which Gal's runs used; rate and a fixed τ
    chosen on validation from his grids) on the two smallest sets, where that budget is
    affordable (``--quick``: 400 epochs, 3 splits)."""
    return Plan(("yacht", "boston"), 3 if quick else None, 0, methods=("mc_dropout",),
                epochs=400 if quick else GAL_EPOCHS, noise="validation")


def run_gal_budget(out: Path, **kwargs: Any) -> list[dict[str, Any]]:
    """:func:`run` with :func:`make_gal_budget_plan` (``bdlkit bench uci-gal-budget``)."""
    return run(out, plan=make_gal_budget_plan(kwargs.get("quick", False)),
               suite="uci-gal-budget", **kwargs)


def epochs_of(steps: int, rows: int) -> float:
    """Passes over ``rows`` training rows in ``steps`` steps: an epoch is ceil(rows/BATCH)
    batches, the last one smaller (:mod:`bdlkit.engine.batches`)."""
    return steps / math.ceil(rows / BATCH)


def hidden_units(name: str) -> int:
    """The protocol's width: 100 for protein, 50 for the rest."""
    return 100 if name == "protein" else 50


def make_problem(name: str, x: torch.Tensor, seed: int, rate: float,
                 likelihood: str = LIKELIHOOD) -> BayesianModel:
    """The network of the protocol on training inputs ``x``, initialised by ``seed``;
    ``rate`` > 0 adds dropout layers (the mc_dropout row)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = models.MLP(x.shape[1], 1, hidden=(hidden_units(name),), dropout=rate)
    return BayesianModel(net, likelihood, prior=PRIOR, num_data=len(x))


def fit_and_score(name: str, label: str, point: dict[str, Any], train: tuple, evals: tuple,
                  y_std: float, steps: int, seed: int) -> dict[str, Any]:
    """One run of ``label`` at ``point``, scored on ``evals`` in original units; a failure
    becomes the record's ``status``."""
    method, fixed = METHODS[label]
    hyper = {**fixed, **point}
    rate = hyper.pop("rate", 0.0) if method == "mc_dropout" else 0.0
    tau = hyper.pop("tau", None)  # original units: σ = τ^(-1/2) / y_std on standardised y
    likelihood = LIKELIHOOD if tau is None else f"gaussian:{tau ** -0.5 / y_std!r}"
    record: dict[str, Any] = {"label": label, "hyper": {**hyper, **({"rate": rate} if rate
                                                                    else {})}, "status": "ok"}
    try:
        x, y = train
        keep = ({"thin": max(1, (steps - steps // 2) // EVAL_DRAWS), "max_samples": EVAL_DRAWS}
                if label in THINNED else {})
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = infer(make_problem(name, x, seed, rate, likelihood), method, data=(x, y),
                           steps=steps, seed=seed, batch_size=BATCH, progress=False,
                           **keep, **hyper)
        record["train_s"] = time.perf_counter() - start
        record["epochs"] = epochs_of(steps, len(x))
        if caught:
            record["warnings"] = sorted({f"{w.category.__name__}: {str(w.message)[:160]}"
                                         for w in caught})
        record.update(report.score(result.predictive(*evals, num_samples=EVAL_DRAWS), evals[1],
                                   y_std))
    except Exception as err:  # noqa: BLE001 - a failing method keeps its record
        record["status"] = f"error: {type(err).__name__}: {str(err)[:300]}"
    return record


def tune(plan: Plan, name: str, seed: int, echo: bool) -> dict[str, Any]:
    """The chosen point of every row on ``name``, its validation log-likelihood (``val_ll``,
    which ranks the rows for verdict (b)) and the tuning records (module docstring)."""
    ds = load_uci(name, split=0)
    cut = ds.num_train - max(1, round(VAL_FRACTION * ds.num_train))
    train, val = (ds.x_train[:cut], ds.y_train[:cut]), (ds.x_train[cut:], ds.y_train[cut:])
    y_std = float(ds.meta["y_std"])
    chosen: dict[str, dict[str, Any]] = {}
    val_ll: dict[str, float] = {}
    records = []
    for label in plan.methods:
        base = dict(chosen.get(INHERITS.get(label, ""), {}))
        grid = plan.grid(name, label)
        runs = [{"phase": "tune", "point": {**base, **p}, **fit_and_score(
            name, label, {**base, **p}, train, val, y_std, plan.steps_for(cut), seed)}
            for p in grid]
        records += runs
        if echo:
            for r in runs:
                print("  tune " + report.echo_line(name, r), file=sys.stderr, flush=True)
        ok = [r for r in runs if r["status"] == "ok"]
        best = max(ok, key=lambda r: r["ll"]) if ok else runs[0]
        chosen[label] = best["point"]
        if ok:
            val_ll[label] = best["ll"]
    return {"chosen": chosen, "val_ll": val_ll, "tuning": records}


def run_split(plan: Plan, name: str, split: int, chosen: dict[str, dict[str, Any]],
              seed: int, echo: bool) -> list[dict[str, Any]]:
    """Every row of the plan on one split, at the chosen points."""
    ds = load_uci(name, split=split)
    y_std = float(ds.meta["y_std"])
    records = []
    for label in plan.methods:
        rec = {"dataset": name, "split": split, "point": chosen[label],
               **fit_and_score(name, label, chosen[label], ds.train(), (ds.x_test, ds.y_test),
                               y_std, plan.steps_for(ds.num_train), seed + split)}
        records.append(rec)
        if echo:
            print("  " + report.echo_line(name, rec), file=sys.stderr, flush=True)
    return records


def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True, plan: Plan | None = None, only_settings: tuple[str, ...] = (),
        suite: str = "uci") -> list[dict[str, Any]]:
    """Tune, run and score every (data set, split, row); write the tables and verdicts.

    ``only_settings``: run only these data sets (``--settings yacht boston``)."""
    start = time.perf_counter()
    plan = plan or make_plan(quick)
    unknown = [s for s in only_settings if s not in DATASETS]
    if unknown:
        raise InputError(f"unknown UCI data set(s) {unknown} for suite 'uci'; valid: "
                         f"{', '.join(DATASETS)} (e.g. --settings yacht,boston)")
    outside = [s for s in only_settings if s not in plan.datasets]
    if outside:
        raise InputError(f"{', '.join(outside)} not in this plan of suite {suite!r} (it runs "
                         f"{', '.join(plan.datasets)}); give those, or run `bdlkit bench uci` "
                         "without --quick for any of the nine")
    if only_settings:
        plan = dataclasses.replace(plan, datasets=tuple(d for d in plan.datasets
                                                        if d in only_settings))
    prepare_bench_out(out)
    key = {"plan": dataclasses.asdict(plan) | {"datasets": None}, "seed": seed,
           "grids": GRIDS, "methods": METHODS, "inherits": INHERITS, "draws": EVAL_DRAWS}
    runs: list[dict[str, Any]] = []
    tuning: dict[str, Any] = {}
    for name in plan.datasets:
        tuned = cached_cell(out, f"{name}-tune", key, functools.partial(
            tune, plan, name, seed, echo), echo)
        tuning[name] = tuned
        for split in range(plan.split_count(split_count(name))):
            runs += cached_cell(out, f"{name}-{split}", {**key, "chosen": tuned["chosen"]},
                                functools.partial(run_split, plan, name, split,
                                                  tuned["chosen"], seed, echo), echo)
    return write(out, plan, runs, tuning, quick, seed, command, suite,
                 time.perf_counter() - start)


def write(out: Path, plan: Plan, runs: list[dict[str, Any]], tuning: dict[str, Any],
          quick: bool, seed: int, command: str | None, suite: str,
          wall_s: float) -> list[dict[str, Any]]:
    """The analysis of ``runs`` as ``results.json`` and ``results.md`` (the table, the
    verdicts and the sources); ``wall_s``: this invocation's time."""
    analysis = report.analyse(runs, plan.datasets, plan.methods,
                              {name: t.get("val_ll", {}) for name, t in tuning.items()})
    settings = {"plan": dataclasses.asdict(plan), "seed": seed, "batch_size": BATCH,
                "eval_draws": EVAL_DRAWS, "prior_scale": PRIOR, "likelihood": LIKELIHOOD,
                "grids": GRIDS, "inherits": INHERITS, "methods": METHODS,
                "val_fraction": VAL_FRACTION, "wall_s": wall_s}
    setup = (f"MLP with one hidden layer of {hidden_units('yacht')} ReLU units "
             f"({hidden_units('protein')} for protein), prior N(0, {PRIOR:g}), likelihood "
             + (f"`{LIKELIHOOD}` (σ learned)" if plan.noise == "learned" else
                "`gaussian:<σ>` (τ = 1/σ² chosen on validation from Gal's grid)")
             + f" for every row, batch {BATCH}, {plan.budget} per run (the epochs column), "
             f"{EVAL_DRAWS} predictive draws, "
             f"{'all' if plan.splits is None else plan.splits} splits per set, hyperparameters "
             f"{'tuned' if plan.tune else 'at the middle grid point'} on the last "
             f"{VAL_FRACTION:.0%} of the first split's training rows; this invocation took "
             f"{wall_s:.0f} s (cells reused from earlier runs are not timed again: the "
             "command line gives a split run's whole time)")
    write_results(out, suite, quick, command, "UCI regression against the published tables",
                  setup, analysis["rows"], {"settings": settings, "verdicts":
                                            analysis["verdicts"], "runs": runs,
                                            "tuning": tuning},
                  note=report.notes_markdown(analysis, plan.epochs),
                  table=report.table(analysis["rows"]))
    return analysis["rows"]


def render(out: Path) -> list[dict[str, Any]]:
    """Rewrite ``out``'s tables from the records its ``results.json`` stores, with the
    current analysis (no run is repeated; each record's epochs recomputed from the plan)."""
    from bdlkit.core.serialization import load_json

    stored = load_json(out / "results.json")
    settings = stored["settings"]
    plan = Plan(**{**settings["plan"], "datasets": tuple(settings["plan"]["datasets"]),
                   "methods": tuple(settings["plan"]["methods"])})
    rows = {name: load_uci(name, split=0).num_train for name in plan.datasets}
    runs = [{**r, "epochs": epochs_of(plan.steps_for(rows[r["dataset"]]), rows[r["dataset"]])}
            if "epochs" in r else r for r in stored["runs"]]
    return write(out, plan, runs, stored["tuning"], "--quick" in stored["command"],
                 settings["seed"], stored["command"], stored["suite"], settings["wall_s"])
