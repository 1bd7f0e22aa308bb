"""Analysis and text of the ``uci`` suite (:mod:`bdlkit.bench.uci`): per-split scores,
rows of mean ± standard error over splits, the reference rows and the three verdicts.

Paired comparisons use the per-split differences ``d_i = a_i − b_i`` of two rows on the same
splits (mean ``d̄``, standard error ``SE = sd(d)/sqrt(k)`` over the ``k`` splits, from
:func:`bdlkit.bench.bnn_lowdata_report.mean_se`):

* (a) **reproduces** the published MC dropout: ``|d̄| <= 2 SE`` of the test log-likelihood
  against the shipped per-split file (``better``/``worse`` when outside, by its sign). It is
  a failure to reject, so a noisy row passes more easily: read it with d̄ beside it;
* (b) the best Bayesian row of a set (every row but ``map``; the highest *validation* LL
  at its chosen point on the first split, so the test splits it is judged on do not choose
  it) **beats** the published MC dropout when ``d̄ > 0`` (``significantly`` when
  ``d̄ > 2 SE``);
  ``map``'s paired difference is the control (a best row no better than MAP adds nothing);
* (c) ``score_vi`` and ``score_vi_prox`` against ``advi``: **better** when ``d̄ > 2 SE``,
  **worse** when ``d̄ < −2 SE``, otherwise **inconclusive** (also with one split);
  **identical** when every split agrees to 1e-6 (relative) (``score_vi``'s default solver is ADVI's
  update, ``docs/score_vi.md``, so that row is the control that it still is).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from bdlkit.bench.bnn_lowdata_report import mean_se
from bdlkit.bench.uci_published import PUBLISHED, SOURCES
from bdlkit.data.uci import published_mc_dropout
from bdlkit.metrics.regression import regression_metrics

Record = dict[str, Any]
CONTROL = "map"
SUBJECTS, BASELINE = ("score_vi", "score_vi_prox"), "advi"
REFERENCE = "mc_dropout (published)"
IDENTICAL = 1e-6  # relative: two rows whose every split agrees this well ran the same fit


def score(bma: Any, y: torch.Tensor, y_std: float) -> dict[str, float]:
    """Test RMSE and the mixture's mean log-likelihood per point, in original units
    (:func:`bdlkit.metrics.regression.regression_metrics`' ``rmse`` and ``nll_mixture``)."""
    values = regression_metrics(bma.predictive, y, y_std, bma.log_density)
    return {"rmse": values["rmse"], "ll": -values["nll_mixture"]}


def echo_line(name: str, rec: Record) -> str:
    where = f"{name}/{rec.get('split', 'val')} {rec['label']:<14} {rec.get('point', {})}"
    if rec["status"] != "ok":
        return f"{where}: {rec['status']}"
    return f"{where}: rmse {rec['rmse']:.4g} ll {rec['ll']:.4g} ({rec['train_s']:.1f} s)"


def _values(runs: Sequence[Record], name: str, label: str) -> dict[int, Record]:
    return {r["split"]: r for r in runs if r["dataset"] == name and r["label"] == label
            and r["status"] == "ok"}


def paired(a: dict[int, float], b: dict[int, float]) -> tuple[float | None, float | None, int]:
    """(d̄, SE, k) of ``a − b`` over the splits both have."""
    common = sorted(set(a) & set(b))
    mean, se = mean_se([a[i] - b[i] for i in common])
    return mean, se, len(common)


def _pm(pair: tuple[float | None, float | None] | None, fmt: str = ".3f") -> str:
    if pair is None or pair[0] is None:
        return "-"
    mean, se = pair
    return f"{mean:{fmt}}" + ("" if se is None else f" ± {se:{fmt}}")


def analyse(runs: Sequence[Record], datasets: Sequence[str], methods: Sequence[str],
            val_ll: dict[str, dict[str, float]]) -> dict:
    """Rows (ours and the references) and the verdicts of every data set; ``val_ll``: per
    set, each row's validation log-likelihood at its chosen point (ranks verdict (b))."""
    rows, verdicts = [], {}
    for name in datasets:
        ours = {label: _values(runs, name, label) for label in methods}
        splits = sorted({i for v in ours.values() for i in v})
        pub = published_mc_dropout(name)
        reference = {"ll": {i: float(pub["ll"][i]) for i in splits if i < len(pub["ll"])},
                     "rmse": {i: float(pub["rmse"][i]) for i in splits if i < len(pub["rmse"])}}
        for label, recs in ours.items():
            ll = _ll(recs)
            rows.append({"dataset": name, "row": label, "splits": len(recs),
                         "rmse": mean_se([r["rmse"] for r in recs.values()]),
                         "ll": mean_se(list(ll.values())),
                         "ll_vs_mc_dropout": paired(ll, reference["ll"])[:2],
                         "train_s": mean_se([r["train_s"] for r in recs.values()])[0],
                         "epochs": next(iter(recs.values()))["epochs"] if recs else None,
                         "chosen": next(iter(recs.values()))["point"] if recs else None})
        rows.append({"dataset": name, "row": REFERENCE, "splits": len(reference["ll"]),
                     "rmse": mean_se(list(reference["rmse"].values())),
                     "ll": mean_se(list(reference["ll"].values()))})
        for label, cells in PUBLISHED.items():
            cell = cells.get(name) or {}
            if cell.get("ll") or cell.get("rmse"):
                rows.append({"dataset": name, "row": f"{label} (published)",
                             "rmse": cell.get("rmse"), "ll": cell.get("ll")})
        verdicts[name] = _verdicts(ours, reference["ll"], val_ll.get(name, {}))
    return {"rows": rows, "verdicts": verdicts, "summary": _summary(verdicts)}


def _ll(recs: dict[int, Record]) -> dict[int, float]:
    return {i: r["ll"] for i, r in recs.items()}


def _verdicts(ours: dict[str, dict[int, Record]], reference: dict[int, float],
              val_ll: dict[str, float]) -> dict:
    out: dict[str, Any] = {}
    if ours.get("mc_dropout"):
        d, se, k = paired(_ll(ours["mc_dropout"]), reference)
        out["reproduces"] = {"d": d, "se": se, "splits": k, "verdict": (
            "inconclusive" if se is None else "reproduced" if abs(d) <= 2 * se
            else "better" if d > 0 else "worse")}
    bayesian = {label: recs for label, recs in ours.items()
                if label != CONTROL and recs and label in val_ll}
    if bayesian:  # chosen on validation rows, not on the test splits it is judged on
        best = max(bayesian, key=lambda lb: val_ll[lb])
        d, se, k = paired(_ll(bayesian[best]), reference)
        control = paired(_ll(ours[CONTROL]), reference)[:2] if ours.get(CONTROL) else None
        out["best"] = {"row": best, "d": d, "se": se, "splits": k, "beats": d is not None
                       and d > 0, "significant": se is not None and d > 2 * se,
                       "map_d": None if control is None else control[0]}
    for subject in SUBJECTS:
        if ours.get(subject) and ours.get(BASELINE):
            a, b = _ll(ours[subject]), _ll(ours[BASELINE])
            d, se, k = paired(a, b)
            same = all(abs(a[i] - b[i]) <= IDENTICAL * max(1.0, abs(b[i]))
                       for i in set(a) & set(b))
            out[f"{subject}_vs_advi"] = {"d": d, "se": se, "splits": k, "verdict": (
                "identical (the same fit)" if same else "inconclusive"
                if se is None or abs(d) <= 2 * se else "better" if d > 0 else "worse")}
    return out


def _summary(verdicts: dict[str, dict]) -> dict[str, Any]:
    """The goal's counts over the data sets run."""
    repro = [v["reproduces"]["verdict"] for v in verdicts.values() if "reproduces" in v]
    best = [v["best"]["beats"] for v in verdicts.values() if "best" in v]
    return {"sets": len(verdicts), "mc_dropout_reproduced": repro.count("reproduced"),
            "mc_dropout_reproduced_or_better": repro.count("reproduced") + repro.count("better"),
            "best_beats_published": sum(best)}


def table(rows: Sequence[Record]) -> list[dict[str, Any]]:
    """The Markdown table's rows: mean ± SE over splits."""
    def fmt(r: Record, metric: str) -> str:  # the published means as printed: 3.01 ± 0.18
        if r["row"].endswith("(published)") and r["row"] != REFERENCE:
            return "g"
        return ".4g" if metric == "rmse" and r["dataset"] == "naval" else ".3f"

    return [{"data set": r["dataset"], "row": r["row"], "splits": r.get("splits", "-"),
             "test RMSE": _pm(r["rmse"], fmt(r, "rmse")), "test LL": _pm(r["ll"], fmt(r, "ll")), "LL − MC dropout (paired)": _pm(r.get("ll_vs_mc_dropout")),
             "seconds": "-" if r.get("train_s") is None else f"{r['train_s']:.1f}",
             "epochs": "-" if r.get("epochs") is None else f"{r['epochs']:.0f}",
             "chosen": r.get("chosen") or ""} for r in rows]


def notes_markdown(analysis: dict[str, Any], epochs: int | None = None) -> str:
    """The verdicts and sources under the table; ``epochs``: the plan's budget in epochs
    (Gal's protocol), None for a budget in steps."""
    lines = ["## Verdicts", "", "| data set | (a) our mc_dropout vs published (d̄ ± SE) | "
             "(b) best Bayesian row (by validation LL): d̄ vs published MC dropout | MAP's d̄ | "
             + " | ".join(f"(c) {s} vs advi" for s in SUBJECTS) + " |",
             "|---|---|---|---|" + "---|" * len(SUBJECTS)]
    for name, v in analysis["verdicts"].items():
        rep, best = v.get("reproduces"), v.get("best")
        cells = [name, "-" if rep is None else f"{rep['verdict']} ({_pm((rep['d'], rep['se']))})",
                 "-" if best is None else
                 f"{best['row']}: {_pm((best['d'], best['se']))} "
                 f"({'beats' if best['beats'] else 'does not beat'}"
                 f"{', significantly' if best['significant'] else ''})",
                 "-" if best is None or best["map_d"] is None else f"{best['map_d']:.3f}"]
        cells += [f"{v[k]['verdict']} ({_pm((v[k]['d'], v[k]['se']))})"
                  if (k := f"{s}_vs_advi") in v else "-" for s in SUBJECTS]
        lines.append("| " + " | ".join(cells) + " |")
    s = analysis["summary"]
    lines += ["", f"Goal counts over {s['sets']} set(s): our mc_dropout within 2 SE of the "
              f"published on {s['mc_dropout_reproduced']} (within or better: "
              f"{s['mc_dropout_reproduced_or_better']}); the best Bayesian row's test LL at or "
              f"above MC dropout's published on {s['best_beats_published']}.", "",
              "Test LL: the BMA mixture's log density per test point in original units "
              "(higher is better); d̄ ± SE: mean and standard error over splits of the paired "
              "per-split difference. `mc_dropout (published)`: Gal & Ghahramani's per-split "
              "results shipped with the splits (their grid search over rate and τ, 4 000 "
              "epochs on most sets and 2 000 on protein, prior length-scale 1e-2, i.e. "
              "σ0 = 100, and 10 000 MC samples; its RMSE is that of the MC mean), on the "
              "splits run here. "
              + ("The rows here train for the `epochs` column at one step budget, with "
                 "prior N(0, 1) and 100 draws, so verdict (a) measures the method at a "
                 "smaller budget, not only its implementation." if epochs is None else
                 f"The rows here train for Gal's {epochs} epochs, with prior N(0, 1) and "
                 "100 draws."), "",
              "Sources of the published rows:"]
    lines += [f"- `{label}`: {text}" for label, text in SOURCES.items()]
    return "\n".join(lines)
