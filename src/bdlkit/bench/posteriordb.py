"""The ``posteriordb`` suite: every VI method on the shipped posteriordb posteriors.

For each posterior with reference draws (six of the seven shipped: ``wells_data`` has
none and is skipped) and each row of :data:`bdlkit.bench.vi_methods.SPECS`, every point of
the row's equal-size tuning grid runs on the first seed (``run_vi``: a budget of score
evaluations, a wall-clock limit per run); the point with the lowest final **negative
ELBO** (no reference used) is repeated on the other seeds and reported, medians over
seeds. Every method starts from the same q₀: by default the diagonal Laplace approximation
at the mode (:mod:`bdlkit.bench.laplace_start`; its own errors are the row ``start``),
or N(0, I) with ``start="zero"``.

Everything is measured on the **unconstrained** space R^d, where the Gaussian families
live, against the mean m and std s of the unconstrained reference draws:

* ``max_mean_error_sd`` = maxᵢ |μᵢ − mᵢ| / sᵢ (posterior-mean error in reference stds);
* ``std_ratio_min`` / ``std_ratio_max`` = min / max over i of σᵢ / sᵢ;
* ``neg_elbo`` = E_q[log q − log π] by Monte Carlo over :data:`ELBO_DRAWS` draws of q made
  from one fixed set of standard normals (common random numbers across grid points);
  ``nan`` if a full covariance has no Cholesky factor. For the flow rows (``score_vi_flow``,
  ``advi_flow``) the draws are the flow's own, from one fixed seed, and the mean and std
  are Monte Carlo (4 096 draws), so the flow rows' mean errors and std ratios, unlike the
  diagonal rows' exact ones, carry Monte Carlo error: about 0.016 reference stds per
  coordinate in the mean and 1.1 % in the std, hence up to ~0.04 sd and ~3 % on the worst
  of 100 coordinates. Read small differences from the diagonal rows with that in mind.

:func:`evaluate` runs the same measurement on any user :class:`~bdlkit.problems.Target`
with reference draws, so a new posterior needs no change to the suite; :func:`run` also
accepts Targets in ``posteriors``.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bdlkit.bench import vi_methods
from bdlkit.bench.common import machine_info, prepare_bench_out
from bdlkit.bench.laplace_start import LaplaceStart, laplace_start, standardized
from bdlkit.bench.vi_runs import FAILED, Measure, run_vi, summarize_status, tune_then_repeat
from bdlkit.families import DiagGaussian, FullGaussian
from bdlkit.problems import Target

DESCRIPTION = ("every VI method on the six posteriordb posteriors with reference draws: "
               "mean error in reference stds, std ratios, runtime, status")

INIT_STD = 1.0  # σ₀ of q₀ = N(0, σ₀² I) on the standardized space (× the Laplace scales)
STARTS = ("laplace", "zero")
ELBO_DRAWS = 2000
ELBO_SEED = 20240
TOLERANCE = 0.2  # "within 0.2 reference stds"
CRITERION = "neg_elbo"
THREADS = 1  # tiny problems: intra-op threads only add contention (5-8x slower under load)
#: quick → budget (score evaluations), per-run wall-clock limit (s), seeds, curve points
SETTINGS: dict[bool, dict[str, Any]] = {
    True: {"budget": 8000, "time_limit": 20.0, "num_seeds": 1, "num_points": 10},
    False: {"budget": 20000, "time_limit": 60.0, "num_seeds": 3, "num_points": 20},
}
DEFAULT_ROWS = tuple(k for k in vi_methods.SPECS if k != "advi_flow_stl")
SKIP = {"wells_data-wells_dist": "no reference draws in posteriordb"}
METRICS = ("max_mean_error_sd", "std_ratio_min", "std_ratio_max", "neg_elbo")


def moment_errors(mean: Tensor, cov: Tensor, ref_mean: Tensor, ref_std: Tensor) -> dict:
    """Worst mean error in reference stds and the range of σᵢ/sᵢ; ``cov`` (d, d) or (d,)."""
    var = cov.diagonal() if cov.dim() == 2 else cov
    err = (mean.double() - ref_mean).abs() / ref_std
    ratio = var.double().clamp_min(0).sqrt() / ref_std
    return {"max_mean_error_sd": float(err.max()), "std_ratio_min": float(ratio.min()),
            "std_ratio_max": float(ratio.max())}


def neg_elbo(target: Target, mean: Tensor, cov: Tensor, eps: Tensor) -> float:
    """E_q[log q − log π] over the draws ``mean + L eps`` (L: Cholesky of ``cov``)."""
    if cov.dim() == 2:
        chol, info = torch.linalg.cholesky_ex(cov.double())
        if int(info) != 0:
            return math.nan
        log_det, x = chol.diagonal().log().sum(), mean.double() + eps @ chol.T
    else:
        std = cov.double().sqrt()
        log_det, x = std.log().sum(), mean.double() + eps * std
    log_q = -0.5 * (eps**2).sum(1) - log_det - 0.5 * eps.shape[1] * math.log(2 * math.pi)
    log_p = target.log_prob(x.to(mean.dtype)).double()
    return float((log_q - log_p).mean())


def mc_neg_elbo(target: Target, approx: Any) -> float:
    """E_q[log q − log π] from ``ELBO_DRAWS`` draws of a non-Gaussian q (a flow), made
    from one fixed seed (common random numbers across grid points)."""
    draws = approx.sample(ELBO_DRAWS, torch.Generator().manual_seed(ELBO_SEED))
    return float((approx.log_prob(draws).double() - target.log_prob(draws).double()).mean())


def make_measure(target: Target, ref_mean: Tensor, ref_std: Tensor, eps: Tensor,
                 start: LaplaceStart | None = None) -> tuple[Measure, dict[str, Any]]:
    """The ``measure`` of ``run_vi``, and a dict that keeps the last (final) mean and std
    (mapped back to θ = shift + scale·z when the run is on a ``start``-standardized space)."""
    last: dict[str, Any] = {}
    shift, scale = (0.0, 1.0) if start is None else (start.shift.double(), start.scale.double())

    def measure(mean: Tensor, cov: Tensor, approx: Any = None) -> dict[str, float]:
        var = cov.diagonal() if cov.dim() == 2 else cov
        last.update(mean=(shift + scale * mean.double()).tolist(),
                    std=(scale * var.double().clamp_min(0).sqrt()).tolist())
        gaussian = approx is None or isinstance(approx, (DiagGaussian, FullGaussian))
        elbo = neg_elbo(target, mean, cov, eps) if gaussian else mc_neg_elbo(target, approx)
        return {**moment_errors(mean, cov, ref_mean, ref_std), CRITERION: elbo}

    return measure, last


def evaluate(target: Target, reference_draws: Tensor | None = None, *,
             methods: Sequence[str] | None = None, budget: int = SETTINGS[True]["budget"],
             seeds: Sequence[int] = (0,), init_std: float = INIT_STD,
             time_limit: float = SETTINGS[True]["time_limit"],
             num_points: int = SETTINGS[True]["num_points"], echo: bool = False,
             name: str | None = None, threads: int | None = THREADS,
             start: str = "laplace") -> list[dict[str, Any]]:
    """One record per method row (default: every row of ``vi_methods.SPECS``) on ``target``.

    ``start="laplace"`` (default) runs every method on the target standardized by its
    diagonal Laplace approximation (:mod:`bdlkit.bench.laplace_start`), i.e. from
    q₀ = N(θ̂, diag(h)⁻¹·σ₀²), and adds a record ``method="start"`` with the errors of q₀
    itself; ``start="zero"`` runs from q₀ = N(0, σ₀² I) on the target as given.

    ``reference_draws`` ``(n, d)`` on the space of ``target`` default to
    ``target.reference.draws``. A record holds the selected grid point (``hyper``), its
    metrics and ``seconds`` (medians over seeds), ``status``, ``grid`` (a summary per grid
    point), ``runs`` (the selected point's runs: curve, final mean and std) and
    ``ref_neg_elbo``, the negative ELBO of N(m, diag(s²)) fitted to the reference draws (a
    yardstick: a row far above it has not converged). Runs use
    ``threads`` torch threads (``None``: leave the setting alone), restored afterwards.
    """
    draws = target.reference.draws if reference_draws is None else reference_draws
    if draws is None:
        raise ValueError(f"target {target.name!r} has no reference draws: pass "
                         "reference_draws (n, d) or set target.reference.draws")
    draws = torch.as_tensor(draws).double()
    if draws.dim() != 2 or draws.shape[1] != target.dim or draws.shape[0] < 2:
        raise ValueError(f"reference_draws must have shape (n >= 2, {target.dim}), "
                         f"got {tuple(draws.shape)}")
    if start not in STARTS:
        raise ValueError(f"start must be one of {STARTS}, got {start!r}")
    if not bool((draws.std(0) > 0).all()):
        raise ValueError("reference_draws have a coordinate with zero spread")
    gen = torch.Generator().manual_seed(ELBO_SEED)
    eps = torch.randn(ELBO_DRAWS, target.dim, generator=gen, dtype=torch.float64)
    name = name or target.name
    records: list[dict[str, Any]] = []
    prev = torch.get_num_threads()
    try:
        torch.set_num_threads(threads or prev)
        ls, work = None, target
        if start == "laplace":
            t0 = time.perf_counter()
            ls = laplace_start(target)
            work = standardized(target, ls)
            draws = ls.to_z(draws.to(ls.shift.dtype)).double()
            records.append(_start_record(name, ls, draws, eps, work, time.perf_counter() - t0))
        ref_mean, ref_std = draws.mean(0), draws.std(0)
        with torch.no_grad():
            ref_elbo = neg_elbo(work, ref_mean.to(work.dtype), ref_std**2, eps)
        for label in methods or DEFAULT_ROWS:
            records.append(_evaluate_row(work, label, name, ref_mean, ref_std, eps, budget,
                                         seeds, init_std, time_limit, num_points, ls))
            records[-1]["ref_neg_elbo"] = ref_elbo
            if echo:
                print(_progress(records[-1]), flush=True)
    finally:
        torch.set_num_threads(prev)
    return records


def _start_record(name: str, ls: LaplaceStart, draws_z: Tensor, eps: Tensor, work: Target,
                  seconds: float) -> dict[str, Any]:
    """The record of q₀ itself (errors measured on the standardized space, where q₀ is
    N(0, I): identical to the errors of N(θ̂, diag s²) on the original space)."""
    zeros = torch.zeros(work.dim, dtype=work.dtype)
    values = moment_errors(zeros, torch.ones_like(zeros), draws_z.mean(0), draws_z.std(0))
    with torch.no_grad():
        elbo = neg_elbo(work, zeros, torch.ones_like(zeros), eps)
    return {"posterior": name, "method": "start", "hyper": "diagonal Laplace", **values,
            "neg_elbo": elbo, "seconds": seconds, "status": "ok", "message": ls.message,
            "grid": [], "runs": [], "mean": ls.shift.tolist(), "std": ls.scale.tolist()}


def _evaluate_row(target: Target, label: str, name: str, ref_mean: Tensor, ref_std: Tensor,
                  eps: Tensor, budget: int, seeds: Sequence[int], init_std: float,
                  time_limit: float, num_points: int,
                  start: LaplaceStart | None = None) -> dict[str, Any]:
    """The whole grid of row ``label`` on the first seed, then the selected grid point
    (lowest negative ELBO) on the other seeds; the record of the selected point."""
    init_mean = torch.zeros(target.dim, dtype=target.dtype)
    spec = vi_methods.SPECS[label]

    def run_one(hyper: dict[str, Any], seed: int) -> dict[str, Any]:
        measure, last = make_measure(target, ref_mean, ref_std, eps, start)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = run_vi(target, spec.method, hyper, measure=measure, budget=budget,
                       init_mean=init_mean, time_limit=time_limit, seed=seed,
                       num_points=num_points)
        r.update(last, warnings=len(caught))
        if caught and not r["message"]:
            r["message"] = str(caught[-1].message).splitlines()[0][:300]
        return r

    runs = tune_then_repeat(vi_methods.configs(label, init_std, budget), seeds, run_one,
                            CRITERION)
    return _record(name, label, runs)


def _record(posterior: str, label: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The selected point's record (medians over its seeds) with a summary of the grid."""
    sel = [r for r in runs if r["selected"]]
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault(r["hyper"], []).append(r)
    grid = [{"hyper": h, "status": _status(g), "seconds": _median(g, "seconds"),
             **{k: _median(g, k) for k in METRICS}, "message": _message(g)}
            for h, g in groups.items()]
    rec: dict[str, Any] = {"posterior": posterior, "method": label}
    if not sel:
        failed = Counter(r["status"] for r in runs if r["status"] in FAILED)
        rec.update(hyper=None, **dict.fromkeys(METRICS, math.nan),
                   seconds=_median(runs, "seconds"), status=failed.most_common(1)[0][0],
                   message=_message(runs), grid=grid, runs=[])
        return rec
    rec.update(hyper=sel[0]["hyper"], **{k: _median(sel, k) for k in METRICS},
               seconds=_median(sel, "seconds"), status=_status(sel), message=_message(sel),
               grid=grid, runs=[{k: v for k, v in r.items() if k != "traceback"} for r in sel])
    return rec


def _median(runs: list[dict[str, Any]], key: str) -> float:
    values = [r[key] if key == "seconds" else r["final"].get(key, math.nan) for r in runs]
    values = [v for v in values if math.isfinite(v)]
    return statistics.median(values) if values else math.nan


def _status(runs: list[dict[str, Any]]) -> str:
    statuses = {r["status"] for r in runs}
    return statuses.pop() if len(statuses) == 1 else summarize_status(runs)


def _message(runs: list[dict[str, Any]]) -> str:
    return next((r["message"] for r in runs if r["message"]), "")


def _progress(rec: dict[str, Any]) -> str:
    return (f"{rec['posterior']:<40} {rec['method']:<12} err {rec['max_mean_error_sd']:8.3f} "
            f"σ/s [{rec['std_ratio_min']:.2f}, {rec['std_ratio_max']:.2f}] "
            f"{rec['seconds']:6.1f} s  {rec['status']}  {rec['hyper'] or ''}")


def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True, posteriors: Sequence[str | Target] | None = None,
        methods: Sequence[str] | None = None,
        settings: dict[str, Any] | None = None, start: str = "laplace",
        ) -> list[dict[str, Any]]:
    """The suite: ``DIR/results.json`` (``records``, one per posterior × method) and
    ``DIR/report.md``. ``posteriors`` are posteriordb names or Targets with reference
    draws (default: all shipped); ``settings`` override :data:`SETTINGS`."""
    out = prepare_bench_out(Path(out))
    cfg = {**SETTINGS[quick], **(settings or {})}
    seeds = tuple(seed + i for i in range(cfg["num_seeds"]))
    command = command or f"bdlkit bench posteriordb{' --quick' if quick else ''} --out {out}"
    if posteriors is None:
        from bdlkit.data.posteriordb import POSTERIORS

        posteriors = POSTERIORS
    records: list[dict[str, Any]] = []
    info: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    began = time.perf_counter()
    for p in posteriors:
        if isinstance(p, str) and p in SKIP:
            skipped[p] = SKIP[p]
            continue
        if isinstance(p, str):
            from bdlkit.data.posteriordb import load_posterior

            p = load_posterior(p)
        if p.reference.draws is None:
            skipped[p.name] = "no reference draws"
            continue
        info[p.name] = {"dim": p.dim, "reference_draws": int(p.reference.draws.shape[0])}
        records += evaluate(p, methods=methods, budget=cfg["budget"], seeds=seeds,
                            init_std=INIT_STD, time_limit=cfg["time_limit"],
                            num_points=cfg["num_points"], echo=echo, start=start)
    elapsed = time.perf_counter() - began
    meta = {"suite": "posteriordb", "command": command, "quick": quick, "seed": seed,
            "settings": {**cfg, "seeds": list(seeds), "init_std": INIT_STD, "threads": THREADS,
                         "start": start,
                         "elbo_draws": ELBO_DRAWS, "criterion": CRITERION,
                         "tolerance_sd": TOLERANCE, "space": "unconstrained"},
            "wall_seconds": elapsed, "machine": machine_info(), "posteriors": info,
            "skipped": skipped, "summary": summary(records)}
    from bdlkit.core.serialization import atomic_write_bytes, save_json

    save_json(out / "results.json", {**meta, "records": records})
    text = report(records, meta).encode()
    atomic_write_bytes(out / "report.md", text)
    atomic_write_bytes(out / "results.md", text)  # what `bdlkit bench` prints
    return records


