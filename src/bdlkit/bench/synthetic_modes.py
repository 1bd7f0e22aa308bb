"""The multimodal part of ``bdlkit bench synthetic``: flows on targets whose modes the
diagonal Gaussian cannot hold, and the claim "score-based VI avoids the ELBO's mode
collapse" (``docs/protocols.md``).

Settings (normalised targets with exact samplers, :mod:`bdlkit.data.synthetic`):

* ``modes2-d2``, ``modes2-d10``: two unit Gaussians at ±4 e₁ (8 sd apart);
* ``modes5-d2``, ``modes5-d10``: five unit Gaussians on a circle in the first two
  coordinates, neighbours 8 sd apart (radius 4 / sin(π/5) = 6.8);
* ``banana-d2``: x₁ ~ N(0, 2²), x₂ − ¼(x₁² − 4) ~ N(0, 1);
* ``funnel-d10``: Neal's funnel, v ~ N(0, 3²).

Quick: the three 2-D settings, one seed; full: all six, three seeds.

Rows (:data:`SPECS`), every one started from the same q₀ = N(0, I) (a flow's q₀ is that
Gaussian exactly) and given the same budget of score evaluations; each has a tuning grid
of three points, the point with the lowest final reverse KL (the negative ELBO up to the
target's normaliser, a criterion that favours the ELBO rows) is chosen on the first seed
and repeated on the others (:func:`bdlkit.bench.vi_runs.tune_then_repeat`).

Measured on each fitted q with 4 000 draws of q and 4 000 exact draws of the target:
reverse KL E_q[log q − log p] and forward KL E_p[log p − log q] by Monte Carlo (both
normalised), and for the mixtures the mass of q inside each mode's 90 % ball
(‖θ − m_k‖² ≤ χ²_d(0.9): radius 2.1 in 2-D, 4.0 in 10-D, so the balls of modes 8 apart
are disjoint): a mode is *found* when q puts there at least half the mass the target
puts there (0.5 · 0.9 w_k). The balls and the threshold matter: q₀ itself, N(0, I) at
the centre, would give every mode an equal share of a nearest-mode assignment, and it
holds some mass in wide or loose balls (13 % per mode in 99 % balls in 2-D); with these
it finds no mode on any setting. So that a q that never left its start cannot look like
it keeps the modes, every setting has the row ``start``: q₀ itself, measured the same way.
The verdict is in :mod:`bdlkit.bench.synthetic_modes_report`.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bdlkit.bench import vi_methods
from bdlkit.bench.vi_runs import Annealed, MethodSpec, describe, scores_per_step, tune_then_repeat
from bdlkit.data import synthetic
from bdlkit.engine.runner import NonFiniteError
from bdlkit.families.diag_gaussian import DiagGaussian, DiagGaussianParams

F64 = torch.float64
EVAL_DRAWS = 4_000
SEPARATION = 8.0  # sd between neighbouring modes
FLOW_DRAWS = vi_methods.FLOW["num_samples"]  # per step for the flow rows

SPECS: dict[str, MethodSpec] = {k: vi_methods.SPECS[k] for k in (*vi_methods.FLOW_ROWS,
                                                                 "advi", "score_vi_cf")}
ROWS = tuple(SPECS)


@dataclass(frozen=True)
class Setting:
    kind: str  # modes | banana | funnel
    dim: int
    components: int = 0

    @property
    def name(self) -> str:
        return f"{self.kind}{self.components or ''}-d{self.dim}"


def settings(quick: bool) -> list[Setting]:
    if quick:
        return [Setting("modes", 2, 2), Setting("modes", 2, 5), Setting("banana", 2)]
    return [Setting("modes", 2, 2), Setting("modes", 2, 5), Setting("banana", 2),
            Setting("modes", 10, 2), Setting("modes", 10, 5), Setting("funnel", 10)]


def budget(quick: bool) -> int:
    """Score evaluations per run (quick: 600 flow steps of 16 draws; full: 1 500)."""
    return 600 * FLOW_DRAWS if quick else 1_500 * FLOW_DRAWS


def mode_means(components: int, dim: int) -> Tensor:
    means = torch.zeros(components, dim, dtype=F64)
    if components == 2:
        means[:, 0] = torch.tensor([-1.0, 1.0], dtype=F64) * SEPARATION / 2
        return means
    radius = SEPARATION / 2 / math.sin(math.pi / components)
    angle = 2 * math.pi * torch.arange(components, dtype=F64) / components
    means[:, 0], means[:, 1] = radius * angle.cos(), radius * angle.sin()
    return means


def make_target(setting: Setting, seed: int) -> synthetic.SyntheticTarget:
    if setting.kind == "modes":
        return synthetic.gaussian_mixture(setting.dim, means=mode_means(setting.components,
                                                                         setting.dim),
                                          seed=seed, num_draws=2)
    if setting.kind == "banana":
        return synthetic.banana(setting.dim, b=0.25, scale=2.0, seed=seed, num_draws=2)
    return synthetic.funnel(setting.dim, scale=3.0, seed=seed, num_draws=2)


BALL = 0.9  # each mode's ball holds this much of its component's mass
FOUND = 0.5  # a mode is found when q holds this share of the target's mass in its ball


def chi2_quantile(dim: int, p: float = BALL) -> float:
    """The p-quantile of χ²_d: bisection on its CDF, the regularised incomplete gamma
    function P(d/2, x/2) (``torch.special.gammainc``)."""
    low, high = 0.0, float(dim) + 40.0 * math.sqrt(dim) + 40.0
    half = torch.tensor(dim / 2, dtype=F64)
    for _ in range(100):
        mid = (low + high) / 2
        if float(torch.special.gammainc(half, torch.tensor(mid / 2, dtype=F64))) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def measure(q: Any, target: synthetic.SyntheticTarget, setting: Setting,
            seed: int) -> dict[str, Any]:
    """Reverse and forward KL by Monte Carlo and, for mixtures, the mass in each mode."""
    gen = torch.Generator().manual_seed(10_000 + seed)
    with torch.no_grad():
        draws = q.sample(EVAL_DRAWS, gen).to(F64)
        reverse = float((q.log_prob(draws).to(F64) - target.log_prob(draws)).mean())
        exact = target.sample(EVAL_DRAWS, gen)
        forward = float((target.log_prob(exact) - q.log_prob(exact).to(F64)).mean())
    out: dict[str, Any] = {"reverse_kl": reverse, "forward_kl": forward,
                           "std_first": float(draws[:, 0].std())}
    if setting.kind == "modes":
        means = target.params["means"]
        inside = torch.cdist(draws, means) ** 2 <= chi2_quantile(setting.dim)
        mass = inside.double().mean(0)
        true = BALL * target.params["weights"]
        out.update(mode_mass=[round(float(m), 4) for m in mass],
                   outside=float(1 - inside.any(1).double().mean()),
                   modes_found=int((mass >= FOUND * true).sum()))
    return out


def start_record(setting: Setting, seed: int) -> dict[str, Any]:
    """The control row: q₀ = N(0, I), every row's start, measured as the fits are."""
    zeros = torch.zeros(setting.dim, dtype=F64)
    q0 = DiagGaussian(DiagGaussianParams(mu=zeros, rho=zeros))
    final = measure(q0, make_target(setting, seed), setting, seed)
    return {"setting": setting.name, "row": "start", "method": "none", "hyper": "q₀ = N(0, I)",
            "seed": seed, "steps": 0, "score_evals": 0, "status": "ok", "seconds": 0.0,
            "final": final, "selected": True, "dim": setting.dim, "kind": setting.kind,
            "components": setting.components}


