"""The ``bnn-lowdata`` suite: BNNs on small MNIST training sets, score-based VI against the rest.

The low-data MNIST experiment of the score-based VI paper (M. Kim, arXiv 2602.05873):
does ``score_vi`` with its closed-form proximal solver (``score_vi_prox``, at the defaults
``bdlkit bench score-vi-study`` chose) reach ADVI's test error with better calibration
(lower ECE and NLL)? And against IVON, the natural-gradient VI it is a member of? The suite
measures it next to the controls that tell a real posterior from a point estimate.

Data: :func:`bdlkit.data.images.load_mnist` with ``train_size`` n in {500, 1000, 2000} and
split seed = the run's seed; the test set is the rest of the 10 000 shipped images (full
runs; ``--quick`` caps it at 2 000). OOD: the first :data:`OOD_POINTS` (2 000) notMNIST
letters (:func:`~bdlkit.data.images.load_notmnist`; the file is shuffled, so they are
class-balanced), AUROC of the predictive entropy (``metrics.ood_metrics``). Models: MLP
784-100-10 and the L2E-family CNN ``ConvNet(width=4, depth=1)``, prior N(0, 1), batch 128,
the network's initialisation seeded by the run's seed. Every method runs
:data:`EPOCHS` (100) epochs, BayesDLL's MNIST budget (400, 800 and 1 600 steps at n =
500, 1 000, 2 000), and is scored by its BMA predictive over :data:`EVAL_DRAWS` draws.

**Protocols** (:data:`PROTOCOLS`): ``a``, the paper author's (BayesDLL's MNIST example: the
likelihood weighted by 1/kld, kld = 1e-3, ``BayesianModel(kld=...)``), and ``b``, the
posterior itself (kld = 1). T = 1 in both.

Rows (:data:`METHODS`): ``map``; ``advi``; ``score_vi_prox`` (the closed form at its
defaults); ``ivon`` (bdlkit's, at its defaults); the peers (:mod:`bdlkit.bench.peers`, run by
their own libraries on the same data, steps and draws): ``ivon_opt`` (ivon-opt's loop at
ivon's chosen point) and ``laplace`` (laplace-torch's last-layer KFAC Laplace on the MAP
network of the same seed, prior precision by marginal likelihood); ``sghmc`` (lr 0.005,
α 0.1), ``csghmc`` (4 cycles; lr 0.05 on the CNN), ``l2e`` (the shipped meta-parameters)
and ``ensemble`` (5 members, lr 1e-3).

Tuning, never on the test split: for each (protocol, model, n), 20 % of the first seed's
training images are held out as validation; every grid point of a tuned row
(:data:`GRIDS`, three points each) runs on the other 80 % and the point with the lowest
validation NLL is kept (``chosen``; every grid run is in ``results.json``). The chosen
point then runs on :data:`SEEDS` seeds (seed s: network init, data order, noise, split).

Per row, mean ± std over seeds: test error, NLL, top-label ECE (15 bins), Brier, OOD AUROC,
training seconds, and for the VI rows the 10/50/90 % quantiles of σ, σ moved = median σ /
the row's own median σ₀, the NLL of the network at q's mean alone (``NLL at μ``: what
the BMA adds over its mean; a q whose σ is too small to matter scores the same), and
**convergence**: the fraction of weights whose ELBO gradient
at the final q, with the full-data score, still asks for a significant Newton step
(:func:`bdlkit.engine.vi_checks.stationarity`; "converged" below 1 %). The claims and
verdicts: :mod:`bdlkit.bench.bnn_lowdata_report`. A failing run keeps its record.

The CNN cells run :data:`CNN_ROWS` (the VI rows, their peers, MAP and the ensemble).

``--quick``: n = 1000, MLP only, protocol a, one seed, no tuning (the middle grid point),
10 epochs, and the two flow rows (a neural spline flow on the last layer, a diagonal
Gaussian elsewhere; not in the full plan).
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
from torch import Tensor

from bdlkit import infer, metrics, models
from bdlkit.bench import bnn_lowdata_report as report
from bdlkit.bench import peers
from bdlkit.bench.common import cached_cell, prepare_bench_out, warm_up, write_results
from bdlkit.data.images import load_mnist, load_notmnist
from bdlkit.engine.vi_checks import stationarity
from bdlkit.evaluation.predictive import bma
from bdlkit.families.diag_gaussian import DiagGaussian, DiagGaussianParams
from bdlkit.metrics.ood import ood_auroc
from bdlkit.problems import BayesianModel
from bdlkit.runs.config import method_options

DESCRIPTION = ("BNNs on 500-2000 MNIST images (MLP, CNN), BayesDLL's kld 1e-3 and kld 1: "
               "score_vi's closed form against ADVI, IVON, peers, SG-MCMC, L2E, ensembles")
INIT_STD = 1e-2  # σ₀ of the ADVI row (its default)
LR_GRID = (3e-3, 1e-2, 3e-2)
OMEGA_GRID = (0.03, 0.1, 0.3)
IVON_LR_GRID = (0.01, 0.03, 0.1)
EVAL_DRAWS = 16
VAL_FRACTION = 0.2
SEEDS = 3
SIZES = (500, 1000, 2000)
EPOCHS = 100
BATCH = 128
PROTOCOLS = {"a": 1e-3, "b": 1.0}  # protocol -> kld
CONVERGENCE_DRAWS = 16  # fresh draws of the stationarity check (8 antithetic pairs)
CONVERGED_BELOW = 0.01  # converged: fewer weights than this fraction still far from stationary
OOD_POINTS = 2000  # the first notMNIST images (a shuffled, class-balanced prefix)
#: label -> (registered method, fixed hyperparameters); "peer:" rows are run by peers.py
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "map": ("map", {}),
    "advi": ("advi", {}),
    "score_vi_prox": ("score_vi", {"solver": "closed_form"}),
    "ivon": ("ivon", {}),
    "ivon_opt": ("peer:ivon_opt", {}),
    "laplace": ("peer:laplace", {}),
    "sghmc": ("sghmc", {"lr": 0.005, "alpha": 0.1}),
    "csghmc": ("csghmc", {"cycles": 4, "samples_per_cycle": EVAL_DRAWS // 4}),
    "l2e": ("l2e", {}),
    "ensemble": ("ensemble", {"members": 5, "lr": 1e-3}),
    "advi_flow": ("advi", {"family": "flow"}),  # not in the default plan (flows on networks:
    "score_vi_flow": ("score_vi", {"family": "flow"}),  # bench timeseries, posteriordb)
}
ROWS = tuple(label for label in METHODS if not label.endswith("_flow"))  # the default plan
#: the CNN cells run the VI rows, their peers and controls (the samplers' CNN rows cost
#: more than the rest of the suite together; the l2e suite measures them)
CNN_ROWS = ("map", "advi", "score_vi_prox", "ivon", "ivon_opt", "laplace", "ensemble")
VI_ROWS = ("advi", "score_vi_prox", "ivon", "ivon_opt", "advi_flow", "score_vi_flow")
#: Tuned rows and their grids (the others run their fixed hyperparameters only).
GRIDS: dict[str, tuple[dict[str, Any], ...]] = {
    "map": tuple({"lr": lr} for lr in LR_GRID),
    "advi": tuple({"lr": lr} for lr in LR_GRID),
    "score_vi_prox": tuple({"omega": w} for w in OMEGA_GRID),
    "ivon": tuple({"lr": lr} for lr in IVON_LR_GRID),
}
#: peer rows that take another row's chosen point (ivon-opt runs at ivon's)
SHARES = {"ivon_opt": "ivon", "laplace": "map"}
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
    epochs: int
    tune: bool
    protocols: tuple[str, ...] = tuple(PROTOCOLS)
    methods: tuple[str, ...] = ROWS
    #: per model, the rows it runs when fewer than ``methods`` (None: all)
    model_methods: dict[str, tuple[str, ...]] | None = None
    test_size: int | None = None  # None: the rest of the 10k images
    ood_points: int | None = None  # first notMNIST images (None: all)

    def rows(self, model: str) -> tuple[str, ...]:
        """The rows run on ``model``."""
        limit = (self.model_methods or {}).get(model)
        return self.methods if limit is None else tuple(m for m in self.methods if m in limit)

    def steps(self, n: int) -> int:
        """The steps of ``epochs`` epochs of batch :data:`BATCH` on ``n`` images."""
        return self.epochs * -(-n // BATCH)


def make_plan(quick: bool) -> Plan:
    """The full plan, or ``--quick``'s (module docstring)."""
    if quick:
        return Plan(("mlp",), (1000,), 1, 10, tune=False, protocols=("a",),
                    methods=(*ROWS, "advi_flow", "score_vi_flow"), test_size=2000,
                    ood_points=OOD_POINTS)
    return Plan(("mlp", "cnn"), SIZES, SEEDS, EPOCHS, tune=True, ood_points=OOD_POINTS,
                model_methods={"cnn": CNN_ROWS})


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
    """The full hyperparameters of ``label`` at grid ``point`` (σ₀ for the ADVI row)."""
    fixed = METHODS[label][1]
    hyper = {**fixed, **MODEL_HYPER.get(model, {}).get(label, {}), **point}
    if label in ("advi", "advi_flow", "score_vi_flow"):
        hyper["init_std"] = INIT_STD
    return hyper


