"""The ``l2e`` suite: Learning to Explore against SGHMC, cyclical SGHMC, Meta-SGMCMC and deep
ensembles.

Kim et al. ("Learning to Explore for Stochastic Gradient MCMC", ICML 2024) report that
L2E's meta-learned sampler (a) predicts closer to HMC than deep ensembles and cyclical
SG-MCMC, (b) mixes faster per second than cyclical SGHMC (CIFAR-10 ESS/s 82.97 vs 56.61,
ratio 1.47, ``docs/l2e.md``), (c) costs about as much per step as SGHMC and (d) orders the
learned and cyclical samplers L2E > cSGMCMC > Meta-SGMCMC in ESS/s (CIFAR-10: 82.97,
56.61, 17.31). The suite
measures these on tasks held out of bdlkit's L2E meta-training (CNNs on 14x14 MNIST, MLPs
on mnist1d, teacher-student data): digits and CIFAR-10 never appear there; MNIST's training
images do (the CNN family), its test images and MLPs on it do not:

* ``digits-hmc``: MLP 64-H-10 on scikit-learn digits; agreement and total variation
  (``docs/metrics.md``) against an HMC reference built by ``bdlkit.runs.reference`` as in the
  ``hmc-agreement`` suite, cached in ``DIR/runs/reference`` and reused when the suite runs
  again;
* ``mnist-mlp``: MLP 784-100-100-10 on bdlkit's MNIST split (``load_mnist(train_size=5000,
  seed=0)``: 5 000 training and 5 000 test images of the shipped 10k set); OOD AUROC against
  notMNIST (predictive entropy as the headline, ``metrics.ood_metrics``, ``docs/metrics.md``,
  OOD detection) and accuracy, NLL and ECE under the corruptions of
  :mod:`bdlkit.data.corruptions` (MNIST-C table), averaged over corruption types per
  severity and overall;
* ``cifar10``: the 5 000-image CIFAR-10 subset (10 000 test images) with ResNet20-FRN
  (quick: the small ConvNet of :mod:`bdlkit.models.cnn`, width 8, depth 1).

Methods (:data:`METHODS`): ``l2e`` and ``meta_sgmcmc`` with their shipped meta-parameters
(both meta-trained by bdlkit on its offline task distribution, L2E's with the MNIST CNN
family too), ``sghmc`` (lr 0.005,
alpha 0.1), ``csghmc`` (4 cycles, 25 kept draws per cycle: the paper compares ESS over 100
draws for every method, and a sum of per-coordinate ESS grows with the draws) and ``ensemble``
(5 members, lr 1e-3); each runs :data:`CHAINS` independent chains (seeds seed, seed+1, ...;
an ensemble "chain" is one whole ensemble). Per (task, method), mean ± std over chains: BMA
accuracy, NLL and top-label ECE; wall time per step (the runner's wall time / steps) and
its ratio to sghmc's on the same task; ESS per second after ``docs/metrics.md`` (ESS; per
chain, the TFP single-chain ESS of every weight coordinate of the kept draws, summed over
coordinates, divided by the run's wall time), the same per coordinate divided by the number
of draws, and a function-space ESS/s (mean over probe test points of the ESS of the
true-class probability); within-chain diversity on the same probe points (mean pairwise
disagreement and total variation between the draws of one chain,
:func:`bdlkit.metrics.within_chain_diversity`; the HMC reference's chains get theirs too,
the scale of exploration a sampler should reach); layer-wise R-hat (``docs/metrics.md``, R-hat, item 3,
:func:`~bdlkit.diagnostics.layerwise_rhat` on the draws stacked (chains, draws, *shape)):
its mean and fraction below 1.1 over all coordinates. An ensemble has no chain: ESS and
R-hat are "n/a". ``results.json`` holds the rows, the claims (:func:`compute_claims`), the
settings, the command and the machine; ``report.md`` a table per task and the claims. A
method that fails keeps its row, with the error in ``status``.

Sizes (:func:`tasks`). ``--quick`` (CPU; measured 8 min with one torch thread on a 2-core
machine shared with another job, 36 runs plus the reference): digits MLP 64-10-10,
reference of 2 HMC chains x 120 iterations, 500 steps; MNIST 400 steps, OOD on the first
2 000 notMNIST images, 6 corruptions at severities 1, 3, 5 on the first 1 000 test images;
CIFAR-10 ConvNet 200 steps, l2e/sghmc keep every 5th draw of the second half (20 draws),
no corruptions (evaluating 10 000 test images per draw dominates there). csghmc's default
lr 0.5 diverges on the CIFAR-10 networks (NaN at step 8 for every seed of the ConvNet):
there it runs with lr 0.05 (``Task.hyper``). Full (CUDA when available): digits MLP 64-50-10 with the default reference
(4 chains x 400 iterations), 2 000 steps; MNIST 3 000 steps, all notMNIST, 6 corruptions x
5 severities on the whole test split; CIFAR-10 ResNet20-FRN 10 000 steps (256 epochs of the
5k subset, 100 kept draws), 6 corruptions x 5 severities on the first 2 000 test images.
Estimated, not measured: about 2 h on one recent GPU (the 15 ensemble runs of 5 members
dominate), days on a CPU. Batch size 128 and the prior N(0, 1) everywhere.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bdlkit import data as data_module
from bdlkit import metrics
from bdlkit.bench import l2e_report
from bdlkit.bench.common import (
    cached_reference,
    machine_info,
    mean_std,
    warm_up,
    write_results,
)
from bdlkit.bench.l2e_report import add_step_ratios, compute_claims, summarize_chains
from bdlkit.core.draws import KeptDraws
from bdlkit.data.corruptions import CORRUPTIONS, corrupt_dataset
from bdlkit.diagnostics import ess_per_second, ess_tfp_single_chain, layerwise_rhat
from bdlkit.evaluation.sampling import draw_predictions
from bdlkit.runs import directory as run_module
from bdlkit.runs.config import RunConfig
from bdlkit.runs.out_folder import prepare_out

DESCRIPTION = ("L2E against SGHMC, cyclical SGHMC, Meta-SGMCMC and deep ensembles on unseen "
               "tasks (HMC agreement, OOD, corruptions, ESS/s, R-hat, cost per step)")
#: Method -> hyperparameters (``l2e``, ``meta_sgmcmc``: the shipped meta-parameters and
#: their constants).
METHODS: dict[str, dict[str, Any]] = {
    "l2e": {},
    "meta_sgmcmc": {},
    "sghmc": {"lr": 0.005, "alpha": 0.1},
    # 4 cycles x 25 kept draws: as many draws as the others keep, so ESS sums compare
    "csghmc": {"samples_per_cycle": 25},
    "ensemble": {"lr": 1e-3},
}
CHAINS = 3
#: Samplers whose kept draws follow ``Task.thin`` (csghmc picks its own draws per cycle).
THINNED = ("l2e", "meta_sgmcmc", "sghmc")
#: The learned samplers and the module holding each one's shipped meta-parameters.
LEARNED = {"l2e": "bdlkit.l2e.pretrained", "meta_sgmcmc": "bdlkit.meta_sgmcmc.pretrained"}
MNIST_SPLIT = {"train_size": 5000, "seed": 0}


@dataclasses.dataclass(frozen=True)
class Task:
    """One evaluation task; see the module docstring for what each field is used for."""

    name: str
    data: str
    model: str
    model_kwargs: dict[str, Any]
    steps: int
    data_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    thin: int | None = None  # l2e/sghmc draw spacing (None: the runner's ~100 draws)
    reference_chains: int = 0  # > 0: score against an HMC reference (docs/metrics.md)
    reference_steps: int | None = None  # None: bdlkit reference's default (400)
    ood: str | None = None
    ood_points: int | None = None  # first n OOD inputs (None: all)
    corruptions: tuple[str, ...] = ()
    severities: tuple[int, ...] = ()
    corruption_points: int | None = None  # first n test images (None: all)
    probe_points: int = 256  # test points of the function-space ESS
    hyper: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # per method

    def describe(self) -> str:
        model = f"{self.model} {self.model_kwargs}" if self.model_kwargs else self.model
        parts = [f"{self.data} {self.data_kwargs}" if self.data_kwargs else self.data,
                 model, f"{self.steps} steps"]
        if self.thin:
            parts.append(f"l2e/sghmc thin {self.thin}")
        if self.reference_chains:
            parts.append(f"HMC reference {self.reference_chains} chains x "
                         f"{self.reference_steps or 400} iterations")
        if self.ood:
            parts.append(f"OOD {self.ood} ({self.ood_points or 'all'} inputs)")
        if self.corruptions:
            parts.append(f"{len(self.corruptions)} corruptions x severities "
                         f"{list(self.severities)} on {self.corruption_points or 'all'} "
                         "test images")
        return ", ".join(parts)


def tasks(quick: bool) -> list[Task]:
    """The three tasks at quick or full size."""
    corr = tuple(CORRUPTIONS)
    if quick:
        return [
            Task("digits-hmc", "digits", "mlp", {"hidden": [10]}, 500, reference_chains=2,
                 reference_steps=120),
            Task("mnist-mlp", "mnist", "mlp", {"hidden": [100, 100]}, 400,
                 dict(MNIST_SPLIT), ood="notmnist", ood_points=2000, corruptions=corr,
                 severities=(1, 3, 5), corruption_points=1000),
            # csghmc's lr_0 0.5 diverges on this ConvNet (NaN at step 8): 0.05; its 50-step
            # cycles sample 10 steps, so 5 draws each (20, as l2e/sghmc keep)
            Task("cifar10", "cifar10", "cnn", {"width": 8, "depth": 1}, 200, thin=5,
                 hyper={"csghmc": {"lr": 0.05, "samples_per_cycle": 5}}),
        ]
    return [
        Task("digits-hmc", "digits", "mlp", {"hidden": [50]}, 2000, reference_chains=4),
        Task("mnist-mlp", "mnist", "mlp", {"hidden": [100, 100]}, 3000, dict(MNIST_SPLIT),
             ood="notmnist", corruptions=corr, severities=(1, 2, 3, 4, 5)),
        Task("cifar10", "cifar10", "resnet20_frn", {}, 10_000, corruptions=corr,
             severities=(1, 2, 3, 4, 5), corruption_points=2000,
             hyper={"csghmc": {"lr": 0.05, "samples_per_cycle": 25}}),
    ]


# ------------------------------------------------------------------------ the suite
def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True) -> list[dict[str, Any]]:
    """Run every task and method (module docstring); returns the rows."""
    start = time.perf_counter()
    runs = out / "runs"
    # keep runs/: the HMC reference is reused (reference.build checks its options)
    prepare_out(out, overwrite=True, marker=".bdlkit-bench",
                entries=("results.json", "results.md", "report.md", "plots"))
    warm_up()
    device = "cuda" if not quick and torch.cuda.is_available() else "cpu"
    rows: list[dict[str, Any]] = []
    notes: dict[str, str] = {}
    for task in tasks(quick):
        base = {"model": task.model, "data": task.data, "model_kwargs": task.model_kwargs,
                "data_kwargs": task.data_kwargs}
        ds = run_module.load_dataset(RunConfig(method="sghmc", device=device, **base))
        extras: dict[str, Any] = {}
        if task.reference_chains:
            ref_row, ref_probs, notes[task.name] = reference_row(task, base, ds, runs, seed)
            rows.append(ref_row)
            extras["reference"] = ref_probs.to(ds.x_test.device)
        extras.update(_shifted_inputs(task, ds))
        task_rows = []
        for method, hyper in METHODS.items():
            task_rows.append(run_method(task, method, {**hyper, **task.hyper.get(method, {})},
                                         base, ds, extras, runs, seed, device))
            if echo:
                print("  " + l2e_report.echo_line(task_rows[-1]), file=sys.stderr)
        add_step_ratios(task_rows)
        rows.extend(task_rows)
    claims = compute_claims(rows)
    settings = {"quick": quick, "seed": seed, "chains": CHAINS, "device": device,
                "methods": METHODS, "batch_size": 128, "prior_scale": 1.0,
                "tasks": [dataclasses.asdict(t) for t in tasks(quick)],
                "task_notes": notes,
                "meta_params": {m: _meta_params_info(m) for m in LEARNED},
                "wall_s": time.perf_counter() - start}
    setup = l2e_report.setup_text(tasks(quick), settings)
    command = write_results(out, "l2e", quick, command,
                            "L2E against SG-MCMC, Meta-SGMCMC and ensembles", setup, rows,
                            {"claims": claims, "settings": settings},
                            note=l2e_report.claims_markdown(claims),
                            table=l2e_report.summary_table(rows))
    l2e_report.write_report(out, rows, claims, tasks(quick), settings, command,
                            machine_info())
    return rows


def reference_row(task: Task, base: dict[str, Any], ds: Any, runs: Path,
               seed: int) -> tuple[dict[str, Any], Tensor, str]:
    """Build or reuse the HMC reference exactly as ``hmc-agreement`` does (same options,
    same folder layout, so either suite reuses the other's reference in one ``DIR``)."""
    values = {"method": "hmc", "seed": seed, "model": base["model"], "data": base["data"],
              "model_kwargs": base["model_kwargs"]}
    if task.reference_steps is not None:
        values["steps"] = task.reference_steps
    ref, cfg, reused, seconds = cached_reference(values, runs / "reference",
                                                 task.reference_chains)
    probs = run_module.load_reference_for(runs / "reference", cfg, ds)  # checks the split
    values = metrics.classification_metrics(probs.to(ds.y_test.device).double(), ds.y_test)
    conv = ref.manifest["convergence"]["rhat_split"]
    note = (f"HMC reference: {ref.manifest['chains']} chains x "
            f"{ref.manifest['draws_per_chain']} draws ({cfg.steps} iterations, "
            f"`{cfg.hyper}`), split R-hat of the test predictive median "
            f"{conv['median']:.4f}, max {conv['max']:.4f}; "
            + ("reused from an earlier run" if reused else f"built in {seconds:.0f} s"))
    row = {"task": task.name, "method": "hmc", "status": "reference", "chains":
           ref.manifest["chains"], "draws": ref.manifest["draws_per_chain"],
           **{k: float(values[k]) for k in ("accuracy", "nll", "ece")},
           "agreement": 1.0, "total_variation": 0.0,
           "train_s": float(sum(ref.manifest["chain_seconds"])),
           **reference_diversity(runs / "reference", task.probe_points)}
    return row, probs, note


def _shifted_inputs(task: Task, ds: Any) -> dict[str, Any]:
    """OOD inputs and corrupted test subsets, made once per task."""
    out: dict[str, Any] = {}
    if task.ood:
        ood = data_module.load(task.ood)
        x = ood.x_test if len(ood.x_test) else ood.x_train
        out["ood_x"] = x[: task.ood_points].to(ds.x_test.device, ds.x_test.dtype)
    if task.corruptions:
        n = task.corruption_points or len(ds.x_test)
        sub = dataclasses.replace(ds, x_test=ds.x_test[:n], y_test=ds.y_test[:n])
        out["corrupted"] = [(name, severity, corrupt_dataset(sub, name, severity,
                                                              seed=severity))
                            for name in task.corruptions for severity in task.severities]
    return out


def run_method(task: Task, method: str, hyper: dict[str, Any], base: dict[str, Any],
                ds: Any, extras: dict[str, Any], runs: Path, seed: int,
                device: str) -> dict[str, Any]:
    """``CHAINS`` runs of ``method`` on ``task``, scored and summarised into one row."""
    chains: list[dict[str, Any]] = []
    draws: list[dict[str, Tensor]] = []
    errors: list[str] = []
    for c in range(CHAINS):
        s = seed + c
        try:
            thin = task.thin if method in THINNED else None
            cfg = RunConfig(method=method, steps=task.steps, seed=s, hyper=dict(hyper),
                            thin=thin, device=device, **base)
            output = run_module.fit(cfg, runs / task.name / f"{method}-seed{s}",
                                    overwrite=True)
            chain = score_chain(task, output, ds, extras)
            if isinstance(output.result.draws, KeptDraws):
                draws.append(weight_draws(output.result))
            chains.append(chain)
        except Exception as err:  # noqa: BLE001 - a failing method keeps its row
            errors.append(f"seed {s}: {type(err).__name__}: {str(err)[:300]}")
    row = summarize_chains(task.name, method, chains, errors)
    if draws:
        try:
            row.update(chain_diagnostics(draws, [c["train_s"] for c in chains]))
        except Exception as err:  # noqa: BLE001
            row["status"] += f"; diagnostics failed: {type(err).__name__}: {err}"
    elif chains:
        row["diagnostics"] = "n/a (no chain: independent ensemble members)"
    return row


def score_chain(task: Task, output: run_module.RunOutput, ds: Any,
                extras: dict[str, Any]) -> dict[str, Any]:
    """One chain's values: the run's own test metrics, plus agreement/TV, OOD AUROC,
    corruptions and the function-space ESS where the task asks for them."""
    result, values = output.result, output.metrics
    out: dict[str, Any] = {k: float(values[k]) for k in ("accuracy", "nll", "ece")}
    out["train_s"] = float(output.train_seconds)
    out["step_ms"] = 1e3 * out["train_s"] / task.steps
    out["draws"] = int(values["num_draws"])
    if "reference" in extras or "ood_x" in extras:
        test = result.predictive(ds.x_test)
        if "reference" in extras:
            out["agreement"] = metrics.agreement(test.probs, extras["reference"])
            out["total_variation"] = metrics.total_variation(test.probs, extras["reference"])
        if "ood_x" in extras:
            ood = metrics.ood_metrics(test, result.predictive(extras["ood_x"]))
            out.update({k: ood[k] for k in ("ood_auroc", "ood_auroc_maxprob", "ood_auroc_mi")
                        if k in ood})
    if extras.get("corrupted"):
        cells: dict[str, list[dict[str, float]]] = {}
        for _, severity, shifted in extras["corrupted"]:
            pred = result.predictive(shifted.x_test)
            v = metrics.classification_metrics(pred.probs, shifted.y_test, pred.log_probs)
            cells.setdefault(str(severity), []).append(v)
        out["corruptions"] = {sev: _mean_cells(c) for sev, c in cells.items()}
        overall = _mean_cells([v for c in cells.values() for v in c])
        out.update({f"corr_{k}": v for k, v in overall.items()})
    if isinstance(result.draws, KeptDraws) and out["draws"] >= 2:
        n = min(task.probe_points, len(ds.x_test))
        preds = draw_predictions(result, ds.x_test[:n])
        out["fn_ess_per_s"] = float(ess_per_second(
            float(function_ess(preds, ds.y_test[:n]).nanmean()), out["train_s"]))
        out.update(diversity(preds))
    return out


def diversity(preds: Tensor) -> dict[str, float]:
    """Within-chain diversity (:func:`bdlkit.metrics.within_chain_diversity`) of one chain's
    draw predictions ``(draws, n, K)``, as the row keys ``div_disagreement``/``div_tv``."""
    values = metrics.within_chain_diversity(preds)
    return {"div_disagreement": values["disagreement"], "div_tv": values["tv"]}


def reference_diversity(folder: Path, probe_points: int) -> dict[str, float]:
    """The HMC reference chains' within-chain diversity on the first ``probe_points`` test
    points: mean (and ``_std``) over its chains."""
    from bdlkit.runs.reference import chain_predictions

    per_chain = [diversity(chain_predictions(d)[0][:, :probe_points])
                 for d in sorted((folder / "chains").iterdir()) if d.is_dir()]
    return mean_std(per_chain, ("div_disagreement", "div_tv"))


def _mean_cells(cells: Sequence[Mapping[str, float]]) -> dict[str, float]:
    return {k: statistics.fmean(c[k] for c in cells) for k in ("accuracy", "nll", "ece")}


# --------------------------------------------------------------- pure pieces (tested)
def weight_draws(result: Any) -> dict[str, Tensor]:
    """A sampler result's kept draws, ``name -> (draws, *shape)`` on the CPU (network
    parameters only: a likelihood's own parameters are left out, as in the run report)."""
    samples = result.samples
    if not isinstance(samples, dict):
        raise ValueError("the l2e suite needs network draws (a dict of parameters)")
    return {k: v.detach().cpu() for k, v in samples.items() if not k.startswith("likelihood.")}


def weight_ess(draws: Mapping[str, Tensor]) -> Tensor:
    """Per-coordinate single-chain ESS (``docs/metrics.md``, ESS: TFP truncation) of one
    chain's draws ``name -> (draws, *shape)``, all coordinates concatenated: shape ``(d,)``."""
    return torch.cat([ess_tfp_single_chain(x.reshape(x.shape[0], -1)).reshape(-1).cpu()
                      for x in draws.values()])


def function_ess(preds: Tensor, labels: Tensor) -> Tensor:
    """ESS of each probe point's true-class probability along one chain: ``preds``
    ``(draws, n, K)`` from :func:`~bdlkit.evaluation.sampling.draw_predictions`, labels
    ``(n,)``; returns ``(n,)``."""
    idx = labels.to(preds.device).long().view(1, -1, 1).expand(preds.shape[0], -1, 1)
    return ess_tfp_single_chain(preds.gather(2, idx)[..., 0])


def chain_diagnostics(chains: Sequence[Mapping[str, Tensor]],
                      seconds: Sequence[float]) -> dict[str, Any]:
    """ESS/s of each chain and the layer-wise R-hat over the chains (``docs/metrics.md``).

    ``chains``: one ``name -> (draws, *shape)`` mapping per chain; ``seconds``: each chain's
    sampling wall time. ESS: summed over every weight coordinate, divided by the seconds;
    ``ess_frac``: the mean ESS per coordinate over the number of draws. R-hat:
    :func:`layerwise_rhat` on the draws stacked ``(chains, draws, *shape)`` (needs the same
    number of draws, at least 4, in every chain); its ``"all"`` mean and fraction < 1.1.
    """
    if len(chains) != len(seconds) or not chains:
        raise ValueError("need one wall time per chain and at least one chain")
    sums, fracs, per_s = [], [], []
    for draws, sec in zip(chains, seconds):
        ess = weight_ess(draws)
        n = next(iter(draws.values())).shape[0]
        sums.append(float(ess.nansum()))
        fracs.append(float(ess.nanmean()) / n)
        per_s.append(float(ess_per_second(sums[-1], sec)))
    out: dict[str, Any] = {"ess_sum": statistics.fmean(sums),
                           "ess_per_s": statistics.fmean(per_s),
                           "ess_frac": statistics.fmean(fracs), "ess_per_s_chains": per_s}
    if len(per_s) > 1:
        out["ess_per_s_std"] = statistics.stdev(per_s)
    counts = {next(iter(d.values())).shape[0] for d in chains}
    if len(counts) == 1 and min(counts) >= 4:
        stacked = {k: torch.stack([d[k] for d in chains]) for k in chains[0]}
        rhat = layerwise_rhat(stacked)
        out.update({"rhat_mean": rhat["all"]["mean"],
                    "rhat_frac_below_1.1": rhat["all"]["frac_below_1.1"],
                    "rhat_coords": rhat["all"]["num"],
                    "rhat_layers": {k: {"mean": v["mean"], "frac_below_1.1":
                                        v["frac_below_1.1"]} for k, v in rhat.items()
                                    if k != "all"}})
    return out


def _meta_params_info(method: str) -> dict[str, Any]:
    """Which meta-parameters the learned sampler ``method`` ran with: the shipped file's
    path, SHA-256 and provenance."""
    try:
        shipped = importlib.import_module(LEARNED[method])
        path = shipped.pretrained_path()
        pre = shipped.load_pretrained()
        return {"path": "bdlkit/" + path.relative_to(path.parents[2]).as_posix(),
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "constants": pre.constants.to_dict(), "info": dict(pre.info)}
    except Exception as err:  # noqa: BLE001 - the l2e rows then carry the error
        return {"error": f"{type(err).__name__}: {err}"}
