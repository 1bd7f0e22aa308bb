"""The ``score-vi-study`` suite: the defaults of score_vi's closed form and of ivon, and what
each ingredient of the closed form does on a network.

The closed form is a natural-gradient step of the variational-online-Newton family
(``docs/ivon.md``); before this study it lost to ADVI on every network cell and diverged
under BayesDLL's tempered protocol. IVON (Shen et al. 2024) is the member of the family that
works on large networks. The study gives the closed form IVON's ingredients (an initial
curvature ``hess_init``, slow curvature averaging, a positivity-preserving average, gradient
momentum, a cosine schedule, a trust region) and measures each.

Task: MNIST, the MLP 784-100-10, 1 000 training images (the split of seed s), prior N(0, 1),
batch 128, 100 epochs (800 steps), a 16-draw BMA. Validation: the next 2 000 images of the
10 000-image pool; test: the 7 000 after them (never used for a choice). Two protocols:
``a``, BayesDLL's (the likelihood weighted by 1/kld, kld = 1e-3) and ``b``, the posterior
itself (kld = 1).

1. **Grids** (seed 0, validation), each of 9 points: ``advi`` lr × init_std, ``ivon`` lr ×
   hess_init, the closed form ω × hess_init (its other options at their defaults). The
   default of a method is the point with the lowest mean over the two protocols of its
   validation NLL divided by the protocol's best NLL in its grid.
2. **Ablations** (seed 0, validation): the closed form at its chosen point with one
   ingredient changed at a time (:data:`ABLATIONS`), and ivon's curvature average
   (:data:`IVON_ABLATIONS`). An ingredient's default is changed only where the change
   lowers the validation NLL in both protocols by more than two standard errors of the
   paired per-image difference (smaller differences are noise) and by more than
   :data:`MIN_GAIN` nats (smaller ones are not worth a default).
3. **Test** (3 seeds): map, advi, ivon, the closed form at the chosen points, and
   the closed form with α = 0 (with one draw and the Price estimate that is IVON's update:
   ``docs/ivon.md``), error, NLL, ECE, median σ, training seconds per step.
4. **Time per step**, the rows interleaved in one process (:data:`TIMING_ROUNDS` rounds
   of :data:`TIMING_STEPS` steps each, the median round): advi, ivon, ivon-opt's own step,
   the closed form (one antithetic pair) and with one draw; ratios to ivon's.

``--quick``: 300 training images, protocol a only, grids of 2 points, two ablations, one
seed, 10 epochs. The choices the numbers made are written under the table.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from bdlkit import infer, metrics, models
from bdlkit.bench.common import prepare_bench_out, warm_up, write_results
from bdlkit.data.images import load_mnist
from bdlkit.problems import BayesianModel

DESCRIPTION = ("the defaults of score_vi's closed form and ivon: grids, ablations of IVON's "
               "ingredients, test seeds (MNIST-1000 MLP, BayesDLL's kld 1e-3 and kld 1)")
PROTOCOLS = {"a": 1e-3, "b": 1.0}  # protocol -> kld
CLOSED = {"solver": "closed_form"}
#: row -> (method, fixed options, grid)
ROWS: dict[str, tuple[str, dict[str, Any], tuple[dict[str, Any], ...]]] = {
    "map": ("map", {}, tuple({"lr": lr} for lr in (1e-3, 3e-3, 1e-2))),
    "advi": ("advi", {}, tuple({"lr": lr, "init_std": s} for lr in (1e-3, 3e-3, 1e-2)
                               for s in (1e-3, 3e-3, 1e-2))),
    "ivon": ("ivon", {}, tuple({"lr": lr, "hess_init": h} for lr in (0.03, 0.1, 0.3)
                               for h in (0.3, 1.0, 3.0))),
    "closed_form": ("score_vi", CLOSED, tuple({"omega": w, "hess_init": h}
                                              for w in (0.03, 0.1, 0.3)
                                              for h in (0.3, 1.0, 3.0))),
}
#: label -> the closed form's options changed from its chosen point
ABLATIONS: dict[str, dict[str, Any]] = {
    "curvature_decay 0.99": {"curvature_decay": 0.99},
    "curvature_decay 0.9999": {"curvature_decay": 0.9999},
    "linear average": {"curvature_update": "linear"},
    "no momentum": {"momentum": 0.0},
    "constant ω": {"schedule": "constant"},
    "α = 0": {"alpha_max": 0.0},
    "one draw (Price)": {"num_samples": 1, "antithetic": False},
    "trust region 3σ": {"max_step": 3.0},
    "first estimate": {"hess_init": "estimate"},
    "before (all off)": {"hess_init": "estimate", "curvature_decay": 0.99, "momentum": 0.0,
                         "schedule": "constant"},
}
#: label -> ivon's options changed from its chosen point (its curvature average: the
#: paper's β2 = 0.99999 is for runs of 10⁵ steps and more)
IVON_ABLATIONS: dict[str, dict[str, Any]] = {
    "ivon β2 0.999": {"beta2": 0.999},
    "ivon β2 0.9999": {"beta2": 0.9999},
}
IVON_FORM = {"alpha_max": 0.0, "num_samples": 1, "antithetic": False}  # docs/ivon.md
EVAL_DRAWS = 16
TIMING_ROUNDS, TIMING_STEPS = 10, 20
MIN_GAIN = 0.002  # nats of validation NLL: the smallest gain that changes a default


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one run of the study covers (:func:`make_plan`; tests pass a tiny one)."""

    n: int
    epochs: int
    protocols: tuple[str, ...]
    grid_points: int | None  # the first k points of each grid (None: all)
    ablations: tuple[str, ...]
    seeds: int
    val_size: int = 2000
    timing_rounds: int = TIMING_ROUNDS
    ivon_ablations: tuple[str, ...] = tuple(IVON_ABLATIONS)


