"""``report.md`` and the PNG plots of a run directory, from an :class:`~bdlkit.evaluation.Evaluation`.

Sections: test metrics; run health (the failed checks of
:mod:`bdlkit.evaluation.health`, each with its fix); OOD, reference and corruption tables when evaluated; sampling
diagnostics with ESS per second (the only wall-time-dependent number, so it lives here
and not in ``metrics.json``); the per-layer σ quantiles of a diagonal-Gaussian VI run
(``Result.sigma_summary``); the run summary; the resolved configuration; plots
(reliability diagram, training curves, per-layer R̂, function-space traces, ESS per
layer, for a forecaster the forecast with its 50/90 % bands, and the evaluation plots of
:mod:`bdlkit.runs.evaluation_figures`: regression intervals and coverage, OOD entropy and
ROC, accuracy/ECE against corruption severity). Plots need matplotlib (the ``plots``
extra); without it they are skipped and the report says so. A plot of ``PLOTS`` that this
evaluation did not draw is removed, so the folder never shows numbers the report does not;
``ood.png`` of an earlier ``--ood`` evaluation stays while its metrics are kept
(:mod:`bdlkit.runs.kept_metrics`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bdlkit.core.serialization import atomic_write_bytes
from bdlkit.diagnostics import ess_per_second
from bdlkit.engine.result import Result
from bdlkit.evaluation import SEVERITIES, Evaluation
from bdlkit.evaluation.predictive import ClassificationBMA, RegressionBMA
from bdlkit.metrics.forecasting import GaussianMixture
from bdlkit.runs import evaluation_figures, kept_metrics
from bdlkit.runs import figures as report
from bdlkit.runs.forecast_figure import forecast_plot

SIGMA_NOTE = ("Quantiles of the posterior standard deviations σ of q, per parameter tensor "
              "and over all coordinates. σ still near the method's `init_std` means the "
              "approximation is close to a point estimate.\n")
PLOTS = ("reliability.png", "history.png", "rhat_layers.png", "ess_layers.png", "trace.png",
         "forecast.png", "intervals.png", "ood.png", "corruptions.png")


def write(run_dir: Path, cfg: Any, result: Result, ev: Evaluation, ds: Any) -> list[str]:
    """Write the plots and ``report.md``; return the plot file names."""
    plots = _plots(run_dir, cfg, result, ev, ds)
    values = ev.metrics
    plots += sorted(f for f in kept_metrics.kept_figures(values) - set(plots)
                    if (run_dir / f).is_file())  # e.g. ood.png of an earlier --ood
    for stale in set(PLOTS) - set(plots):
        (run_dir / stale).unlink(missing_ok=True)
    scalars = [{"metric": k, "value": v} for k, v in values.items()
               if not isinstance(v, dict)]
    wall = result.config.get("wall_time_s")
    summary = [
        {"item": "method", "value": f"{cfg.method} ({result.kind})"},
        {"item": "model / data", "value": f"{cfg.model} / {cfg.data}"},
        {"item": "steps", "value": result.config.get("steps")},
        {"item": "draws averaged", "value": values.get("num_draws")},
        final_log_density(result),
        {"item": "training wall time (s)", "value": f"{wall:.1f}" if wall else "n/a"},
    ]
    text = [
        f"# bdlkit run: {cfg.method} on {cfg.data} ({cfg.model})\n",
        f"Reproduce exactly (from any folder): `bdlkit fit --config "
        f"{run_dir.resolve() / 'config.yaml'} --out NEW_DIR` "
        "(burn-in, thinning and checkpoint cadence are pinned there: drop them to change "
        "the number of steps)\n",
        "## Test metrics\n", report.markdown_table(scalars), "",
        *([f"Note: {kept}.", ""] if (kept := kept_metrics.describe(values)) else []),
        "## Run health\n", _health(values.get("health") or {},
                                   values.get("health_notes") or {}), "",
    ]
    if "corruptions" in values:
        text += ["## Covariate shift (accuracy per severity)\n", _corruption_table(values), ""]
    if "diagnostics" in values:
        text += ["## Sampling diagnostics (one chain)\n", _diagnostics_table(values, wall), ""]
    sigmas = result.sigma_summary()
    if sigmas is not None:
        text += ["## Variational σ (per layer)\n", SIGMA_NOTE,
                 report.markdown_table(sigmas, floatfmt=".3g"), ""]
    text += ["## Run\n", report.markdown_table(summary), "",
             "## Configuration\n", "```yaml", (run_dir / "config.yaml").read_text().rstrip(),
             "```", ""]
    if plots:
        text += ["## Plots\n"] + [f"![{p}]({p})" for p in plots] + [""]
    else:
        text += ["Plots skipped: matplotlib is not installed (`pip install bdlkit[plots]`).", ""]
    atomic_write_bytes(run_dir / "report.md", ("\n".join(text) + "\n").encode())
    return plots


def _plots(run_dir: Path, cfg: Any, result: Result, ev: Evaluation, ds: Any) -> list[str]:
    made: list[str | None] = []
    title = f"{cfg.method} on {cfg.data}"
    if isinstance(ev.test, ClassificationBMA):
        made.append(_name(report.reliability_diagram(  # ev covers the first max_test rows
            ev.test.probs, ds.y_test[:len(ev.test.probs)], run_dir / "reliability.png",
            title=title)))
    made += _evaluation_plots(run_dir, title, result, ev, ds)
    if isinstance(ev.test, GaussianMixture):
        made.append(_name(forecast_plot(
            ds.x_test, ds.y_test, ev.test, run_dir / "forecast.png",
            columns=(ds.meta or {}).get("columns"), title=title)))
    made.append(_name(report.history_plot(result.history, run_dir / "history.png",
                                          history_keys(result))))
    diag = ev.diagnostics or {}
    if "_layers" in diag:
        made.append(_name(report.rhat_layer_plot(diag["_layers"], run_dir / "rhat_layers.png",
                                                 title="per-chain split R-hat by layer")))
        made.append(_name(report.ess_bars(diag["_layer_ess"], run_dir / "ess_layers.png",
                                          title="mean single-chain ESS by layer")))
    if "_probe_trace" in diag:
        made.append(_name(report.trace_plot(diag["_probe_trace"], run_dir / "trace.png",
                                            names=diag.get("_probe_names"))))
    return [m for m in made if m]


def final_log_density(result: Result) -> dict[str, Any]:
    """The run summary's row of the last logged (minibatch) log density, as ``log.jsonl``
    and the progress bar show it: on one scale for every method (an ensemble logs the mean
    over its M members, and the row says so)."""
    last = result.history[-1].get("log_prob") if result.history else None
    if not isinstance(last, (int, float)):
        return {"item": "final log density (minibatch)", "value": "n/a"}
    if result.kind == "ensemble" and result.num_kept > 1:
        return {"item": f"final log density (minibatch, mean over the {result.num_kept} "
                        "members)", "value": last}
    return {"item": "final log density (minibatch)", "value": last}


def history_keys(result: Result) -> list[str]:
    """The panels of ``history.png``: the method's objective first (a VI method's ``elbo``,
    rising as q improves even while the log density at its draws falls; Fisher VI's
    ``loss``), then the log density and the held-out evaluations."""
    objective = result.algorithm.objective if result.algorithm is not None else "log_prob"
    evals = sorted({k for e in result.history for k in e if k.startswith("eval/")})
    return list(dict.fromkeys([objective, "log_prob", *evals]))


def _evaluation_plots(run_dir: Path, title: str, result: Result, ev: Evaluation,
                      ds: Any) -> list[str | None]:
    """``intervals.png``, ``ood.png`` and ``corruptions.png`` where they apply."""
    made = []
    if isinstance(ev.test, RegressionBMA):
        made.append(_name(evaluation_figures.regression_intervals_figure(
            result, ev, ds, run_dir / "intervals.png", title=title)))
    if isinstance(ev.test, ClassificationBMA) and ev.ood is not None:
        made.append(_name(evaluation_figures.ood_plot(
            ev.test.entropy, ev.ood.entropy, run_dir / "ood.png",
            ood_name=str(ev.metrics.get("ood_data", "OOD")), title=title)))
    if "corruptions" in ev.metrics:
        made.append(_name(evaluation_figures.corruption_plot(
            ev.metrics, run_dir / "corruptions.png", title=title)))
    return made


def _health(found: dict[str, str], notes: dict[str, str]) -> str:
    if not found:
        text = ("All checks passed: better than the majority class or mean predictor and "
                "than the trivial predictor's NLL, q away from its prior, and where they "
                "apply R-hat and ESS of several chains, kept draws, σ movement and OOD AUPR "
                "within their thresholds (bdlkit.evaluation.health).")
    else:
        text = "\n".join(f"- **{check}**: {message}" for check, message in found.items())
    if notes:
        text += "\n\nInformation (not failures):\n\n" + "\n".join(
            f"- {check}: {message}" for check, message in notes.items())
    return text


def _name(path: Path | None) -> str | None:
    return path.name if path is not None else None


def _corruption_table(values: dict[str, Any]) -> str:
    rows = []
    for name, by_severity in values["corruptions"].items():
        if name == "mean":
            continue
        rows.append({"corruption": name,
                     **{f"s{s}": by_severity[str(s)]["accuracy"] for s in SEVERITIES}})
    mean = values["corruptions"]["mean"]
    note = (f"\nMean over corruptions and severities: accuracy {mean['accuracy']:.4f}, "
            f"NLL {mean['nll']:.4f}, ECE {mean['ece']:.4f}.")
    if frozen := values.get("corruption_frozen_pixels"):
        note += (f" Corrupted in raw pixel space; {frozen} input values per image, whose "
                 "standardisation std is below 1/30 of the pixel range, kept their clean "
                 "value (bdlkit.data.corruptions.frozen_pixels).")
    return report.markdown_table(rows) + note


def _diagnostics_table(values: dict[str, Any], wall: float | None) -> str:
    diag = values["diagnostics"]
    rows = [{"quantity": k, "value": v} for k, v in diag.items() if not isinstance(v, dict)]
    if wall and "weights_ess_sum" in diag:
        rows.append({"quantity": "weights_ess_sum per training second",
                     "value": float(ess_per_second(diag["weights_ess_sum"], wall))})
    return report.markdown_table(rows)
