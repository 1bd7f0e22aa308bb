"""Analysis and text of the ``l2e`` suite (:mod:`bdlkit.bench.l2e`): per-chain values summed
up into rows, step-time ratios, the paper's claims, ``results.md``'s summary table,
``report.md`` (setup, a table per task, corruptions by severity, the claims) and the
one-line progress echo."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bdlkit.bench.common import mean_std
from bdlkit.core.serialization import atomic_write_bytes
from bdlkit.runs import figures as report

#: Per-chain values averaged into a row (mean, and ``_std`` over chains).
VALUES = ("accuracy", "nll", "ece", "agreement", "total_variation", "ood_auroc",
          "ood_auroc_maxprob", "ood_auroc_mi", "corr_accuracy", "corr_nll", "corr_ece",
          "train_s", "step_ms", "fn_ess_per_s", "div_disagreement", "div_tv")
ESS_THRESHOLD = 1.0  # claim (b): L2E's ESS/s above cSGHMC's
PAPER_ESS_RATIO = 82.97 / 56.61  # docs/l2e.md, Reported numbers: CIFAR-10 ResNet20-FRN
#: claim (d): ESS/s of L2E, cSGMCMC and Meta-SGMCMC on CIFAR-10 (docs/l2e.md)
PAPER_ESS_ORDER = {"l2e": 82.97, "csghmc": 56.61, "meta_sgmcmc": 17.31}
STEP_TIME_GOAL = 1.5  # claim (c): at most 1.5x SGHMC's wall time per step
#: (row key, header, format) of the per-task tables; task columns are added per task.
HEAD = [("method", "method", None), ("status", "status", None), ("chains", "chains", None),
        ("draws", "draws", None), ("accuracy", "accuracy", ".4f"), ("nll", "NLL", ".4f"),
        ("ece", "ECE", ".4f")]
TASK_COLUMNS = {
    "agreement": [("agreement", "agreement", ".4f"), ("total_variation", "TV", ".4f")],
    "ood_auroc": [("ood_auroc", "OOD AUROC (entropy)", ".4f"),
                  ("ood_auroc_maxprob", "OOD AUROC (max p)", ".4f")],
    "corr_accuracy": [("corr_accuracy", "corrupted acc.", ".4f"),
                      ("corr_nll", "corrupted NLL", ".4f"), ("corr_ece", "corrupted ECE", ".4f")],
}
TAIL = [("step_ms", "ms/step", ".2f"), ("step_ratio", "x sghmc", ".2f"),
        ("ess_per_s", "ESS/s", ".4g"), ("ess_frac", "ESS/draw", ".3f"),
        ("fn_ess_per_s", "fn ESS/s", ".4g"), ("rhat_mean", "R-hat mean", ".4f"),
        ("rhat_frac_below_1.1", "R-hat < 1.1", ".3f"),
        ("div_disagreement", "within-chain disagr.", ".3f"), ("div_tv", "within-chain TV", ".3f")]
DIAGNOSTIC_KEYS = {"ess_per_s", "ess_frac", "fn_ess_per_s", "rhat_mean", "rhat_frac_below_1.1",
                   "div_disagreement", "div_tv"}
SUMMARY = [("task", "task", None), ("method", "method", None), ("status", "status", None),
           ("accuracy", "accuracy", ".4f"), ("nll", "NLL", ".4f"), ("ece", "ECE", ".4f"),
           ("agreement", "agreement", ".4f"), ("total_variation", "TV", ".4f"),
           ("ood_auroc", "OOD AUROC", ".4f"), ("corr_accuracy", "corr. acc.", ".4f"),
           ("step_ms", "ms/step", ".2f"), ("step_ratio", "x sghmc", ".2f"),
           ("ess_per_s", "ESS/s", ".4g"), ("rhat_frac_below_1.1", "R-hat < 1.1", ".3f"),
           ("div_tv", "within-chain TV", ".3f")]


def cell(row: Mapping[str, Any], key: str, fmt: str | None) -> str:
    """``mean ± std`` (or the value); ``n/a`` for a chain diagnostic of a row without
    chains (an ensemble), empty when the value is missing."""
    value = row.get(key)
    if value is None:
        if key in DIAGNOSTIC_KEYS and row.get("diagnostics", "").startswith("n/a"):
            return "n/a"
        return ""
    if fmt is None:
        text = str(value)
        return text if key != "status" or len(text) <= 60 else text[:57] + "..."
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    std = row.get(f"{key}_std")
    return format(value, fmt) + (f" ± {format(std, fmt)}" if std is not None else "")


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple]) -> str:
    shown = [{header: cell(r, key, fmt) for key, header, fmt in columns} for r in rows]
    return report.markdown_table(shown, [header for _, header, _ in columns])


def task_columns(rows: Sequence[Mapping[str, Any]]) -> list[tuple]:
    """The columns of one task's table: what any of its rows measured."""
    extra = [col for marker, cols in TASK_COLUMNS.items()
             if any(r.get(marker) is not None for r in rows) for col in cols]
    return [*HEAD, *extra, *TAIL]


