"""The ``defaults`` suite: does every method's default serve small and mid-size problems?

Each method runs exactly as ``bdlkit fit --method M --data D --epochs 30`` runs it: no
hyperparameter given, the default burn-in, thinning and evaluation. The question is the
one a new user asks: does the default beat the trivial predictor? A classification run
must beat always predicting the most frequent test class by more than 1 point of test
accuracy, a regression run the training mean's test RMSE (in the targets' units): the
``majority`` check of :mod:`bdlkit.evaluation.health`, one definition for both. Problems:

* ``digits``: scikit-learn 8x8 digits (1 257 train), MLP 64-100-10;
* ``mnist-500`` and ``mnist-5000``: MNIST subsets (:func:`bdlkit.data.load_mnist`), MLP;
* ``two-class``: a user-style ``.npz`` of 28x28 images in [0, 1] (not standardised), MNIST
  4 against 9 with 456/168 training images (73 % majority) and 400/150 test images,
  written into the output folder from the shipped MNIST files;
* ``cifar10-1000``: 1 000 CIFAR-10 training images and the small CNN (``--model cnn``);
* ``yacht`` and ``concrete``: UCI regression (split 0), MLP with a learned noise σ.

* ``two-class-255``: the same images as uint8 0..255 pixel values, as a user's file often
  holds them (bdlkit scales uint8 inputs to [0, 1] on load: :mod:`bdlkit.data.scaling`);
* ``hetero-300`` and ``homo-300``: a user's own 300-point 1-D regression, own tanh
  ``nn.Module`` and Gaussian likelihood (heteroscedastic; learned σ on low noise) through
  ``bdlkit.infer(model, method, data=(x, y), epochs=200)`` in Python
  (:mod:`bdlkit.bench.defaults_own`; a run that diverges fails).

A run that fails after bdlkit said before it that a default cannot serve the problem (a
:class:`~bdlkit.core.errors.DefaultsWarning`: ``fisher_vi`` on a network, inputs far from
unit scale) is listed as ``declared`` rather than ``fails``: its run still happens and its numbers are shown. What could fake a
pass is reported beside it: the run-health checks (:mod:`bdlkit.evaluation.health`),
among them a VI σ still at its initial value.
"""

from __future__ import annotations

import io
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bdlkit import algorithms
from bdlkit.bench import defaults_own
from bdlkit.bench.common import prepare_bench_out, warm_up, write_results
from bdlkit.core.errors import DefaultsWarning
from bdlkit.evaluation.health import trivial_baseline
from bdlkit.runs.config import RunConfig

DESCRIPTION = ("every method's defaults at --epochs 30 on digits, MNIST subsets, a two-class "
               "set, CIFAR-10 with a CNN and UCI, and on a user's own regression module: "
               "beats the majority class / mean predictor?")
EPOCHS = 30
TWO_CLASS = "two-class.npz"
TWO_CLASS_255 = "two-class-255.npz"
#: name -> the RunConfig fields of ``bdlkit fit`` (the two-class file is made in ``out``).
PROBLEMS: dict[str, dict[str, Any]] = {
    "digits": {"data": "digits"},
    "mnist-500": {"data": "mnist", "data_kwargs": {"train_size": 500}},
    "mnist-5000": {"data": "mnist", "data_kwargs": {"train_size": 5000}},
    "two-class": {"data": TWO_CLASS},
    "two-class-255": {"data": TWO_CLASS_255},
    "cifar10-1000": {"data": "cifar10", "model": "cnn", "data_kwargs": {"train_size": 1000}},
    "yacht": {"data": "uci/yacht"},
    "concrete": {"data": "uci/concrete"},
}
#: Not run, with the reason in the table (the suite's budget, not a verdict): 30 NUTS
#: transitions of up to 256 full-batch gradients each. On MNIST-5000's MLP nuts warns
#: before the run (``bdlkit.algorithms.mcmc.nuts.COSTLY``); a CNN on 1 000 CIFAR images
#: stays under that parameter-rows bound but costs more per row.
SKIP: dict[tuple[str, str], str] = {
    ("mnist-5000", "nuts"): "not run: nuts warns it is costly (4.0e8 parameter-rows, ~20 min)",
    ("cifar10-1000", "nuts"): "not run: up to 7 680 full-batch CNN gradients (~30+ min)",
}
#: Methods without a run of no option: the reason, printed under the table.
NO_DEFAULT: dict[str, str] = {
    "mc_dropout": "no default placement: it drops units where the network has dropout "
                  "layers with p > 0, or at every Linear input at --rate p; the zoo's "
                  "networks at their defaults have neither, so a run of no option is "
                  "refused, naming both fixes",
}
QUICK_PROBLEMS = ("digits", "yacht", "hetero-300")
#: Left out of ``--quick`` (the smoke test): a minute of NUTS trees on digits alone.
QUICK_SKIP = ("nuts",)
COLUMNS = ["problem", "method", "metric", "value", "baseline", "verdict", "nll", "health",
           "train_s"]