# ------------------------------------------------------------------------ runs
def fit_and_score(model: str, label: str, point: dict[str, Any], train: tuple[Tensor, Tensor],
                  evals: dict[str, Tensor | None], steps: int, seed: int,
                  protocol: str) -> dict[str, Any]:
    """One run of ``label`` on ``train`` scored on ``evals`` (``x``, ``y``, optional
    ``ood``) under ``protocol``; a failure becomes the record's ``status``."""
    method, _ = METHODS[label]
    hyper = hyper_for(model, label, point)
    record: dict[str, Any] = {"label": label, "method": method, "hyper": hyper, "status": "ok"}
    try:
        if method.startswith("peer:"):
            record.update(_peer(model, label, hyper, train, evals, steps, seed, protocol))
            return record
        x, y = train
        problem = make_problem(model, train, seed, protocol)
        keep = {"thin": max(1, (steps - steps // 2) // EVAL_DRAWS),
                "max_samples": EVAL_DRAWS} if label in THINNED else {}
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:  # kept in the record, not echoed
            warnings.simplefilter("always")
            result = infer(problem, method, data=(x, y), steps=steps, seed=seed,
                           batch_size=BATCH, **keep, **hyper)
        record["train_s"] = time.perf_counter() - start
        if caught:
            record["warnings"] = sorted({f"{w.category.__name__}: {str(w.message)[:200]}"
                                         for w in caught})
        start = time.perf_counter()
        record.update(score(result.predictive(evals["x"], num_samples=EVAL_DRAWS),
                            evals, lambda xs: result.predictive(xs, num_samples=EVAL_DRAWS)))
        if label in VI_ROWS:
            q = result.algorithm.approximation(result.state)
            q0 = result.algorithm.approximation(result.algorithm.init(
                generator=torch.Generator().manual_seed(seed)))
            record.update(sigma_quantiles(q, q0), **convergence(problem, q, train),
                          **at_mean(problem, q, evals))
        record["eval_s"] = time.perf_counter() - start
    except Exception as err:  # noqa: BLE001 - a failing method keeps its record
        record["status"] = f"error: {type(err).__name__}: {str(err)[:300]}"
    return record


def make_problem(model: str, train: tuple[Tensor, Tensor], seed: int,
                 protocol: str) -> BayesianModel:
    """The posterior of ``model`` on ``train`` under ``protocol`` (its KL discount)."""
    x, _ = train
    return BayesianModel(make_net(model, tuple(x.shape[1:]), seed), "categorical", prior=1.0,
                         num_data=len(x), kld=PROTOCOLS[protocol])


def _peer(model: str, label: str, hyper: dict[str, Any], train: tuple[Tensor, Tensor],
          evals: dict[str, Tensor | None], steps: int, seed: int,
          protocol: str) -> dict[str, Any]:
    """A peer row (:mod:`bdlkit.bench.peers`): trained and scored like the others."""
    why = peers.missing(label)
    if why is not None:
        return {"status": f"skipped: {why}"}
    x, _ = train
    kld, start = PROTOCOLS[protocol], time.perf_counter()
    shape = tuple(x.shape[1:])
    if label == "ivon_opt":
        declared = method_options("ivon")
        lr = hyper.get("lr", declared["lr"].default)
        h0 = hyper.get("hess_init", declared["hess_init"].default)
        net, opt = peers.ivon_opt_fit(lambda: make_net(model, shape, seed), train, steps=steps,
                                      batch_size=BATCH, seed=seed, lr=lr, hess_init=h0, kld=kld)
        train_s = time.perf_counter() - start

        def predict(xs: Tensor) -> Tensor:
            return peers.ivon_opt_probs(net, opt, xs, EVAL_DRAWS, seed)

        ess = len(x) / kld
        q = _ivon_opt_q(net, opt, ess)
        sigma0 = (ess * (h0 + opt.param_groups[0]["weight_decay"])) ** -0.5
        q0 = DiagGaussian(DiagGaussianParams(mu=q.params.mu, rho={
            k: torch.full_like(v, math.log(sigma0)) for k, v in q.params.rho.items()}))
        problem = make_problem(model, train, seed, protocol)
        return {"train_s": train_s, **score(predict(evals["x"]), evals, predict),
                **sigma_quantiles(q, q0), **convergence(problem, q, train),
                **at_mean(problem, q, evals)}
    result = infer(make_problem(model, train, seed, protocol), "map", data=train, steps=steps,
                   seed=seed, batch_size=BATCH, **hyper)
    net = make_net(model, shape, seed)
    net.load_state_dict(dict(result.params), strict=False)
    la = peers.laplace_fit(net, train, batch_size=BATCH, kld=kld)
    train_s = time.perf_counter() - start

    def predict_la(xs: Tensor) -> Tensor:
        return peers.laplace_probs(la, xs, EVAL_DRAWS, seed)

    return {"train_s": train_s, **score(predict_la(evals["x"]), evals, predict_la)}


def _ivon_opt_q(net: torch.nn.Module, opt: Any, ess: float) -> DiagGaussian:
    """ivon-opt's q as a diagonal Gaussian over the network's named parameters."""
    group = opt.param_groups[0]
    sigma = (ess * (group["hess"] + group["weight_decay"])).rsqrt()
    mu, rho, offset = {}, {}, 0
    for name, p in net.named_parameters():
        mu[name] = p.detach().clone()
        rho[name] = sigma[offset:offset + p.numel()].view(p.shape).log()
        offset += p.numel()
    return DiagGaussian(DiagGaussianParams(mu=mu, rho=rho))


def score(probs: Any, evals: dict[str, Tensor | None], predict: Any) -> dict[str, float]:
    """Error, NLL, ECE and Brier of the BMA ``probs`` (class probabilities or a predictive)
    on ``evals["y"]``; the OOD AUROC of ``predict(evals["ood"])`` when given."""
    p = getattr(probs, "probs", probs)
    values = metrics.classification_metrics(p, evals["y"], getattr(probs, "log_probs", None))
    out = {"error": 1.0 - values["accuracy"], **{k: values[k] for k in ("nll", "ece", "brier")}}
    if evals.get("ood") is not None:  # the AUROC of the BMA's predictive entropy
        ood = predict(evals["ood"])
        out["ood_auroc"] = ood_auroc(p, getattr(ood, "probs", ood))
    return out


def at_mean(problem: BayesianModel, q: Any, evals: dict[str, Tensor | None]) -> dict[str, float]:
    """The test NLL of the network at q's mean alone: the part of a VI row's NLL that its
    σ does not explain (a BMA that scores as its mean is a point estimate's). Diagonal
    Gaussians only: a flow's mean has no closed form (its rows leave it empty)."""
    if not isinstance(q, DiagGaussian):
        return {}
    return {"nll_at_mean": score(bma(problem, [q.params.mu], evals["x"]), {"y": evals["y"]},
                                 None)["nll"]}


def sigma_quantiles(q: Any, q0: Any) -> dict[str, float]:
    """σ's 10/50/90 % quantiles over all weights and σ moved = median σ / median σ₀."""
    def values(approx: Any) -> Tensor:
        return torch.cat([v.reshape(-1) for v in approx.std.values()]).double()

    q10, median, q90 = torch.quantile(values(q), torch.tensor([0.1, 0.5, 0.9],
                                                              dtype=torch.float64)).tolist()
    return {"sigma_q10": q10, "sigma_median": median, "sigma_q90": q90,
            "sigma_moved": median / float(values(q0).median())}


def result_sigma(result: Any) -> dict[str, float]:
    """:func:`sigma_quantiles` of a VI result, against the q its algorithm starts from."""
    algorithm = result.algorithm
    start = algorithm.init(generator=torch.Generator().manual_seed(0))
    return sigma_quantiles(algorithm.approximation(result.state), algorithm.approximation(start))


def convergence(problem: BayesianModel, q: Any, train: tuple[Tensor, Tensor]) -> dict[str, Any]:
    """The stationarity of the ELBO at ``q`` with the full-data score (module docstring);
    diagonal Gaussians only (a flow row leaves it empty)."""
    if not isinstance(q, DiagGaussian):
        return {}
    summary = stationarity(problem, q, train, draws=CONVERGENCE_DRAWS).summary()
    return {"unconverged": summary["unconverged"], "converged":
            summary["unconverged"] < CONVERGED_BELOW, "mean_step_q90": summary["mean_step_q90"],
            "log_sigma_step_q90": summary["log_sigma_step_q90"]}


def select(plan: Plan, model: str, n: int, seed: int, protocol: str,
           echo: bool) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """The chosen grid point of every tuned row for (``protocol``, ``model``, ``n``) and the
    tuning records: each point trained on 80 % of seed ``seed``'s training images and ranked
    by NLL on the other 20 %. Without tuning: the middle grid point."""
    tuned = [label for label in plan.rows(model) if label in GRIDS]
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
            rec = {"protocol": protocol, "model": model, "n": n, "phase": "tune",
                   "seed": seed, "point": point,
                   **fit_and_score(model, label, point, train, val, plan.steps(cut), seed,
                                   protocol)}
            records.append(rec)
            grid.append(rec)
            if echo:
                print("  " + report.echo_line(rec), file=sys.stderr, flush=True)
        ok = [r for r in grid if r["status"] == "ok"]
        best = min(ok, key=lambda r: r["nll"]) if ok else grid[len(grid) // 2]
        chosen[label] = best["point"]
    return chosen, records


def run_cell(plan: Plan, model: str, n: int, seed: int, protocol: str, test_size: int | None,
             ood_x: Tensor, echo: bool) -> dict[str, Any]:
    """One (``protocol``, ``model``, ``n``) cell: its tuning, then every row on every seed."""
    start = time.perf_counter()
    chosen, tuning = select(plan, model, n, seed, protocol, echo)
    chosen.update({label: chosen[row] for label, row in SHARES.items() if row in chosen})
    final = []
    for s in range(seed, seed + plan.seeds):
        ds = load_mnist(train_size=n, test_size=test_size, seed=s)
        evals = {"x": ds.x_test, "y": ds.y_test, "ood": ood_x}
        for label in plan.rows(model):
            point = chosen.get(label, {})
            rec = {"protocol": protocol, "model": model, "n": n, "phase": "final", "seed": s,
                   "point": point, **fit_and_score(model, label, point, ds.train(), evals,
                                                   plan.steps(n), s, protocol)}
            final.append(rec)
            if echo:
                print("  " + report.echo_line(rec), file=sys.stderr, flush=True)
    return {"chosen": chosen, "tuning": tuning, "final": final,
            "wall_s": time.perf_counter() - start}


def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True, plan: Plan | None = None,
        only_settings: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Tune, run and score every (protocol, model, n, method); write the tables and claims.

    Each cell is kept in ``out/cells`` (:func:`~bdlkit.bench.common.cached_cell`), so a run
    resumes after a crash. ``only_settings``: run just these protocols (``--settings a``);
    two processes can share ``out`` with disjoint protocols, and a last run without it
    writes the whole table from their cells."""
    start = time.perf_counter()
    plan = plan or make_plan(quick)
    unknown = sorted(set(only_settings) - set(plan.protocols))
    if unknown:
        raise ValueError(f"unknown settings {unknown} of suite 'bnn-lowdata'; valid: "
                         f"{', '.join(plan.protocols)} (protocols)")
    if only_settings:
        plan = dataclasses.replace(plan, protocols=tuple(p for p in plan.protocols
                                                         if p in only_settings))
    prepare_bench_out(out)
    warm_up()
    ood_x = load_notmnist().x_test[: plan.ood_points]
    tuning: list[dict[str, Any]] = []
    final: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    cell_s: list[float | None] = []  # each cell's compute time, when it was run or reused
    for protocol in plan.protocols:
        for model in plan.models:
            for n in plan.sizes:
                key = {"plan": dataclasses.asdict(plan) | {"protocols": None}, "seed": seed,
                       "grids": GRIDS, "methods": METHODS, "model_hyper": MODEL_HYPER,
                       "eval_draws": EVAL_DRAWS}
                compute = functools.partial(run_cell, plan, model, n, seed, protocol,
                                            plan.test_size, ood_x, echo)
                cell = cached_cell(out, f"{protocol}-{model}-{n}", key, compute, echo)
                tuning += cell["tuning"]
                final += cell["final"]
                cell_s.append(cell.get("wall_s"))
                rows += [report.summarize([r for r in cell["final"] if r["label"] == label],
                                          cell["chosen"].get(label, "fixed"))
                         for label in plan.rows(model)]
    claims = {baseline: report.compute_claims(final, rows, baseline)
              for baseline in report.BASELINES}
    settings = {"plan": dataclasses.asdict(plan), "seed": seed, "init_std": INIT_STD,
                "grids": GRIDS, "eval_draws": EVAL_DRAWS, "val_fraction": VAL_FRACTION,
                "methods": METHODS, "model_hyper": MODEL_HYPER, "protocols": PROTOCOLS,
                "models": {m: MODEL_TEXT[m] for m in plan.models}, "batch_size": BATCH,
                "prior_scale": 1.0, "wall_s": time.perf_counter() - start,
                "cells_s": None if None in cell_s else sum(cell_s)}
    setup = (f"{', '.join(MODEL_TEXT[m] for m in plan.models)} on MNIST with n in "
             f"{list(plan.sizes)} training images, prior N(0, 1), batch {BATCH}, "
             f"{plan.epochs} epochs, protocols "
             f"{', '.join(f'{p} (kld {PROTOCOLS[p]:g})' for p in plan.protocols)}, "
             f"{plan.seeds} seed(s), "
             + ("tuned on a 20 % validation split of the first seed"
                if plan.tune else "no tuning (middle grid point)")
             + f", OOD notMNIST ({plan.ood_points or 'all'} images); wall time "
             f"{settings['wall_s']:.0f} s"
             + (f" (its cells computed in {settings['cells_s']:.0f} s)"
                if settings["cells_s"] is not None else " (cells reused from an earlier run)"))
    note = "\n\n".join((*report.NOTES, *(report.claims_markdown(c, b)
                                          for b, c in claims.items())))
    write_results(out, "bnn-lowdata", quick, command, "BNNs on small MNIST training sets",
                  setup, rows, {"claims": claims, "settings": settings, "runs": final,
                                "tuning": tuning},
                  note=note, table=report.table(rows))
    return rows
