"""The ``vision`` suite: Bayesian fine-tuning of pretrained vision networks.

The score-VI paper's vision experiment fine-tunes pretrained ResNet-101 and ViT-L-32
(about 305 M parameters) on Pets, Flowers, Aircraft and DTD with ADVI and score VI, the
prior centred at the pretrained weights, and reports error, ECE and NLL; its claim is
"the same accuracy as ADVI, better ECE and NLL". This suite is that protocol at CPU size:

1. **pretraining**: MAP (Adam) of ResNet20-FRN and of the zoo ViT on the shipped CIFAR-10
   subset; its weights are written as ``<model>/pretrained.safetensors`` (state_dict
   names), the file a user would bring;
2. **fine-tuning**: ``advi``, ``score_vi`` (its proximal solver, ``closed_form``, at its
   defaults: the default gradient solver takes ADVI's iterates) and ``ivon`` from those
   weights, with the prior N(pretrained, σ₀² I), σ₀ = 1 (BayesDLL's ``prior_sig``), every
   weight Bayesian, the same steps, batch and seed; the MAP row (the pretrained network
   itself) is the control printed beside them, and the peers (:mod:`bdlkit.bench.peers`)
   run by their own libraries on the same data, steps and draws: ``ivon_opt`` (its weight
   decay pulls towards 0, the only prior it has, not towards the pretrained weights) and
   ``laplace`` (laplace-torch's last-layer KFAC Laplace on the pretrained network, prior
   precision by marginal likelihood);
3. test error, NLL and ECE of each BMA predictive on a seeded random ``test`` of the
   10 000 test images (the file is sorted by class: a prefix would be one class), and
   σ moved = median σ / σ₀ of q (a σ that never left its initial value fakes a VI row).

Verdict per model: paired differences d = score_vi − advi over the seeds, with 95 %
Student-t intervals (``t₀.₉₇₅,ₙ₋₁ · SE``); *supported* needs the error interval inside ±1
point and the NLL and ECE intervals below 0; *not supported* when an interval lies on the
wrong side; one seed, or a VI row whose σ never left σ₀ (median σ within a factor 1.5 of
it: ``bdlkit.engine.vi_checks``), is *inconclusive*. ``docs/vision.md`` has the recipe at
the paper's scale.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from scipy.stats import t as student_t

from bdlkit.algorithms import get_method
from bdlkit.algorithms.options import options
from bdlkit.bench.bnn_lowdata import result_sigma
from bdlkit.bench.common import prepare_bench_out, warm_up, write_results
from bdlkit.engine.vi_checks import SIGMA_FACTOR
from bdlkit.runs.config import RunConfig

DESCRIPTION = ("fine-tune pretrained ResNet20-FRN and ViT on CIFAR-10 with advi and score_vi, "
               "prior at the pretrained weights (error, NLL, ECE; the paper's vision claim)")
MODELS = ("resnet20_frn", "vit")
PRIOR_SCALE = 1.0
INIT_STD = 1e-2  # both VI methods' σ₀ (their default)
#: ADVI at its default lr 1e-2 (at 1e-3, σ stays at σ₀ for 200 steps: MAP with noise);
#: score_vi's proximal solver at the ω tuned by ``bdlkit bench bnn-lowdata`` (MNIST MLP)
VI = {"advi": ("advi", {}), "score_vi": ("score_vi", {"solver": "closed_form"}),
      "ivon": ("ivon", {})}
PEER_ROWS = ("ivon_opt", "laplace")


@dataclass(frozen=True)
class Sizes:
    """How big a run is: training images, steps of pretraining and of each fine-tuning,
    test images, VI draws in the predictive, seeds."""

    train: int
    map_steps: int
    vi_steps: int
    test: int
    draws: int
    seeds: int
    batch: int = 64


QUICK = Sizes(train=1000, map_steps=1000, vi_steps=200, test=1000, draws=8, seeds=1)
FULL = Sizes(train=5000, map_steps=3000, vi_steps=2000, test=10000, draws=32, seeds=3)


def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True, sizes: Sizes | None = None,
        models: tuple[str, ...] = MODELS) -> list[dict[str, Any]]:
    """Pretrain, fine-tune and compare (module docstring); writes ``results.{json,md}``."""
    from bdlkit.runs import directory as run_module

    sizes = sizes or (QUICK if quick else FULL)
    device = "cuda" if not quick and torch.cuda.is_available() else "cpu"  # as bench l2e
    prepare_bench_out(out)
    warm_up()
    rows: list[dict[str, Any]] = []
    for model in models:
        for s in range(seed, seed + sizes.seeds):
            data_kwargs = {"train_size": sizes.train, "test_size": sizes.test, "seed": 0}
            base = {"model": model, "data": "cifar10", "seed": s, "batch_size": sizes.batch,
                    "device": device,
                    "prior_scale": PRIOR_SCALE, "data_kwargs": data_kwargs}
            folder = out / "runs" / model / f"seed{s}"
            pre = run_module.fit(RunConfig(method="map", steps=sizes.map_steps, **base),
                                 folder / "map", overwrite=True)
            weights = folder / "pretrained.safetensors"
            save_file({k: v.detach().cpu().contiguous()
                       for k, v in pre.result.algorithm.params(pre.result.state).items()},
                      str(weights))
            rows.append(_row(model, s, "map", pre, None))
            for name, (method, hyper) in VI.items():
                cfg = RunConfig(method=method, steps=sizes.vi_steps, hyper=dict(hyper),
                                pretrained=str(weights), eval_samples=sizes.draws, **base)
                output = run_module.fit(cfg, folder / name, overwrite=True)
                rows.append(_row(model, s, name, output, result_sigma(output.result)))
            rows += [_peer_row(name, model, s, sizes, weights, data_kwargs)
                     for name in PEER_ROWS]
            if echo:
                print("  " + "  ".join(f"{r['method']} err {r.get('error', math.nan):.4f} "
                                       f"nll {r.get('nll', math.nan):.3f}"
                                       for r in rows[-6:]) + f"  ({model}, seed {s})",
                      file=sys.stderr)
    verdicts = [verdict(rows, m) for m in models]
    setup = (f"CIFAR-10 subset: {sizes.train} training and {sizes.test} test images (random "
             f"subsets, seed 0); pretraining: MAP {sizes.map_steps} steps; fine-tuning: "
             f"{sizes.vi_steps} steps each, batch {sizes.batch}, prior N(pretrained, "
             f"{PRIOR_SCALE}² I), advi's σ₀ {INIT_STD} (score_vi's and ivon's from their hess_init), "
             f"{sizes.draws} VI draws in the predictive; "
             f"seeds {seed}..{seed + sizes.seeds - 1}; device {device}")
    write_results(out, "vision", quick, command, "Bayesian fine-tuning of pretrained vision "
                  "networks (advi vs score_vi)", setup, rows,
                  {"sizes": sizes.__dict__, "device": device, "verdicts": verdicts}, note=_note(verdicts))
    return rows


def _row(model: str, seed: int, method: str, output: Any, sigma: dict[str, float] | None
         ) -> dict[str, Any]:
    m = output.metrics
    return {"model": model, "seed": seed, "method": method, "error": 1.0 - m["accuracy"],
            "nll": m["nll"], "ece": m["ece"],
            "sigma_moved": sigma["sigma_moved"] if sigma else math.nan,
            "train_s": output.train_seconds}


def _peer_row(name: str, model: str, seed: int, sizes: Sizes, weights: Path,
              data_kwargs: dict[str, Any]) -> dict[str, Any]:
    """A peer fine-tuned from (``ivon_opt``) or fitted on (``laplace``) the pretrained
    network, scored on the same test images (a missing peer: its status)."""
    import time

    from safetensors.torch import load_file

    from bdlkit import data, metrics, models
    from bdlkit.bench import peers

    row: dict[str, Any] = {"model": model, "seed": seed, "method": name, "sigma_moved": math.nan}
    why = peers.missing(name)
    if why is not None:
        return {**row, "status": f"skipped: {why}"}
    ds = data.load("cifar10", **data_kwargs)
    state = load_file(str(weights))

    def make_net() -> torch.nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            net = models.build_for_data(model, ds.input_shape, ds.num_classes)
        net.load_state_dict(state)
        return net

    train, start = (ds.x_train, ds.y_train), time.perf_counter()
    if name == "ivon_opt":
        defaults = {o.name: o.default for o in options(get_method("ivon").ALGORITHM)}
        net, opt = peers.ivon_opt_fit(make_net, train, steps=sizes.vi_steps,
                                      batch_size=sizes.batch, seed=seed, lr=defaults["lr"],
                                      hess_init=defaults["hess_init"], prior_scale=PRIOR_SCALE)
        probs = peers.ivon_opt_probs(net, opt, ds.x_test, sizes.draws, seed)
    else:
        la = peers.laplace_fit(make_net(), train, batch_size=sizes.batch)
        probs = peers.laplace_probs(la, ds.x_test, sizes.draws, seed)
    values = metrics.classification_metrics(probs, ds.y_test)
    return {**row, "error": 1.0 - values["accuracy"], "nll": values["nll"],
            "ece": values["ece"], "train_s": time.perf_counter() - start}


def verdict(rows: list[dict[str, Any]], model: str) -> dict[str, Any]:
    """The claim "same accuracy as ADVI, better ECE and NLL" on ``model`` (module docstring)."""
    by = {(r["method"], r["seed"]): r for r in rows if r["model"] == model}
    seeds = sorted({s for (_, s) in by})
    diffs = {k: torch.tensor([by["score_vi", s][k] - by["advi", s][k] for s in seeds],
                             dtype=torch.float64) for k in ("error", "nll", "ece")}
    mean = {k: float(d.mean()) for k, d in diffs.items()}
    n = len(seeds)
    half = {k: float(student_t.ppf(0.975, n - 1) * d.std() / math.sqrt(n)) if n > 1
            else math.nan for k, d in diffs.items()}  # 95 % interval half-widths
    still = [m for m in ("advi", "score_vi") if not all(
        1 / SIGMA_FACTOR > by[m, s].get("sigma_moved", math.inf) or
        by[m, s].get("sigma_moved", math.inf) > SIGMA_FACTOR for s in seeds)]
    if n < 2:
        word = "inconclusive (one seed)"
    elif still:
        word = f"inconclusive (σ of {', '.join(still)} never left σ₀)"
    elif (abs(mean["error"]) + half["error"] <= 0.01 and mean["nll"] + half["nll"] < 0
          and mean["ece"] + half["ece"] < 0):
        word = "supported"
    elif mean["nll"] - half["nll"] > 0 or mean["ece"] - half["ece"] > 0 or (
            abs(mean["error"]) - half["error"] > 0.01):
        word = "not supported"
    else:
        word = "inconclusive"
    return {"model": model, "verdict": word, "seeds": n,
            **{f"d_{k}": mean[k] for k in mean}, **{f"ci95_{k}": half[k] for k in half}}


def _note(verdicts: list[dict[str, Any]]) -> str:
    lines = ["## Claim: score_vi fine-tuning has ADVI's accuracy with better ECE and NLL", "",
             "d = score_vi − advi (error in fractions), mean over seeds:", ""]
    for v in verdicts:
        lines.append(f"- **{v['model']}**: {v['verdict']}; d_error {v['d_error']:+.4f}, "
                     f"d_nll {v['d_nll']:+.4f}, d_ece {v['d_ece']:+.4f} "
                     f"(95 % t-interval ±: {v['ci95_error']:.4f}, {v['ci95_nll']:.4f}, "
                     f"{v['ci95_ece']:.4f}; {v['seeds']} seed(s))")
    lines += ["", "`sigma_moved`: median σ of q over σ₀; near 1, q's spread is its "
              "initialisation and the VI row is MAP with noise, whatever its metrics."]
    return "\n".join(lines)
