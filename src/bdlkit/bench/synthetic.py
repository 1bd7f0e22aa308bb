"""The ``synthetic`` suite: score-based VI against ADVI, GSM and BaM on targets with known
answers (``docs/protocols.md``): ``bdlkit bench synthetic [--quick] --out DIR``.

Settings (each a target family × dimension; the target's mean is a seeded N(0, I) draw and
every method starts from q₀ = N(0, σ₀² I)):

* ``well``: Gaussian, eigenvalues of Σ log-spaced in [1, 10] (condition number 10), σ₀ = 1.
* ``ill``: Gaussian, condition number 10³, σ₀ = 1.
* ``tiny_init``: the ``well`` target started from σ₀² = 1e-4 (tiny initial eigenvalues).
* ``mixture2`` / ``mixture5``: equal mixtures of 2 or 5 unit Gaussians on a circle of
  radius 3 (model mismatch: no Gaussian is exact).

Dimensions: quick d ∈ {10, 100, 1000} (mixtures d = 10); full adds d = 10⁴ for ``well``
and ``ill`` (there the rotation of Σ is block-diagonal with blocks of 100, so the score
costs O(100 d)) and d = 100 for the mixtures. Rows and their equal-size tuning grids:
:mod:`bdlkit.bench.vi_methods`. Every run gets the same budget of score evaluations and a
wall-clock limit (:mod:`bdlkit.bench.vi_runs`); the whole grid runs on the first seed and
the selected point (lowest final KL) on the others. Settings run in order of dimension, so
a full-covariance row whose single step at a larger d is predicted (∝ d³ from its mean
step time at the largest d measured) to exceed the limit is skipped and recorded as
``timeout`` with the prediction.
Only the full-covariance rows from d = 1000 up use every torch thread (their d × d
factorisations parallelise); the rest run on one (O(d) updates and one matrix-vector
product per draw, which two threads only slow down, badly so on a busy machine).

Measured along each run: KL(q‖p) (closed form for Gaussians; Monte Carlo with 2 000
draws for mixtures), the **excess KL** over the best member of the method's family
(Gaussian targets: 0 for full covariance, ½[log det Σ + Σᵢ log Λᵢᵢ] for mean-field), the
largest mean error in target stds, and the largest relative error of the marginal stds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bdlkit.bench import synthetic_modes, synthetic_modes_report, synthetic_report
from bdlkit.bench.common import machine_info, prepare_bench_out
from bdlkit.bench.vi_methods import FULL_COVARIANCE, SPECS, configs
from bdlkit.bench.vi_runs import describe, run_vi, tune_then_repeat
from bdlkit.core.serialization import atomic_write_bytes
from bdlkit.data import synthetic

DESCRIPTION = ("score_vi vs ADVI, GSM, BaM on Gaussian/mixture targets: KL vs score evals; "
               "flows on multimodal targets: the mode-collapse verdict")
ROWS = ("score_vi", "score_vi_cf", "advi", "gsm_full", "gsm_diag", "bam_full", "bam_lowrank",
        "bam_diag")
ALL_ROWS = tuple(dict.fromkeys((*ROWS, *synthetic_modes.ROWS)))  # + the multimodal part's
F64 = torch.float64
BLOCK = 100  # rotation block size of the Gaussian targets above 1 000 dimensions
MULTI_THREAD_MIN_DIM = 1000  # full-covariance rows at and above: d × d factorisations


@dataclass(frozen=True)
class Setting:
    group: str  # well | ill | tiny_init | mixture2 | mixture5
    dim: int
    condition: float = 10.0
    components: int = 0
    init_std: float = 1.0

    @property
    def name(self) -> str:
        return f"{self.group}-d{self.dim}"


@dataclass(frozen=True)
class Plan:
    """How much each run gets: the score-evaluation budget, seconds, seeds, curve points."""

    budget: int
    time_limit: float
    seeds: tuple[int, ...]
    num_points: int = 16
    memory_limit_gb: float = 12.0


def settings(quick: bool) -> list[Setting]:
    dims = (10, 100, 1000) if quick else (10, 100, 1000, 10_000)
    out = [Setting("well", d) for d in dims] + [Setting("ill", d, 1e3) for d in dims]
    out += [Setting("tiny_init", d, init_std=1e-2) for d in (10, 100, 1000)]
    for k in (2, 5):
        out += [Setting(f"mixture{k}", d, components=k) for d in ((10,) if quick else (10, 100))]
    return out


def plan(quick: bool, seed: int) -> Plan:
    if quick:
        return Plan(budget=2_000, time_limit=6.0, seeds=(seed,), num_points=10)
    return Plan(budget=10_000, time_limit=30.0, seeds=(seed, seed + 1, seed + 2))


def make_target(setting: Setting, seed: int) -> synthetic.SyntheticTarget:
    g = torch.Generator().manual_seed(10_000 + seed)
    if setting.components:
        return synthetic.gaussian_mixture(setting.dim, setting.components, seed=seed,
                                          num_draws=2_000)
    mean = torch.randn(setting.dim, generator=g, dtype=F64)
    block = BLOCK if setting.dim > 1000 else None
    return synthetic.gaussian(setting.dim, setting.condition, mean=mean, seed=seed,
                              num_draws=2, block_size=block)


def gaussian_kl(mean: Tensor, cov: Tensor, target_mean: Tensor, precision: Tensor,
                logdet_p: Tensor) -> float:
    """KL(N(mean, cov) ‖ N(m, Λ⁻¹)) = ½[tr(ΛΣ_q) + δᵀΛδ − d + log det Σ_p − log det Σ_q];
    ``cov`` (d, d) or variances (d,); NaN when Σ_q is not positive definite."""
    diff = mean - target_mean
    if cov.ndim == 1:
        if not bool((cov > 0).all()):
            return math.nan
        trace, logdet_q = (precision.diagonal() * cov).sum(), cov.log().sum()
    else:
        chol, info = torch.linalg.cholesky_ex(cov)
        if int(info) != 0:
            return math.nan
        trace, logdet_q = (precision * cov).sum(), 2 * chol.diagonal().log().sum()
    quad = diff @ (precision @ diff)
    return float(0.5 * (trace + quad - len(mean) + logdet_p - logdet_q))


def make_measure(target: synthetic.SyntheticTarget, label: str
                 ) -> Callable[[Tensor, Tensor], dict[str, float]]:
    """The per-point measurements of row ``label`` on ``target`` (see the module docstring)."""
    ref_mean, ref_std = target.reference.mean, target.reference.std
    full = label in FULL_COVARIANCE

    def errors(mean: Tensor, cov: Tensor) -> dict[str, float]:
        std = (cov.diagonal() if cov.ndim == 2 else cov).clamp_min(0).sqrt()
        return {"mean_err_sd": float(((mean - ref_mean).abs() / ref_std).max()),
                "std_rel_err": float((std / ref_std - 1).abs().max())}

    if target.precision is not None:
        prec = target.precision
        logdet_p = target.params["eigenvalues"].log().sum()
        best = 0.0 if full else float(0.5 * (logdet_p + prec.diagonal().log().sum()))

        def measure(mean: Tensor, cov: Tensor, approx: Any = None) -> dict[str, float]:
            kl = gaussian_kl(mean, cov, ref_mean, prec, logdet_p)
            return {"kl": kl, "excess_kl": kl - best, **errors(mean, cov)}
        return measure

    eps = torch.randn(2_000, target.dim, generator=torch.Generator().manual_seed(7), dtype=F64)

    def measure_mc(mean: Tensor, cov: Tensor, approx: Any = None) -> dict[str, float]:
        if cov.ndim == 1:
            if not bool((cov > 0).all()):
                return {"kl": math.nan, **errors(mean, cov)}
            theta, log_q = mean + eps * cov.sqrt(), -0.5 * cov.log().sum()
        else:
            chol, info = torch.linalg.cholesky_ex(cov)
            if int(info) != 0:
                return {"kl": math.nan, **errors(mean, cov)}
            theta, log_q = mean + eps @ chol.T, -chol.diagonal().log().sum()
        log_q = log_q - 0.5 * (eps * eps).sum(-1) - 0.5 * target.dim * math.log(2 * math.pi)
        kl = float((log_q - target.log_prob(theta)).mean())
        return {"kl": kl, **errors(mean, cov)}
    return measure_mc


class StepTimes:
    """Seconds per step of each full-covariance row at the largest d measured so far, to
    skip a run of which one step (predicted from the mean step time) would already exceed
    the time limit (cost ∝ d³: the Cholesky factorisation of GSM, the eigendecomposition of
    BaM)."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[int, float]] = {}

    def record(self, label: str, dim: int, rec: dict[str, Any]) -> None:
        if label in FULL_COVARIANCE and rec["steps"] > 0:
            if dim >= self.seen.get(label, (0, 0.0))[0]:
                self.seen[label] = (dim, rec["seconds"] / rec["steps"])

    def too_slow(self, label: str, dim: int, limit: float) -> str | None:
        if label not in self.seen:
            return None
        d0, t0 = self.seen[label]
        predicted = t0 * (dim / d0) ** 3
        if dim > d0 and predicted > limit:
            return (f"skipped: one step predicted to take {predicted:.0f} s > {limit:g} s "
                    f"({t0 * 1e3:.1f} ms per step measured at d={d0}, scaled by (d/{d0})³)")
        return None


