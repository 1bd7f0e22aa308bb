"""``bdlkit reference``: build and cache a gold-standard posterior predictive for a small BNN.

The data flow::

    RunConfig (model, data, prior, method = hmc | nuts, ...)
      → C chains, each an ordinary run directory ``DIR/chains/chain-<c>`` (seed + c, so a
        fresh network initialisation per chain; checkpoints, so an interrupted reference
        resumes), run in parallel worker processes
      → test-set predictive probabilities of every kept draw, per chain
      → ``probs.safetensors``: ``probs`` (n_test, K), the BMA over all chains and draws, and
        ``chain_probs`` (C, n_test, K), each chain's own BMA
      → ``reference.json``: what was run (the configuration, a fingerprint of the test split,
        the command), convergence of the predictive (split R̂, rank-normalised R̂ and bulk
        ESS over the C chains for every test-point × class probability: median, max,
        fraction above 1.05), acceptance and wall time per chain
      → ``report.md``.

``bdlkit evaluate RUN --reference DIR`` then reports agreement and total variation of RUN's
predictive against ``probs`` (``docs/metrics.md``), after checking that RUN uses the same
data and test split. Running the command again with the same options reuses the finished
chains (the cache); other options need ``--overwrite`` or another ``--out``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import math
import multiprocessing
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bdlkit.algorithms import get_method
from bdlkit.core.lock import REFERENCE_MARKER, chain_name, run_lock
from bdlkit.core.serialization import (
    atomic_write_bytes,
    load_json,
    load_tensors,
    save_json,
    save_tensors,
)
from bdlkit.diagnostics import ess_bulk_vehtari21, rhat_split, rhat_vehtari21
from bdlkit.evaluation.sampling import draw_predictions
from bdlkit.runs import directory as run_module
from bdlkit.runs import likelihood_choice, out_folder
from bdlkit.runs.config import RunConfig
from bdlkit.runs.figures import markdown_table

FORMAT = 1
MARKER = REFERENCE_MARKER  # (its chains, chains/chain-<c>, are run folders inside it)
RHAT_GOAL = 1.05


def with_defaults(values: dict[str, Any]) -> dict[str, Any]:
    """``bdlkit reference`` defaults for what ``values`` (RunConfig fields) leave unset: 400
    iterations, the first half warm-up/burn-in; for ``hmc`` the Izmailov et al. (2021)
    trajectory length (π/2)·prior scale with ε adapted over the first 150 iterations (at
    most the burn-in) from 0.005; for ``nuts`` a warm-up as long as the burn-in."""
    values = {**values, "hyper": dict(values.get("hyper") or {})}
    if values.get("steps") is None and values.get("epochs") is None:
        values["steps"] = 400
    # full batch: one step per epoch
    length = values["steps"] if values.get("steps") is not None else values["epochs"]
    burnin = values.get("burnin")
    warmup = min(150, length // 2) if burnin is None else min(150, burnin)
    hyper = values["hyper"]
    if values["method"] == "hmc" and "num_leapfrog" not in hyper:
        hyper.setdefault("trajectory_length",
                         round(math.pi / 2 * float(values.get("prior_scale", 1.0)), 4))
        hyper.setdefault("step_size", 0.005)
    if values["method"] == "hmc":
        hyper.setdefault("adapt_steps", warmup)
    if values["method"] == "nuts":
        hyper.setdefault("warmup", length // 2 if burnin is None else burnin)
    return values


@dataclasses.dataclass(frozen=True)
class ReferencePredictive:
    """Reference predictive probabilities with what produced them."""

    probs: Tensor  # (n_test, K)
    chain_probs: Tensor  # (chains, n_test, K)
    manifest: dict[str, Any]


def test_split_digest(ds: Any) -> str:
    """SHA-256 of the test labels and inputs (float32 bytes): the split a reference is for."""
    h = hashlib.sha256()
    h.update(ds.y_test.detach().cpu().contiguous().numpy().tobytes())
    h.update(ds.x_test.detach().cpu().float().contiguous().numpy().tobytes())
    return h.hexdigest()


def build(cfg: RunConfig, out: str | os.PathLike, *, chains: int = 4, workers: int | None = None,
          overwrite: bool = False, command: str | None = None) -> ReferencePredictive:
    """Run ``chains`` chains of ``cfg`` into ``out`` (or reuse them) and write the reference."""
    if chains < 2:
        raise ValueError(f"chains must be >= 2 (R-hat compares chains), got {chains}")
    if get_method(cfg.method).KIND != "sampler":
        raise ValueError(f"a reference needs an MCMC method (hmc, nuts); {cfg.method!r} is not")
    out = Path(out)
    wanted = {"config": cfg.to_dict(), "chains": chains}
    previous = out / "reference.json"
    if previous.exists() and not overwrite:
        manifest = load_json(previous)
        stored = manifest.get("config")
        if isinstance(stored, dict) and "method" in stored:  # new options get their defaults
            manifest["config"] = RunConfig.from_dict(stored, f"{previous}").to_dict()
        if {k: manifest.get(k) for k in wanted} == wanted:
            return load(out)
        raise FileExistsError(f"{out} holds a reference built with other options; pass "
                              "--overwrite to replace it or choose another --out")
    ds = run_module.load_dataset(cfg)  # bad data or options fail here, before any writing
    if ds.task != "classification":
        raise ValueError(f"a reference holds class probabilities; {cfg.data!r} is "
                         f"{ds.task} data (agreement/TV are defined for classification)")
    if out_folder.occupied(out) and not (out / MARKER).is_file():
        raise FileExistsError(f"{out} exists and is not a bdlkit reference folder; choose "
                              "another --out")
    if overwrite and out_folder.occupied(out):  # one chain built, writing nothing: a bad
        # model or method option is refused before --overwrite deletes the old reference
        run_module.resolved(cfg, run_module.build_runner(cfg, out / "chains", ds=ds)[0])
    with run_lock(out, "building a reference"):
        return _build(cfg, ds, out, chains, workers, overwrite, command)


def _build(cfg: RunConfig, ds: Any, out: Path, chains: int, workers: int | None,
           overwrite: bool, command: str | None) -> ReferencePredictive:
    """:func:`build` past its checks, holding the folder's lock."""
    configs = [dataclasses.replace(cfg, seed=cfg.seed + c) for c in range(chains)]
    dirs = [out / "chains" / chain_name(c) for c in range(chains)]
    if not overwrite:  # an interrupted reference: its chains must be this reference's
        for chain_cfg, run_dir in zip(configs, dirs):
            _check_chain(chain_cfg, run_dir)
    if overwrite or not (out / MARKER).exists():
        out_folder.prepare_out(out, overwrite, marker=MARKER,
                               entries=("chains", "reference.json", "probs.safetensors",
                                        "report.md"))
    seconds = _run_chains(configs, dirs, workers)
    return _combine(cfg, dirs, seconds, out, chains, command)