def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True, methods: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Fit every method on every problem into ``out/runs/<problem>/<method>`` (the
    own-module problems in memory); write the table. ``quick``: digits, yacht and
    hetero-300 only, without NUTS."""
    from bdlkit.runs import directory as run_module

    prepare_bench_out(out)
    warm_up()
    files = {TWO_CLASS: write_two_class(out / "runs" / TWO_CLASS),
             TWO_CLASS_255: write_two_class(out / "runs" / TWO_CLASS_255, pixels=255)}
    problems = QUICK_PROBLEMS if quick else (*PROBLEMS, *defaults_own.OWN_PROBLEMS)
    chosen = methods or tuple(sorted(m for m in algorithms.METHODS if m not in NO_DEFAULT
                                     and not (quick and m in QUICK_SKIP)))
    rows: list[dict[str, Any]] = []
    for problem in problems:
        if problem in defaults_own.OWN_PROBLEMS:
            rows += [defaults_own.run_own(problem, method, seed) for method in chosen]
            echo_rows(rows[-len(chosen):], echo)
            continue
        spec = dict(PROBLEMS[problem])
        spec["data"] = str(files.get(spec["data"], spec["data"]))
        baseline = None
        for method in chosen:
            if (problem, method) in SKIP:
                rows.append({"problem": problem, "method": method, "verdict": "not run",
                             "health": SKIP[problem, method], "declared": []})
                continue
            cfg = RunConfig(method=method, epochs=EPOCHS, seed=seed, **spec)
            start = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                output = run_module.fit(cfg, out / "runs" / problem / method, overwrite=True)
            if baseline is None:
                baseline = trivial_baseline(run_module.load_dataset(cfg))
            rows.append(row(problem, method, output.metrics, baseline, caught,
                            time.perf_counter() - start))
            echo_rows(rows[-1:], echo)
    write(out, rows, quick, seed, command)
    return rows


def echo_rows(rows: list[dict[str, Any]], echo: bool) -> None:
    """Print each row's verdict to stderr as the suite goes (when ``echo``)."""
    for r in rows if echo else ():
        value = "-" if r["value"] is None else f"{r['value']:.4f}"  # None: diverged
        print(f"  {r['problem']:<13} {r['method']:<10} {r['metric']} {value} "
              f"(baseline {r['baseline']:.4f}) {r['verdict']}", file=sys.stderr)