def summary_table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """``results.md``'s one table over every task (formatted cells)."""
    return [{header: cell(r, key, fmt) for key, header, fmt in SUMMARY} for r in rows]


def echo_line(row: Mapping[str, Any]) -> str:
    """One progress line per (task, method)."""
    parts = [f"{row['task']:<10} {row['method']:<8}"]
    for key, label, fmt in (("accuracy", "acc", ".4f"), ("nll", "NLL", ".4f"),
                            ("agreement", "agree", ".4f"), ("ood_auroc", "AUROC", ".4f"),
                            ("step_ms", "ms/step", ".2f"), ("ess_per_s", "ESS/s", ".4g")):
        if row.get(key) is not None:
            parts.append(f"{label} {format(row[key], fmt)}")
    if row.get("status") != "ok":
        parts.append(f"[{cell(row, 'status', None)}]")
    return "  ".join(parts)


def _fmt(value: Any) -> str:
    return format(value, ".4g") if isinstance(value, float) else str(value)


def claims_markdown(claims: Mapping[str, Mapping[str, Any]]) -> str:
    """The claims as a Markdown list: values, threshold, supported or not."""
    verdict = {True: "**supported**", False: "**not supported**",
               None: "**undetermined** (a value is missing)"}
    lines = ["Claims of Kim et al. (ICML 2024), measured here:", ""]
    for name, c in claims.items():
        values = ", ".join(f"{k} {_fmt(v)}" for k, v in c["values"].items()) or "none"
        threshold = c["threshold"] if "comparison" not in c else (
            f"{c['comparison']} {c['threshold']} on every task")
        paper = f"; paper: {c['paper_value']}" if "paper_value" in c else ""
        task = f" ({c['task']})" if "task" in c else ""
        lines.append(f"- ({name[0]}) {c['claim']}{task}: {values}; threshold: {threshold}"
                     f"{paper}: {verdict[c['supported']]}")
    return "\n".join(lines)


def setup_text(tasks: Sequence[Any], settings: Mapping[str, Any]) -> str:
    """One paragraph: tasks, methods, chains (``write_results``' setup line)."""
    methods = ", ".join(f"{m} `{h}`" if h else m for m, h in settings["methods"].items())
    task_text = "; ".join(f"{t.name}: {t.describe()}" for t in tasks)
    return (f"{'quick' if settings['quick'] else 'full'} mode on {settings['device']}; "
            f"methods {methods}; {settings['chains']} chains each (seeds "
            f"{settings['seed']}..{settings['seed'] + settings['chains'] - 1}); {task_text}; "
            f"suite wall time {settings['wall_s']:.0f} s")


def summarize_chains(task: str, method: str, chains: Sequence[Mapping[str, Any]],
                     errors: Sequence[str]) -> dict[str, Any]:
    """One row: mean (and ``_std`` over chains) of every value in :data:`VALUES`."""
    if not chains:
        status = "error: " + "; ".join(errors)
    elif errors:
        status = f"partial ({len(chains)}/{len(chains) + len(errors)} chains): " + \
            "; ".join(errors)
    else:
        status = "ok"
    row: dict[str, Any] = {"task": task, "method": method, "status": status,
                           "chains": len(chains)}
    if not chains:
        return row
    row["draws"] = chains[0]["draws"]
    row.update(mean_std(list(chains), VALUES))
    if "corruptions" in chains[0]:
        row["corruptions"] = {
            sev: {k: statistics.fmean(c["corruptions"][sev][k] for c in chains)
                  for k in ("accuracy", "nll", "ece")} for sev in chains[0]["corruptions"]}
    return row


def add_step_ratios(rows: list[dict[str, Any]], base: str = "sghmc") -> None:
    """``step_ratio``: each row's wall time per step over ``base``'s (same task)."""
    ref = next((r.get("step_ms") for r in rows if r["method"] == base), None)
    for r in rows:
        if r.get("step_ms") is not None and ref:
            r["step_ratio"] = r["step_ms"] / ref