def _check_chain(cfg: RunConfig, run_dir: Path) -> None:
    """Refuse to reuse a chain directory that was started with other options."""
    if not (run_dir / "config.yaml").is_file():
        return
    saved = run_module.read_config(run_dir).to_dict()
    wanted = cfg.to_dict()
    wanted["hyper"] = {**saved.get("hyper", {}), **wanted["hyper"]}  # saved: defaults filled
    for key, value in wanted.items():
        if key in ("data_root", "device", "log_every", "checkpoint_minutes", "batch_size",
                   "threads", "data_sha256"):
            continue  # where and how a run is logged, not what it samples (full batch);
            # the data's digest the chain's resume checks (bdlkit.runs.run_record)
        if value is None and key in ("burnin", "thin", "max_samples", "checkpoint_every"):
            continue  # defaults, filled in the saved config
        if key == "likelihood":  # "auto" (a chain saved before --likelihood, or asked for
            # now) is what runs resolve it to: references are for classes
            value, saved[key] = (_resolved_likelihood(value),
                                 _resolved_likelihood(saved.get(key, likelihood_choice.AUTO)))
        if saved.get(key) != value:
            raise FileExistsError(
                f"{run_dir} is a chain started with {key}={saved.get(key)!r}, not {value!r}; "
                "pass --overwrite to rebuild the reference, or choose another --out")