def make_plan(quick: bool) -> Plan:
    if quick:
        return Plan(300, 10, ("a",), 2, ("α = 0", "first estimate"), 1, val_size=1000,
                    timing_rounds=2, ivon_ablations=("ivon β2 0.999",))
    return Plan(1000, 100, tuple(PROTOCOLS), None, tuple(ABLATIONS), 3)


def fit_and_score(method: str, hyper: dict[str, Any], protocol: str, seed: int, plan: Plan,
                  split: str) -> dict[str, Any]:
    """One run on ``split`` ("val" or "test"); a failure is kept as the record's status."""
    ds = load_mnist(train_size=plan.n, seed=seed)
    x_eval, y_eval = ((ds.x_test[:plan.val_size], ds.y_test[:plan.val_size]) if split == "val"
                      else (ds.x_test[plan.val_size:], ds.y_test[plan.val_size:]))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = models.MLP(ds.input_shape, 10, hidden=(100,))
    problem = BayesianModel(net, "categorical", prior=1.0, num_data=plan.n,
                            kld=PROTOCOLS[protocol])
    record: dict[str, Any] = {"protocol": protocol, "seed": seed, "split": split,
                              "method": method, "hyper": hyper, "status": "ok"}
    try:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = infer(problem, method, data=ds.train(), epochs=plan.epochs, seed=seed,
                           batch_size=128, **hyper)
        record["train_s"] = time.perf_counter() - start
        record["s_per_step"] = record["train_s"] / result.state.step
        pred = result.predictive(x_eval, num_samples=EVAL_DRAWS)
        values = metrics.classification_metrics(pred.probs, y_eval, pred.log_probs)
        record.update(error=100 * (1 - values["accuracy"]), nll=values["nll"],
                      ece=values["ece"])
        logp = pred.log_probs.gather(1, y_eval[:, None]).squeeze(1)
        record["_nll_each"] = -logp.double()  # per image: the paired test of the ablations
        if result.algorithm.kind == "vi":
            std = result.algorithm.approximation(result.state).std
            record["sigma_median"] = float(torch.cat([s.reshape(-1) for s in
                                                      std.values()]).median())
    except Exception as err:  # noqa: BLE001 - a failing configuration keeps its record
        record["status"] = f"error: {type(err).__name__}: {str(err)[:200]}"
    return record