def _finite(row: Mapping[str, Any] | None, key: str) -> float | None:
    value = None if row is None else row.get(key)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def compute_claims(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The paper's four claims, from the measured rows (``supported`` is None when a
    value is missing, e.g. a failed method)."""
    by = {(r["task"], r["method"]): r for r in rows}
    task_names = list(dict.fromkeys(r["task"] for r in rows))
    agree = {m: _finite(by.get(("digits-hmc", m)), "agreement")
             for m in ("l2e", "ensemble", "csghmc")}
    a_ok = None if None in agree.values() else bool(
        agree["l2e"] > agree["ensemble"] and agree["l2e"] > agree["csghmc"])

    def ratios(key: str, other: str) -> dict[str, float]:
        out = {}
        for t in task_names:
            num, den = _finite(by.get((t, "l2e")), key), _finite(by.get((t, other)), key)
            if num is not None and den:
                out[t] = num / den
        return out

    ess, step = ratios("ess_per_s", "csghmc"), ratios("step_ms", "sghmc")
    order = {t: {m: _finite(by.get((t, m)), "ess_per_s") for m in PAPER_ESS_ORDER}
             for t in task_names if any((t, m) in by for m in PAPER_ESS_ORDER)}
    complete = bool(order) and all(None not in v.values() for v in order.values())
    return {
        "a_agreement_with_hmc": {
            "claim": "L2E's BMA predictive agrees with HMC more often than a deep ensemble's "
                     "and cyclical SGHMC's (paper, CIFAR-10: 0.946 vs 0.920 and 0.910)",
            "task": "digits-hmc", "values": agree,
            "threshold": "l2e > ensemble and l2e > csghmc", "supported": a_ok},
        "b_ess_per_second_ratio": {
            "claim": "L2E's ESS per second (docs/metrics.md, ESS) exceeds cyclical SGHMC's",
            "values": ess, "threshold": ESS_THRESHOLD, "comparison": ">",
            "paper_value": round(PAPER_ESS_RATIO, 3),
            "supported": None if not ess else all(v > ESS_THRESHOLD for v in ess.values())},
        "c_step_time_ratio": {
            "claim": "L2E costs about as much per step as SGHMC (wall time per step, "
                     "l2e / sghmc)",
            "values": step, "threshold": STEP_TIME_GOAL, "comparison": "<=",
            "supported": None if not step else all(v <= STEP_TIME_GOAL
                                                   for v in step.values())},
        "d_ess_ordering": {
            "claim": "L2E's ESS per second exceeds cyclical SGHMC's, which exceeds "
                     "Meta-SGMCMC's",
            "values": {f"{t} {m}": v for t, vals in order.items() for m, v in vals.items()},
            "threshold": "l2e > csghmc > meta_sgmcmc on every task",
            "paper_value": "82.97 > 56.61 > 17.31 (CIFAR-10)",
            "supported": None if not complete else all(
                v["l2e"] > v["csghmc"] > v["meta_sgmcmc"] for v in order.values())},
    }


NOTES = [
    "Cells are mean ± std over the chains (an ensemble's chain is one 5-member ensemble). "
    "Accuracy, NLL and ECE (top-label, 15 bins) are of each run's BMA predictive on the "
    "whole test split; agreement and TV are against the HMC reference (docs/metrics.md).",
    "`ms/step`: the runner's wall time (steps, sample store, checkpoints) over the steps; "
    "`x sghmc`: its ratio to sghmc's on the same task. An ensemble step trains all 5 "
    "members.",
    "`ESS/s` (docs/metrics.md, ESS): per chain, the TFP single-chain ESS of every weight "
    "coordinate of the kept draws, summed over coordinates, over the chain's wall time (L2E "
    "divides by the seconds per epoch and 1e5; the l2e/csghmc ratio is the same when both "
    "run the same number of steps). `ESS/draw`: the mean ESS per coordinate over the number "
    "of kept draws. `fn ESS/s`: mean over the first probe test points of the ESS of the "
    "true-class probability, over the wall time. Σ ESS grows with the number of kept draws: "
    "csghmc keeps 25 draws in each of its 4 cycles (fewer where a cycle's sampling phase is "
    "shorter), l2e and sghmc about 100 (`draws`), as L2E's notebook (100 draws for every "
    "method).",
    "`R-hat`: L2E's layer-wise R-hat (docs/metrics.md, R-hat, item 3): the per-chain "
    "rank-normalised split R-hat averaged over the chains, per coordinate; mean and fraction "
    "below 1.1 over all coordinates (per-layer values in results.json). n/a: an ensemble "
    "has no chain.",
    "`within-chain disagr.` / `within-chain TV`: the mean over pairs of one chain's kept "
    "draws of the top-class disagreement and the total variation of their predictives on the "
    "probe test points (docs/metrics.md, Within-chain diversity), mean ± std over chains; "
    "the HMC row gives its own chains' values (whole trajectories, fewer draws: the scale "
    "to reach, not a like-for-like value). A chain that stands still scores 0; a chain "
    "far below HMC's explores less than the posterior asks, whatever its BMA agreement (an "
    "optimiser's few chains already agree well). The draws span the second half of the run: "
    "where a chain is still descending (the short --quick runs on MNIST and CIFAR-10, whose "
    "accuracy still rises), the value counts that drift too, so it measures exploration only "
    "on a chain in its stationary regime.",
]


def _meta_text(meta: Mapping[str, Any]) -> str:
    """Where a learned sampler's meta-parameters came from (or the error reading them)."""
    if "error" in meta:
        return str(meta["error"])
    info = meta.get("info", {})
    return (f"`{meta.get('path')}` (sha256 {str(meta.get('sha256'))[:16]}…), constants "
            f"{meta.get('constants')}, made by `{info.get('command', '?')}` "
            f"({info.get('outer_steps', '?')} outer steps, families "
            f"{info.get('families', '?')})")