def _resolved_likelihood(name: str) -> str:
    return likelihood_choice.DEFAULTS["classification"] if name == likelihood_choice.AUTO else name


def _run_chains(configs: list[RunConfig], dirs: list[Path], workers: int | None) -> list[float]:
    workers = workers or min(len(configs), os.cpu_count() or 1)
    # share this process's thread budget (torch's, which honours OMP_NUM_THREADS) among
    # the workers: more threads than cores makes OpenMP's spinning barriers crawl
    threads = max(1, torch.get_num_threads() // workers)
    if workers == 1:
        before = torch.get_num_threads()
        try:
            return [_run_chain(c, d, threads) for c, d in zip(configs, dirs)]
        finally:
            torch.set_num_threads(before)
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        return list(pool.map(_run_chain, configs, dirs, [threads] * len(configs)))


def _run_chain(cfg: RunConfig, run_dir: Path, threads: int) -> float:
    """One chain: reuse a finished run (the cache), resume an interrupted one, else start it;
    returns its training wall time in seconds."""
    torch.set_num_threads(threads)
    try:
        result = run_module.load_run(run_dir)[0]
    except (FileNotFoundError, ValueError):
        ckpts = run_dir / "checkpoints"
        if ckpts.is_dir() and any(ckpts.iterdir()):
            result = run_module.resume(run_dir).result
        else:
            result = run_module.fit(cfg, run_dir, overwrite=True).result
    return float(result.config.get("wall_time_s") or 0.0)


@torch.no_grad()
def chain_predictions(run_dir: Path) -> tuple[Tensor, dict[str, Any], Any]:
    """Test probabilities of every kept draw of the run in ``run_dir``: (draws, n, K)."""
    result, cfg, ds = run_module.load_run(run_dir)
    probs = draw_predictions(result, ds.x_test)
    history = [h for h in result.history if h["step"] > (cfg.burnin or 0)]  # after warm-up
    accept = [h["accept_prob"] for h in history if "accept_prob" in h]
    stats = {"draws": len(probs), "accept_prob": sum(accept) / len(accept) if accept else None,
             "step_size": history[-1].get("step_size") if history else None}
    return probs, stats, ds


def convergence(per_chain: Tensor) -> dict[str, Any]:
    """Split R̂ (BDA3), rank-normalised R̂ (Vehtari et al. 2021) and bulk ESS of every
    test-point × class probability over chains: ``per_chain`` is (chains, draws, n, K)."""
    x = per_chain.flatten(2)
    out: dict[str, Any] = {}
    for name, fn in (("rhat_split", rhat_split), ("rhat_rank", rhat_vehtari21),
                     ("ess_bulk", ess_bulk_vehtari21)):
        values = fn(x)
        finite = values[torch.isfinite(values)]
        out[name] = {"median": float(finite.median()) if len(finite) else float("nan"),
                     "max": float(finite.max()) if len(finite) else float("nan"),
                     "min": float(finite.min()) if len(finite) else float("nan"),
                     "undefined": int((~torch.isfinite(values)).sum())}
        if name.startswith("rhat"):
            out[name]["frac_above_1.05"] = float((finite > RHAT_GOAL).double().mean())
    return out


def _combine(cfg: RunConfig, dirs: list[Path], seconds: list[float], out: Path, chains: int,
             command: str | None) -> ReferencePredictive:
    preds, stats, ds = [], [], None
    for run_dir in dirs:
        p, s, ds = chain_predictions(run_dir)
        preds.append(p)
        stats.append(s)
    draws = min(len(p) for p in preds)
    if draws < 4:
        raise ValueError(f"only {draws} draws kept per chain; R-hat needs >= 4: run more steps")
    per_chain = torch.stack([p[-draws:] for p in preds])  # (chains, draws, n, K)
    chain_probs = per_chain.mean(1)
    probs = chain_probs.mean(0)
    manifest = {
        "format": FORMAT, "kind": "bdlkit-reference", "config": cfg.to_dict(), "chains": chains,
        "method": cfg.method, "data": cfg.data, "data_kwargs": cfg.data_kwargs,
        "num_test": len(ds.y_test), "num_classes": int(probs.shape[1]),
        "test_fingerprint": test_split_digest(ds), "draws_per_chain": draws,
        "convergence": convergence(per_chain), "chain_stats": stats,
        "chain_seconds": seconds, "command": command,
    }
    save_tensors(out / "probs.safetensors", {"probs": probs, "chain_probs": chain_probs})
    save_json(out / "reference.json", manifest)
    atomic_write_bytes(out / "report.md", _report(manifest).encode())
    return ReferencePredictive(probs, chain_probs, manifest)


def load(path: str | os.PathLike) -> ReferencePredictive:
    """Read a reference folder written by :func:`build` (JSON and safetensors only)."""
    path = Path(path)
    if not (path / "reference.json").is_file() or not (path / "probs.safetensors").is_file():
        raise FileNotFoundError(
            f"{path} is not a finished bdlkit reference (reference.json and probs.safetensors "
            "missing); build one with `bdlkit reference hmc --out DIR`, or pass an .npy file")
    manifest = load_json(path / "reference.json")
    if not isinstance(manifest, dict) or manifest.get("kind") != "bdlkit-reference":
        raise ValueError(f"{path}/reference.json is not a bdlkit reference manifest")
    tensors = load_tensors(path / "probs.safetensors")
    return ReferencePredictive(tensors["probs"], tensors["chain_probs"], manifest)


def check_matches(ref: ReferencePredictive, data: str, ds: Any) -> None:
    """Refuse a reference built for another data set or test split (rows must align)."""
    m = ref.manifest
    if m["data"] != data or m["test_fingerprint"] != test_split_digest(ds):
        raise ValueError(
            f"the reference was built for data {m['data']!r} ({m['num_test']} test rows, "
            f"options {m['data_kwargs']}) but this run uses {data!r} ({len(ds.y_test)} test "
            "rows) or another test split: agreement needs the same test points; build a "
            "reference with the run's --data and --data-kwargs")


def _report(m: dict[str, Any]) -> str:
    conv = m["convergence"]
    rows = [{"statistic": k, **{s: v.get(s) for s in ("median", "max", "frac_above_1.05")}}
            for k, v in conv.items()]
    stats = [{"chain": c, "draws": s["draws"], "accept_prob (after burn-in)": s["accept_prob"],
              "step_size": s["step_size"], "seconds": sec}
             for c, (s, sec) in enumerate(zip(m["chain_stats"], m["chain_seconds"]))]
    ok = conv["rhat_split"]["median"] < RHAT_GOAL
    cfg = m["config"]
    return "\n".join([
        f"# Reference posterior predictive: {m['method']} on {m['data']}\n",
        f"Command: `{m['command']}`  " if m.get("command") else "",
        f"Model `{cfg['model']}` {cfg['model_kwargs'] or ''}, prior scale {cfg['prior_scale']}, "
        f"T = {cfg['temperature']}, {cfg['dtype']}; {m['chains']} chains x "
        f"{m['draws_per_chain']} draws; {m['num_test']} test points x {m['num_classes']} "
        "classes.\n",
        "## Convergence of the test predictive probabilities\n",
        markdown_table(rows, ["statistic", "median", "max", "frac_above_1.05"]), "",
        f"Median split R-hat {'<' if ok else '>='} {RHAT_GOAL} "
        f"({'met' if ok else 'NOT met: run longer chains'}); the max over all "
        f"{m['num_test'] * m['num_classes']} probabilities is reported next to it. Vehtari "
        "et al. (2021) recommend rank-normalised R-hat < 1.01 for every quantity, a stricter "
        "criterion (`rhat_rank`).\n",
        "## Chains\n", markdown_table(stats, ["chain", "draws", "accept_prob (after burn-in)",
                                             "step_size", "seconds"]), "",
    ]) + "\n"