def summary(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per method: on how many posteriors every mean is within ``TOLERANCE`` ref stds."""
    out: dict[str, dict[str, Any]] = {}
    for rec in records:
        s = out.setdefault(rec["method"], {"within": 0, "posteriors": 0, "failed": []})
        s["posteriors"] += 1
        if rec["max_mean_error_sd"] <= TOLERANCE:  # nan (failed) compares False
            s["within"] += 1
        if rec["status"] != "ok":
            s["failed"].append(f"{rec['posterior']}: {rec['status']}")
    return out


def report(records: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """``report.md``: settings, the posterior × method table, the summary and notes."""
    from bdlkit.runs.figures import markdown_table

    cfg, summ = meta["settings"], meta["summary"]
    rows = [{"posterior": r["posterior"].split("-")[0], "method": r["method"],
             "max mean err (ref sd)": r["max_mean_error_sd"],
             "σ/s range": (f"{r['std_ratio_min']:.2f}–{r['std_ratio_max']:.2f}"
                           if math.isfinite(r["std_ratio_min"]) else ""),
             "neg ELBO": r["neg_elbo"], "ref neg ELBO": r.get("ref_neg_elbo"),
             "seconds": r["seconds"], "status": r["status"], "selected": _short(r["hyper"])}
            for r in records]
    sv = summ.get("score_vi")
    notes = [
        "Measured on the unconstrained space R^d (where the Gaussian families live) against "
        "the mean m and std s of the unconstrained reference draws.",
        f"Per row, the grid point with the lowest final negative ELBO on the first seed "
        f"({cfg['elbo_draws']} common draws of q) is selected, never by the reference. "
        "'ref neg ELBO' is that of N(m, diag(s²)) fitted to the reference draws: a row far "
        "above it has not converged within the budget (an optimisation error); being below "
        "it proves nothing on strongly correlated posteriors, where that fit is poor.",
        "Mean-field rows (score_vi, advi, fisher_vi, *_diag) cannot represent correlations: "
        "on correlated posteriors the KL(q‖p) optimum underestimates marginal stds (ratios "
        "< 1), and its first-order optimisation from q₀ is slow on ill-conditioned ones.",
        "score_vi (gradient solver, K = 1) has the iterates of advi (docs/score_vi.md, "
        "section 1): equal rows are expected.",
        "Why the Laplace start (bdlkit.bench.laplace_start, docs/gotchas.md): from "
        "q₀ = N(0, I) (`evaluate(..., start='zero')`) the Adam-based rows stall on the "
        "ill-conditioned posteriors, whose unconstrained scales run from 1e-3 to 10 with "
        "modes tens of units away. The `start` row shows what q₀ alone gets; the VI rows "
        "show what the methods add to it.",
    ]
    if meta["skipped"]:
        notes.append("Skipped: " + "; ".join(f"{k} ({v})" for k, v in meta["skipped"].items()))
    for m, s in summ.items():
        msgs = sorted({r["message"] for r in records if r["method"] == m
                       and r["status"] != "ok" and r["message"]})
        if s["failed"]:
            notes.append(f"{m} not ok on {', '.join(s['failed'])}"
                         + (f"; e.g. {msgs[0][:160]}" if msgs else ""))
    return "\n".join([
        "# posteriordb: VI methods against reference posteriors", "",
        f"Command: `{meta['command']}`  ",
        f"Budget {cfg['budget']} score evaluations per run, limit {cfg['time_limit']:g} s per "
        f"run, seeds {cfg['seeds']}, {_start_text(cfg)}, the whole grid on the first seed "
        f"and the selected point on the others, torch threads {cfg['threads']}; suite wall time "
        f"{meta['wall_seconds']:.0f} s; machine: {meta['machine']}", "",
        markdown_table(rows, floatfmt=".3f"),
        *([f"**score_vi: {sv['within']} of {sv['posteriors']} posteriors within {TOLERANCE} "
           "reference stds**", ""] if sv else []),
        *(f"- {m}: {s['within']} of {s['posteriors']} posteriors within {TOLERANCE} "
          "reference stds" for m, s in summ.items()),
        "", "## Notes", "", *(f"- {n}" for n in notes), ""])


def _start_text(cfg: dict[str, Any]) -> str:
    if cfg.get("start", "zero") == "laplace":
        return (f"every method from q₀ = N(θ̂, {cfg['init_std']:g}²·diag(h)⁻¹), the diagonal "
                "Laplace approximation at the mode (row `start`)")
    return f"every method from q₀ = N(0, {cfg['init_std']:g}² I)"


def _short(hyper: str | None) -> str:
    """The grid setting of a ``describe``d hyper string, without the fixed settings."""
    keep = ("lr=", "omega=", "num_samples=", "lam_scale=")
    return ", ".join(p for p in (hyper or "").split(", ") if p.startswith(keep))


__all__ = ["DESCRIPTION", "SETTINGS", "evaluate", "make_measure", "moment_errors",
           "neg_elbo", "report", "run", "summary"]