def run_setting(setting: Setting, p: Plan, rows: tuple[str, ...], times: StepTimes,
                echo: bool) -> list[dict[str, Any]]:
    """Every row on one setting, by :func:`~bdlkit.bench.vi_runs.tune_then_repeat`: the whole
    grid on the first seed, the selected point (lowest final KL) on the others."""
    records: list[dict[str, Any]] = []
    targets = {seed: make_target(setting, seed) for seed in p.seeds}
    threads = torch.get_num_threads()

    def run_one(label: str) -> Callable[[dict[str, Any], int], dict[str, Any]]:
        def go(hyper: dict[str, Any], seed: int) -> dict[str, Any]:
            rec = _one_run(targets[seed], setting, label, hyper, seed, p, times)
            if echo:
                f = rec["final"]
                print(f"  {setting.name:16s} {label:12s} seed {seed} {rec['hyper'][:40]:40s} "
                      f"{rec['status']:17s} KL {f.get('kl', math.nan):.4g}  "
                      f"{rec['seconds']:.1f}s", flush=True)
            return rec
        return go

    try:
        for label in rows:
            multi = label in FULL_COVARIANCE and setting.dim >= MULTI_THREAD_MIN_DIM
            torch.set_num_threads(threads if multi else 1)
            records += tune_then_repeat(configs(label, setting.init_std, p.budget), p.seeds,
                                        run_one(label), "kl")
    finally:
        torch.set_num_threads(threads)
    return records