def chosen_point(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The grid point with the lowest mean over protocols of NLL / the protocol's best NLL
    (failed points excluded; None when every point failed)."""
    ok = [r for r in records if r["status"] == "ok"]
    if not ok:
        return None
    best = {p: min(r["nll"] for r in ok if r["protocol"] == p) for p in {r["protocol"] for r in ok}}
    score: dict[str, list[float]] = {}
    points: dict[str, dict[str, Any]] = {}
    for r in ok:
        key = repr(sorted(r["point"].items()))
        score.setdefault(key, []).append(r["nll"] / best[r["protocol"]])
        points[key] = r["point"]
    complete = {k: v for k, v in score.items() if len(v) == len(best)}
    key = min(complete or score, key=lambda k: sum(score[k]) / len(score[k]))
    return points[key]


def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True, plan: Plan | None = None) -> list[dict[str, Any]]:
    plan = plan or make_plan(quick)
    prepare_bench_out(out)
    warm_up()
    start = time.perf_counter()

    def go(label: str, method: str, hyper: dict[str, Any], protocol: str, s: int, split: str,
           stage: str, point: dict[str, Any] | None = None) -> dict[str, Any]:
        rec = {"stage": stage, "label": label, "point": point or {},
               **fit_and_score(method, hyper, protocol, s, plan, split)}
        if echo:
            print(f"[score-vi-study] {stage} {label} {protocol} {point or ''} seed {s}: "
                  f"{rec['status']} err {rec.get('error', float('nan')):.2f} "
                  f"nll {rec.get('nll', float('nan')):.4f}", file=sys.stderr, flush=True)
        return rec

    grids, chosen = [], {}
    for label, (method, fixed, grid) in ROWS.items():
        cell = [go(label, method, {**fixed, **point}, p, seed, "val", "grid", point)
                for point in grid[: plan.grid_points] for p in plan.protocols]
        grids += cell
        chosen[label] = chosen_point(cell) or grid[0]
    base = {**CLOSED, **chosen["closed_form"]}
    ablations = [go(name, "score_vi", {**base, **ABLATIONS[name]}, p, seed, "val", "ablation",
                    ABLATIONS[name]) for name in plan.ablations for p in plan.protocols]
    ablations += [go("chosen", "score_vi", base, p, seed, "val", "ablation")
                  for p in plan.protocols]
    ivon_base = chosen["ivon"]
    ablations += [go(name, "ivon", {**ivon_base, **IVON_ABLATIONS[name]}, p, seed, "val",
                     "ablation", IVON_ABLATIONS[name])
                  for name in plan.ivon_ablations for p in plan.protocols]
    ablations += [go("ivon chosen", "ivon", ivon_base, p, seed, "val", "ablation")
                  for p in plan.protocols]
    timing = time_steps(plan, plan.timing_rounds)
    finals = []
    for label in ("map", "advi", "ivon", "closed_form", "closed_form IVON form"):
        row = label.split()[0]
        method, fixed, _ = ROWS[row]
        hyper = {**fixed, **chosen[row], **(IVON_FORM if label != row else {})}
        finals += [go(label, method, hyper, p, s, "test", "test", chosen[row])
                   for p in plan.protocols for s in range(seed, seed + plan.seeds)]
    rows = summarize(finals)
    decisions = decide(ablations, plan)
    for record in (*grids, *ablations, *finals):
        record.pop("_nll_each", None)
    meta = {"plan": dataclasses.asdict(plan), "seed": seed, "chosen": chosen,
            "decisions": decisions, "timing": timing, "grids": grids, "ablations": ablations,
            "test": finals, "wall_s": time.perf_counter() - start}
    write_results(out, "score-vi-study", quick, command,
                  "the closed form's and ivon's defaults on MNIST", setup_text(plan), rows,
                  meta, floatfmt=".4g",
                  note=note_text(chosen, decisions, ablations, grids, timing))
    return rows


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean ± std over seeds per (protocol, label) of the test runs."""
    rows = []
    for key in dict.fromkeys((r["protocol"], r["label"]) for r in records):
        runs = [r for r in records if (r["protocol"], r["label"]) == key]
        ok = [r for r in runs if r["status"] == "ok"]
        row: dict[str, Any] = {"protocol": key[0], "row": key[1], "seeds": len(ok),
                               "chosen": ", ".join(f"{k}={v}" for k, v in runs[0]["point"].items()),
                               "status": "ok" if len(ok) == len(runs) else runs[0]["status"]}
        for metric in ("error", "nll", "ece", "sigma_median", "s_per_step"):
            values = torch.tensor([r[metric] for r in ok if metric in r], dtype=torch.float64)
            if len(values):
                row[metric] = float(values.mean())
                row[f"{metric}_std"] = float(values.std()) if len(values) > 1 else 0.0
        rows.append(row)
    return rows


def decide(ablations: list[dict[str, Any]], plan: Plan) -> dict[str, dict[str, Any]]:
    """Per ablation, its paired NLL difference to the chosen point in every protocol (mean
    and standard error over the validation images) and the decision: "change the default"
    when it is below −2 SE and −MIN_GAIN in every protocol, else "keep"."""
    base = {(r["protocol"], r["label"]): r for r in ablations
            if r["label"] in ("chosen", "ivon chosen")}
    out = {}
    for name in (*plan.ablations, *plan.ivon_ablations):
        diffs, better = {}, True
        reference = "ivon chosen" if name in IVON_ABLATIONS else "chosen"
        for r in (r for r in ablations if r["label"] == name):
            ref = base.get((r["protocol"], reference))
            if r["status"] != "ok" or ref is None or ref["status"] != "ok":
                better, diffs[r["protocol"]] = False, None
                continue
            d = r["_nll_each"] - ref["_nll_each"]
            mean, se = float(d.mean()), float(d.std() / len(d) ** 0.5)
            diffs[r["protocol"]] = {"mean": mean, "se": se}
            better = better and mean < -2 * se and mean < -MIN_GAIN
        out[name] = {"diff": diffs, "decision": "change the default" if better and diffs
                     else "keep"}
    return out


def time_steps(plan: Plan, rounds: int = TIMING_ROUNDS) -> list[dict[str, Any]]:
    """Seconds per step of the VI rows, interleaved round by round (module docstring)."""
    from bdlkit import algorithms
    from bdlkit.bench import peers

    ds = load_mnist(train_size=plan.n, seed=0)
    x, y = ds.train()
    batches = [(x[i:i + 128], y[i:i + 128]) for i in range(0, len(x) - 127, 128)] or [(x, y)]
    rows: dict[str, Any] = {}
    for label, method, hyper in (("advi", "advi", {}), ("ivon", "ivon", {}),
                                 ("closed_form", "score_vi", CLOSED),
                                 ("closed_form one draw", "score_vi",
                                  {**CLOSED, "num_samples": 1, "antithetic": False})):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            net = models.MLP(ds.input_shape, 10, hidden=(100,))
        problem = BayesianModel(net, "categorical", prior=1.0, num_data=plan.n, kld=1e-3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            alg = algorithms.get_method(method).build(problem, **hyper).for_run(10**6)
        rows[label] = [alg, alg.init(generator=torch.Generator().manual_seed(0))]
    if peers.missing("ivon_opt") is None:
        import ivon as ivon_opt
        from torch.nn import functional as F

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            net = models.MLP(ds.input_shape, 10, hidden=(100,))
        opt = ivon_opt.IVON(net.parameters(), lr=0.03, ess=plan.n / 1e-3, hess_init=3.0,
                            weight_decay=1e-3 / plan.n)

        def peer_step(state: Any, batch: Any) -> tuple[Any, dict]:
            with opt.sampled_params(train=True):
                opt.zero_grad()
                F.cross_entropy(net(batch[0]), batch[1]).backward()
            opt.step()
            return state, {}

        rows["ivon-opt"] = [type("Peer", (), {"step": staticmethod(peer_step)}), None]
    times: dict[str, list[float]] = {label: [] for label in rows}
    for r in range(rounds + 1):  # round 0 warms up
        for label, (alg, state) in rows.items():
            start = time.perf_counter()
            for k in range(TIMING_STEPS):
                state, _ = alg.step(state, batches[k % len(batches)])
            rows[label][1] = state
            if r:
                times[label].append((time.perf_counter() - start) / TIMING_STEPS)
    median = {label: float(torch.tensor(t).median()) for label, t in times.items()}
    return [{"row": label, "s_per_step": m, "vs_ivon": m / median["ivon"]}
            for label, m in median.items()]


def setup_text(plan: Plan) -> str:
    return (f"MNIST, MLP 784-100-10, {plan.n} training images, prior N(0, 1), batch 128, "
            f"{plan.epochs} epochs, {EVAL_DRAWS}-draw BMA; protocols "
            f"{', '.join(f'{p} (kld {PROTOCOLS[p]:g})' for p in plan.protocols)}; grids and "
            f"ablations on {plan.val_size} validation images (seed 0), test rows on the rest, "
            f"{plan.seeds} seed(s); one torch thread")


def note_text(chosen: dict[str, Any], decisions: dict[str, dict[str, Any]],
              ablations: list[dict[str, Any]], grids: list[dict[str, Any]],
              timing: list[dict[str, Any]]) -> str:
    lines = ["**Chosen points** (lowest mean relative validation NLL over the protocols): "
             + "; ".join(f"{k}: {', '.join(f'{a}={b}' for a, b in v.items())}"
                         for k, v in chosen.items()), "",
             "**Ablations** of the closed form at its chosen point (validation; err %, NLL per "
             "protocol; the decision rule in the module docstring):", "",
             "| ablation | " + " | ".join(f"{p} error | {p} nll | {p} Δnll ± 2 SE"
                                        for p in PROTOCOLS)
             + " | decision |", "|---|" + "---|---|---|" * len(PROTOCOLS) + "---|"]
    for name in [*decisions, "chosen", "ivon chosen"]:
        cells = []
        for p in PROTOCOLS:
            rec = next((r for r in ablations if r["label"] == name and r["protocol"] == p), None)
            diff = decisions.get(name, {}).get("diff", {}).get(p)
            delta = "" if diff is None else f"{diff['mean']:+.4f} ± {2 * diff['se']:.4f}"
            cells += (["", "", ""] if rec is None else
                      [f"{rec['error']:.2f}", f"{rec['nll']:.4f}", delta]
                      if rec["status"] == "ok" else [rec["status"][:60], "", ""])
        decision = decisions.get(name, {}).get("decision", "")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {decision} |")
    lines += ["", "**Time per step** (the rows interleaved, MNIST MLP, batch 128, protocol a; "
              "the median of the rounds):", "", "| row | ms per step | / ivon |", "|---|---|---|"]
    lines += [f"| {t['row']} | {1000 * t['s_per_step']:.2f} | {t['vs_ivon']:.2f} |"
              for t in timing]
    lines += ["", f"Grid runs: {len(grids)} (every one in results.json under `grids`)."]
    return "\n".join(lines)