def row(problem: str, method: str, values: dict[str, Any], baseline: tuple[str, float],
        caught: list[Any], seconds: float) -> dict[str, Any]:
    """One table row: the metric against the trivial predictor (``baseline``, from
    :func:`~bdlkit.evaluation.health.trivial_baseline`) and the verdict. A run beats it
    when run health has no ``majority`` check (accuracy more than 1 point above the
    majority class, or an RMSE below the mean predictor's); it is ``declared`` when a
    :class:`~bdlkit.core.errors.DefaultsWarning` before the run said a default does not
    serve the problem."""
    metric, trivial = baseline
    health = values.get("health") or {}
    declared = [str(w.message) for w in caught if issubclass(w.category, DefaultsWarning)]
    verdict = "beats" if "majority" not in health else ("declared" if declared else "fails")
    return {"problem": problem, "method": method, "metric": metric, "value": values[metric],
            "baseline": trivial, "verdict": verdict, "nll": values["nll"],
            "health": ", ".join(sorted(health)) or "-",
            "train_s": seconds, "declared": declared[:1]}


def write_two_class(path: Path, root: str | None = None, pixels: int | None = None) -> Path:
    """MNIST 4 (label 0) against 9 (label 1): 456/168 training and 400/150 test images,
    pixels in [0, 1] (or uint8 0..``pixels`` when given), written as a user's ``.npz``
    (``x_train, y_train, x_test, y_test``)."""
    from bdlkit.core.serialization import atomic_write_bytes
    from bdlkit.data import load_mnist

    ds = load_mnist(root=root, train_size=9999, normalize=False)
    x = torch.cat([ds.x_train, ds.x_test]).numpy()
    y = torch.cat([ds.y_train, ds.y_test]).numpy()
    if pixels is not None:
        x = (x * pixels).round().astype(np.uint8)
    rng = np.random.default_rng(0)
    fours, nines = (rng.permutation(np.flatnonzero(y == k)) for k in (4, 9))
    train = np.concatenate([fours[:456], nines[:168]])
    test = np.concatenate([fours[456:856], nines[168:318]])
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    np.savez(buffer, x_train=x[train], y_train=(y[train] == 9).astype(np.int64),
             x_test=x[test], y_test=(y[test] == 9).astype(np.int64))
    atomic_write_bytes(path, buffer.getvalue())
    return path


def write(out: Path, rows: list[dict[str, Any]], quick: bool, seed: int,
          command: str | None) -> None:
    counts = {v: sum(r["verdict"] == v for r in rows)
              for v in ("beats", "declared", "fails", "not run")}
    failed = [f"{r['method']} on {r['problem']}" for r in rows if r["verdict"] == "fails"]
    note = (
        f"Verdicts: {counts['beats']} beat the trivial predictor, {counts['declared']} "
        f"declared before the run that the default cannot serve the problem, "
        f"{counts['fails']} failed{': ' + ', '.join(failed) if failed else ''}, "
        f"{counts['not run']} not run (the suite's time budget; reason in `health`).\n\n"
        "`value`: test accuracy (classification) or RMSE in the targets' units "
        "(regression) of the BMA predictive; `baseline`: the majority class of the "
        "test labels, or the training mean's RMSE (`bdlkit.evaluation.health.trivial_baseline`); "
        "a run beats it with accuracy more than 1 point above, or a lower RMSE; `health`: the failed run-health checks (rhat, ess: a chain "
        "that has not mixed in 30 epochs; sigma: a VI σ still at its start; majority: no "
        "better than the trivial predictor; diverged: the run stopped with NonFiniteError). "
        f"hetero-300 and homo-300 run `bdlkit.infer(model, M, data=(x, y), epochs="
        f"{defaults_own.EPOCHS})` on a user's own module. Declared: "
        + "; ".join(sorted({r["declared"][0] for r in rows if r["declared"]}))
        + "".join(f"\n\nNot in the table: `{m}`, {why}." for m, why in NO_DEFAULT.items()))
    write_results(out, "defaults", quick, command,
                  "every method's defaults against the trivial predictor",
                  f"`bdlkit fit --method M --data D --epochs {EPOCHS}` with no other option "
                  f"(seed {seed}); problems: {', '.join(dict.fromkeys(r['problem'] for r in rows))}",
                  rows, {"epochs": EPOCHS, "seed": seed, "counts": counts}, note=note,
                  table=[{k: r.get(k, "") for k in COLUMNS} for r in rows])