def _one_run(target: synthetic.SyntheticTarget, setting: Setting, label: str,
             hyper: dict[str, Any], seed: int, p: Plan, times: StepTimes) -> dict[str, Any]:
    skip = times.too_slow(label, setting.dim, p.time_limit)
    if skip:
        rec = {"method": SPECS[label].method, "hyper": describe(hyper), "seed": seed,
               "status": "timeout", "message": skip, "steps": 0, "seconds": 0.0,
               "score_evals": 0, "curve": [], "final": {}}
    else:
        num_points = p.num_points if setting.dim <= 1000 else 4  # a d×d Cholesky per point
        rec = run_vi(target, SPECS[label].method, hyper, measure=make_measure(target, label),
                     budget=p.budget, init_mean=torch.zeros(setting.dim, dtype=F64),
                     time_limit=p.time_limit, seed=seed, num_points=num_points,
                     memory_limit_gb=p.memory_limit_gb)
        times.record(label, setting.dim, rec)
    rec.update(setting=setting.name, group=setting.group, dim=setting.dim, row=label)
    return rec


def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True, rows: tuple[str, ...] = ALL_ROWS,
        only: Callable[[Setting], bool] | None = None, plan_override: Plan | None = None,
        reuse: Path | None = None, only_settings: tuple[str, ...] = ()
        ) -> list[dict[str, Any]]:
    """Run the suite into ``out``; returns the summary rows (one per setting × method).

    ``reuse``: a folder with an earlier ``results.json`` of the same plan. Only ``rows`` on
    ``only_settings`` (default: every setting) are run; every other record is taken from
    it, with the command that made it (kept in the new results under ``reused``). The
    multimodal part (:mod:`bdlkit.bench.synthetic_modes`: its rows and settings) follows
    the same rules with ``modes.json``.
    """
    p = plan_override or plan(quick, seed)
    mode_rows = tuple(r for r in rows if r in synthetic_modes.ROWS)
    rows = tuple(r for r in rows if r in ROWS)
    chosen = [s for s in settings(quick) if only is None or only(s)]
    rerun = [s for s in chosen if not only_settings or s.name in only_settings]
    mode_names = [s.name for s in synthetic_modes.settings(quick)]
    unknown = sorted(set(only_settings) - {s.name for s in chosen} - set(mode_names))
    if unknown:
        raise ValueError(f"unknown settings {unknown}; valid: "
                         f"{[s.name for s in chosen] + mode_names}")
    reused, provenance = (_reused_records(Path(reuse), p, chosen, rows, {s.name for s in rerun})
                          if reuse is not None else ([], {}))
    if only_settings and not set(only_settings) & set(mode_names):
        mode_rows = ()  # only Gaussian settings asked for: the multimodal part is reused
    modes = (None if plan_override is not None and not mode_rows else synthetic_modes.run(
        quick, p.seeds, mode_rows, echo, only=tuple(only_settings), reuse=reuse,
        evals=None if plan_override is None else p.budget))
    out = prepare_bench_out(Path(out))
    command = command or f"bdlkit bench synthetic{' --quick' if quick else ''} --out {out}"
    start, records, times = time.perf_counter(), [], StepTimes()
    for setting in sorted(rerun if rows else [], key=lambda s: s.dim):  # small d first
        if echo:
            print(f"[synthetic] {setting.name}", flush=True)
        records += run_setting(setting, p, rows, times, echo)
    order = {label: i for i, label in enumerate(ROWS)}
    records = sorted(records + reused,
                     key=lambda r: (r["dim"], order.get(r["row"], len(order))))
    all_rows = tuple(dict.fromkeys((*rows, *(r["row"] for r in reused))))
    meta = {"suite": "synthetic", "command": command, "quick": quick, "seed": seed,
            "plan": p.__dict__ | {"seeds": list(p.seeds)}, "rows": list(all_rows),
            "settings": [s.__dict__ | {"name": s.name} for s in chosen],
            "grids": {k: [str(g) for g in SPECS[k].grid] for k in all_rows},
            "wall_seconds": time.perf_counter() - start, "machine": machine_info()}
    if reused:
        meta["reused"] = provenance
    summary = synthetic_report.write(out, records, meta)
    if modes is not None:  # the multimodal part's section closes both files
        section = synthetic_modes_report.write(out, modes, command)
        for name in ("report.md", "results.md"):
            text = (out / name).read_text()
            atomic_write_bytes(out / name, (text + "\n" + section).encode())
    return summary