def write_report(out: Path, rows: Sequence[Mapping[str, Any]],
                 claims: Mapping[str, Mapping[str, Any]], tasks: Sequence[Any],
                 settings: Mapping[str, Any], command: str, machine: Mapping[str, Any]) -> str:
    """``report.md``: setup, a table per task (and its corruptions by severity), the
    claims, the failures and the command; returns the text."""
    lines = ["# l2e: Learning to Explore against SG-MCMC, Meta-SGMCMC and deep ensembles", "",
             f"Command: `{command}`  ", f"Machine: {json.dumps(dict(machine))}  ",
             f"Mode: {'quick' if settings['quick'] else 'full'} on {settings['device']}; "
             f"suite wall time {settings['wall_s']:.0f} s", "", "## Setup", "",
             "- Methods: " + ", ".join(f"`{m}` {h or '(defaults)'}"
                                        for m, h in settings["methods"].items())
             + f"; {settings['chains']} chains each, seeds {settings['seed']}.."
             f"{settings['seed'] + settings['chains'] - 1}; batch 128, prior N(0, 1), T = 1 for "
             "the problem; l2e and meta_sgmcmc run at the constants stored with their "
             "meta-parameters (below; docs/l2e.md, docs/meta_sgmcmc.md).",
             *(f"- {method} meta-parameters: {_meta_text(meta)}"
               for method, meta in settings.get("meta_params", {}).items()),
             *(f"- `{t.name}`: {t.describe()}" for t in tasks),
             *(f"- `{name}`: {note}" for name, note in settings.get("task_notes", {}).items()),
             ""]
    for t in tasks:
        task_rows = [r for r in rows if r["task"] == t.name]
        if not task_rows:
            continue
        lines += [f"## {t.name}", "", _table(task_rows, task_columns(task_rows))]
        with_corr = [r for r in task_rows if r.get("corruptions")]
        if with_corr:
            sevs = list(with_corr[0]["corruptions"])
            cols = [("method", "method", None)] + [
                (f"{k}@{s}", f"{label} s{s}", ".4f") for k, label in
                (("accuracy", "acc."), ("nll", "NLL")) for s in sevs]
            flat = [{"method": r["method"], **{f"{k}@{s}": r["corruptions"][s][k]
                                               for s in sevs for k in ("accuracy", "nll")}}
                    for r in with_corr]
            lines += [f"Corruptions (mean over {len(t.corruptions)} types) by severity:", "",
                      _table(flat, cols)]
    lines += ["## Claims", "", claims_markdown(claims), "", "## Notes", "",
              *(f"- {n}" for n in NOTES)]
    failures = [r for r in rows if r.get("status") not in ("ok", "reference")]
    if failures:
        lines += ["", "## Failures", "",
                  *(f"- `{r['task']}` / `{r['method']}`: {r['status']}" for r in failures)]
    lines += ["", f"Reproduce: `{command}`", ""]
    text = "\n".join(lines)
    atomic_write_bytes(out / "report.md", text.encode())
    return text