def run_one(setting: Setting, spec: MethodSpec, hyper: dict[str, Any], seed: int,
            evals: int) -> dict[str, Any]:
    """One fit of ``spec`` at grid point ``hyper``; a failure is recorded, not raised."""
    import bdlkit

    target = make_target(setting, seed)
    per_step = scores_per_step(spec.method, hyper)
    steps = max(1, evals // per_step)
    options = {k: (v.resolve(steps) if isinstance(v, Annealed) else v) for k, v in hyper.items()}
    rec: dict[str, Any] = {"setting": setting.name, "row": spec.label, "method": spec.method,
                           "hyper": describe(hyper), "seed": seed, "steps": steps,
                           "score_evals": steps * per_step}
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # score_vi's flow warns that it is experimental
            result = bdlkit.infer(target, spec.method, steps=steps, seed=seed, start="init",
                                  init=torch.zeros(setting.dim, dtype=F64), init_std=1.0,
                                  **options)
        q = result.algorithm.approximation(result.state)
        final = measure(q, target, setting, seed)
        status = "ok" if math.isfinite(final["reverse_kl"]) else "diverged"
    except (NonFiniteError, ValueError, torch.linalg.LinAlgError) as err:
        final, status = {}, "diverged" if isinstance(err, NonFiniteError) else "error"
        rec["message"] = str(err).splitlines()[0][:300]
    rec.update(status=status, seconds=round(time.perf_counter() - start, 2), final=final)
    return rec


def run_setting(setting: Setting, rows: tuple[str, ...], seeds: tuple[int, ...], evals: int,
                echo: bool) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = [start_record(setting, seeds[0])]
    for label in rows:
        spec = SPECS[label]

        def go(hyper: dict[str, Any], seed: int, spec: MethodSpec = spec) -> dict[str, Any]:
            rec = run_one(setting, spec, hyper, seed, evals)
            if echo:
                f = rec["final"]
                print(f"  {setting.name:12s} {spec.label:14s} seed {seed} {rec['hyper']:28s} "
                      f"{rec['status']:8s} rKL {f.get('reverse_kl', math.nan):8.4g} "
                      f"fKL {f.get('forward_kl', math.nan):8.4g} modes "
                      f"{f.get('modes_found', '-')}  {rec['seconds']:.1f}s", flush=True)
            return rec
        for rec in tune_then_repeat(spec.configs(), seeds, go, "reverse_kl"):
            rec.update(dim=setting.dim, kind=setting.kind, components=setting.components)
            records.append(rec)
    return records


def run(quick: bool, seeds: tuple[int, ...], rows: tuple[str, ...] = ROWS,
        echo: bool = True, only: tuple[str, ...] = (), reuse: Path | None = None,
        evals: int | None = None) -> dict[str, Any] | None:
    """``rows`` on the settings (``only``: just these names); returns ``{"records",
    "settings", "budget", ...}``, or ``None`` when there is nothing to run or reuse.

    ``reuse``: a folder with an earlier ``modes.json`` of the same budget and seeds; its
    records of the rows and settings not run now are kept. ``evals``: the budget (tests).
    """
    unknown = sorted(set(rows) - set(SPECS))
    if unknown:
        raise ValueError(f"unknown multimodal rows {unknown}; valid: {list(SPECS)}")
    evals = evals or budget(quick)
    names = [s.name for s in settings(quick)]
    old = _earlier(reuse, evals, seeds)
    rerun = [s for s in settings(quick) if not only or s.name in only]
    again = {s.name for s in rerun} if rows else set()  # their start rows are made again
    kept = [r for r in (old or {}).get("records", [])
            if r["setting"] in names and not ((r["row"] in rows or r["row"] == "start")
                                              and r["setting"] in again)]
    if not (rows and rerun) and old is None:
        return None
    start, records = time.perf_counter(), []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small d: one thread is faster than two on this suite
    try:
        for setting in rerun if rows else []:
            if echo:
                print(f"[synthetic: modes] {setting.name}", flush=True)
            records += run_setting(setting, rows, seeds, evals, echo)
    finally:
        torch.set_num_threads(threads)
    order = {label: i for i, label in enumerate(("start", *ROWS))}
    records = sorted(records + kept, key=lambda r: (names.index(r["setting"]),
                                                    order.get(r["row"], len(order))))
    every = tuple(dict.fromkeys((*rows, *(r["row"] for r in kept if r["row"] in SPECS))))
    data = {"records": records, "rows": list(every), "budget": evals, "seeds": list(seeds),
            "settings": names, "grids": {k: [describe(g) for g in SPECS[k].grid] for k in every},
            "wall_seconds": round(time.perf_counter() - start, 1)}
    if kept:
        data["reused"] = {"records": len(kept), "from_command": old["command"]}
    return data


def _earlier(reuse: Path | None, evals: int, seeds: tuple[int, ...]) -> dict[str, Any] | None:
    """The earlier ``modes.json`` in ``reuse`` (None if there is none); refused if its
    budget or seeds differ."""
    path = None if reuse is None else Path(reuse) / "modes.json"
    if path is None or not path.is_file():
        return None
    old = json.loads(path.read_text())
    if old.get("budget") != evals or old.get("seeds") != list(seeds):
        raise ValueError(f"--reuse {reuse}: its multimodal runs had budget {old.get('budget')} "
                         f"and seeds {old.get('seeds')}, this run {evals} and {list(seeds)}; "
                         "rerun the multimodal rows (drop --reuse)")
    changed = [k for k, grid in old.get("grids", {}).items()
               if k not in SPECS or grid != [describe(g) for g in SPECS[k].grid]]
    if changed:
        raise ValueError(f"--reuse {reuse}: multimodal rows {changed} were run with other "
                         "grids than now; rerun them (add them to --rows)")
    return old


__all__ = ["ROWS", "SPECS", "Setting", "budget", "measure", "mode_means",
           "run", "settings"]