def _reused_records(folder: Path, p: Plan, chosen: list[Setting], rows: tuple[str, ...],
                    rerun: set[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The records not run now (row not in ``rows`` or setting not in ``rerun``) from
    ``folder/results.json`` (same plan and grids), and where they came from."""
    import json

    path = folder / "results.json"
    if not path.is_file():
        raise ValueError(f"--reuse {folder}: no results.json there; run the whole suite first")
    old = json.loads(path.read_text())
    want = p.__dict__ | {"seeds": list(p.seeds)}
    if old.get("suite") != "synthetic" or old.get("plan") != want:
        raise ValueError(f"--reuse {folder}: its plan {old.get('plan')} differs from this "
                         f"run's {want}; rerun every row (drop --reuse)")
    names = {s.name for s in chosen}
    missing = sorted(names - {s["name"] for s in old.get("settings", [])})
    if missing:
        raise ValueError(f"--reuse {folder}: settings {missing} are not there; drop --reuse")
    kept = [r for r in old["records"] if r["setting"] in names
            and not (r["row"] in rows and r["setting"] in rerun)]
    changed = [k for k in sorted({r["row"] for r in kept}) if k not in SPECS
               or old.get("grids", {}).get(k) != [str(g) for g in SPECS[k].grid]]
    if changed:
        raise ValueError(f"--reuse {folder}: rows {changed} were run with other grids than "
                         "now; rerun them (add them to --rows)")
    provenance = {"records": len(kept), "rows": sorted({r["row"] for r in kept}),
                  "settings": sorted({r["setting"] for r in kept}),
                  "from_command": old["command"], "earlier": old.get("reused")}
    return kept, provenance


__all__ = ["DESCRIPTION", "ROWS", "Plan", "Setting", "gaussian_kl", "make_measure",
           "make_target", "plan", "run", "settings"]
