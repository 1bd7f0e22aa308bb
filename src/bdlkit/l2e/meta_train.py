"""Meta-training of L2E by evolution strategies: ``bdlkit meta-train l2e --out DIR``.

``docs/l2e.md`` (Meta-training). Each outer step draws one task (:mod:`.tasks`), evaluates the BMA
meta-loss of 2P unrolls of the L2E sampler (P antithetic pairs of meta-parameters,
:mod:`.es`) and takes one clipped Adam step on the ES gradient.

* **Unroll.** The 2P chains run together under ``torch.func.vmap`` over their
  meta-parameters: one batched gradient and two batched MLP passes per inner step. Both
  chains of a pair share the task, the network initialisation (Haiku's truncated normal,
  Inner loop), the minibatches and the momentum noise (common random numbers); pairs differ
  in initialisation and noise. r₀ = 0, moments 0; the inner loss is the per-datum loss of
  bdlkit's convention, mean CE + ½·‖θ‖²/N (a N(0, I) prior; the code's prior is not known,
  ``docs/sgmcmc.md``, the potential of L2E's released code).
* **Meta-loss** (BMA meta-loss): ``−mean_batch log((1/K) Σ_k softmax(f_{θ_k}(x))_y)`` on one
  ``outer_valid`` batch, θ_k the K = ``num_samples`` states spread over the last
  ``sample_window`` inner steps (the code: the last 500 of 3 000, every 50).
* **Outer loop.** Adam (lr 0.01, global-norm clip 1; ``reset_adam_each_step`` reproduces
  the released script) until ``outer_steps`` or the wall-clock budget. Every randomness
  of outer step i is seeded by (seed, i), so a resumed run repeats the same tasks.
* **Files** in DIR: ``config.json``; ``checkpoint.safetensors`` (φ, Adam state, step;
  written atomically every ``checkpoint_every`` steps and at the end); ``history.json``
  (per step: task, mean meta-loss, loss of each sign, ĝ norm, dropped pairs, seconds);
  ``meta_params.safetensors`` (the current φ with its constants, loadable by the ``l2e``
  sampler); ``meta_loss.png``, the curve.

Two defaults differ from the released run so that a useful sampler comes out of an hour
on 2 CPU cores (both are options and are stored with the meta-parameters):

* the inner loop is 300 steps, not 3 000, and P = 4 pairs per outer step (under vmap 4
  pairs cost well under 4 times 1), not 1;
* ``precond_mult`` = 1, not 1e-3. The position step is ε·precond_mult·out₁ with out₁ of
  order 1 at initialisation: with 1e-3 a fresh sampler moves ~3e-6 per step, nothing
  happens in the unrolls, and ES spends its first hundreds of outer steps only scaling the
  MLP up (the released run took ~2 000 outer steps, 6 GPU hours). With 1 the first
  sampler already takes Adam-sized steps (~1e-3) and ES learns their direction and size.
  Only the product precond_mult·out₁ matters, so the sampler family is the same.

The sampler's constants are options too and are stored with the meta-parameters; among them
``kinetic_form="momentum"`` (β = s·r with a learned mass, ``bdlkit.l2e.kinetic``) and
``grad_scale="num_data"`` (each task's own N). ``docs/l2e.md`` (Does it sample?) compares the
variants: with the free form and the BMA meta-loss of short unrolls, ES learns a β that
ignores the momentum, i.e. an optimiser.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F

from bdlkit.core import distributed, meta_files, meta_run
from bdlkit.core.distributed import SINGLE, Topology
from bdlkit.core.errors import InputError
from bdlkit.core.lock import run_lock
from bdlkit.core.rng import fold_in
from bdlkit.core.serialization import (
    CorruptFileError,
    remove_stale_temps,
    save_json,
)
from bdlkit.l2e import es
from bdlkit.l2e.kinetic import (
    META_KEYS,
    Constants,
    MetaParams,
    init_meta_params,
    learned_kinetic,
)
from bdlkit.l2e.kinetic import l2e_update as _update
from bdlkit.l2e.pretrained import save_meta_params
from bdlkit.l2e.tasks import Task, available_families, sample_task
from bdlkit.models.cnn import haiku_truncated_normal_


def _print(text: str) -> None:
    print(text, flush=True)


#: options that may change between a run and its resumption
RESUMABLE = ("outer_steps", "budget_minutes", "checkpoint_every")


@dataclass(frozen=True)
class MetaTrainConfig:
    seed: int = 0
    population: int = 4
    sigma: float = 0.01
    lr: float = 0.01
    grad_clip: float = 1.0
    reset_adam_each_step: bool = False
    inner_steps: int = 300
    batch_size: int = 128
    num_samples: int = 10
    sample_window: int = 100
    outer_steps: int = 100_000
    budget_minutes: float = 60.0
    checkpoint_every: int = 10
    families: tuple[str, ...] = field(default_factory=available_families)
    constants: Constants = field(default_factory=lambda: Constants(precond_mult=1.0))

    def __post_init__(self) -> None:
        meta_run.check_options(self, ("population", "inner_steps", "batch_size", "num_samples",
                                      "sample_window", "outer_steps", "checkpoint_every"),
                               ("sigma", "lr", "grad_clip", "budget_minutes"),
                               available_families())
        if self.sample_window > self.inner_steps or self.num_samples > self.sample_window:
            raise ValueError("meta-train needs num_samples <= sample_window <= inner_steps, got "
                             f"{self.num_samples}, {self.sample_window}, {self.inner_steps}")

    def to_dict(self) -> dict[str, Any]:
        return meta_run.options_dict(self)


# --------------------------------------------------------------------------- φ as a vector
def flatten_meta(meta: MetaParams) -> Tensor:
    return meta_files.flatten(meta, META_KEYS)


def unflatten_meta(vec: Tensor, like: MetaParams) -> MetaParams:
    """Split the last dimension of ``vec`` back into ``like``'s tensors (batch dims kept)."""
    return meta_files.unflatten(vec, {k: tuple(like[k].shape) for k in META_KEYS})


# --------------------------------------------------------------------------- the unroll
def haiku_init(module: torch.nn.Module, generator: torch.Generator) -> dict[str, Tensor]:
    """A fresh Haiku-style initialisation of ``module``'s parameters (``docs/l2e.md``,
    Inner loop): weights truncated normal (fan_in = every dimension but the first), biases
    0, any other parameter (e.g. a normalisation scale) as the module has it."""
    out = {}
    for name, p in module.named_parameters():
        if p.dim() >= 2:
            out[name] = haiku_truncated_normal_(torch.empty_like(p), math.prod(p.shape[1:]),
                                                generator)
        elif name.endswith("bias"):
            out[name] = torch.zeros_like(p)
        else:
            out[name] = p.detach().clone()
    return out


def unroll_losses(points: Tensor, like: MetaParams, task: Task, cfg: MetaTrainConfig,
                  seed: int, part: slice = slice(None)) -> Tensor:
    """BMA meta-loss of each of the 2P pair-interleaved meta-parameter vectors in ``points``,
    or of the pairs ``part`` of them only (a process's share of the population): the
    random numbers of every pair are drawn all the same, so a pair's loss does not depend
    on which process evaluates it."""
    pairs, n = points.shape[0] // 2, task.num_data
    c = cfg.constants.for_data(n)
    rows = slice(2 * (part.start or 0), 2 * (pairs if part.stop is None else part.stop))
    metas = unflatten_meta(points[rows], like)
    module, names = task.module, [k for k, _ in task.module.named_parameters()]
    gen = torch.Generator().manual_seed(seed)

    def pairwise(tensors: list[dict[str, Tensor]]) -> dict[str, Tensor]:
        return {k: torch.stack([t[k] for t in tensors]).repeat_interleave(2, dim=0)
                for k in names}

    theta = {k: v[rows] for k, v in pairwise([haiku_init(module, gen)
                                              for _ in range(pairs)]).items()}
    r = {k: torch.zeros_like(v) for k, v in theta.items()}
    m = {k: v.new_zeros((v.shape[0], 6, *v.shape[1:])) for k, v in theta.items()}

    def loss(params: dict[str, Tensor], x: Tensor, y: Tensor) -> Tensor:
        prior = sum(p.square().sum() for p in params.values()) / (2 * n)
        return F.cross_entropy(functional_call(module, params, (x,)), y) + prior

    def step(meta: MetaParams, th: dict[str, Tensor], rr: dict[str, Tensor],
             mm: dict[str, Tensor], z: dict[str, Tensor], x: Tensor, y: Tensor
             ) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
        g = grad(loss)(th, x, y)
        kinetic = learned_kinetic(meta, c)
        return _update(kinetic, c, [th[k] for k in names], [rr[k] for k in names],
                       [mm[k] for k in names], [g[k] for k in names], [z[k] for k in names])

    vstep = vmap(step, in_dims=(0, 0, 0, 0, 0, None, None))
    v_idx = torch.randperm(len(task.y_valid), generator=gen)[: cfg.batch_size]
    x_val, y_val = task.x_valid[v_idx], task.y_valid[v_idx]
    vlogp = vmap(lambda th: F.log_softmax(functional_call(module, th, (x_val,)), dim=-1))
    order = _batch_order(n, cfg.batch_size, cfg.inner_steps, gen)
    every = cfg.sample_window // cfg.num_samples
    keep = set(range(cfg.inner_steps - 1, cfg.inner_steps - 1 - every * cfg.num_samples,
                     -every))
    logps = []
    with torch.no_grad():
        for t in range(cfg.inner_steps):
            idx = order[t]
            z = {k: v[rows] for k, v in pairwise([{k: torch.randn(v.shape[1:], generator=gen)
                                                   for k, v in theta.items()}
                                                  for _ in range(pairs)]).items()}
            th, rr, mm = vstep(metas, theta, r, m, z, task.x_train[idx], task.y_train[idx])
            theta, r, m = (dict(zip(names, v)) for v in (th, rr, mm))
            if t in keep:
                logps.append(vlogp(theta))
    stacked = torch.stack(logps)  # (K, 2P, B, C)
    bma = torch.logsumexp(stacked, dim=0) - math.log(len(logps))
    return -bma.gather(-1, y_val.expand(bma.shape[0], -1).unsqueeze(-1)).squeeze(-1).mean(-1)


def _batch_order(n: int, batch: int, steps: int, gen: torch.Generator) -> Tensor:
    """Minibatch indices for ``steps`` steps: fresh permutations, epoch after epoch."""
    epochs = math.ceil(steps * batch / n) + 1
    flat = torch.cat([torch.randperm(n, generator=gen) for _ in range(epochs)])
    if batch > n:
        raise ValueError(f"batch_size {batch} exceeds the task's {n} training examples")
    return flat[: steps * batch].reshape(steps, batch)


# --------------------------------------------------------------------------- outer loop
def meta_train(out: str | Path, cfg: MetaTrainConfig, *, overwrite: bool = False,
               data_root: str | None = None, command: str | None = None,
               echo: Callable[[str], None] | None = _print,
               topology: Topology = SINGLE) -> dict[str, Any]:
    """Run (or resume) meta-training into ``out``, holding its lock (one writer, stale
    temporary files removed); returns a summary (also in DIR files).

    On several processes (``topology``, ``torchrun ... -m bdlkit meta-train l2e``) the
    ES population is split: each rank unrolls ``population / world`` antithetic pairs
    (with every pair's own random numbers, as one process draws them), the losses are
    all-gathered, and every rank takes the same Adam step; rank 0 alone writes ``out``."""
    out = Path(out)
    if cfg.population % topology.world:
        raise InputError(f"--population {cfg.population} cannot be split over {topology.world} "
                         "processes: use a multiple of the process count")
    if topology.rank != 0:
        distributed.barrier()  # rank 0 has read, or replaced, the folder
        return _meta_train(out, cfg, False, data_root, command, None, topology)
    with run_lock(out, "meta-training l2e"):
        remove_stale_temps(out)
        return _meta_train(out, cfg, overwrite, data_root, command, echo, topology)


def _meta_train(out: Path, cfg: MetaTrainConfig, overwrite: bool, data_root: str | None,
                command: str | None, echo: Callable[[str], None] | None,
                topology: Topology) -> dict[str, Any]:
    say = echo or (lambda _: None)
    like = init_meta_params(torch.Generator().manual_seed(cfg.seed))
    adam = es.Adam(lr=cfg.lr, reset_each_step=cfg.reset_adam_each_step)
    phi, opt, history = _resume(out, cfg, like, adam, overwrite, say)
    if topology.rank == 0:
        save_json(out / "config.json", {**cfg.to_dict(), "command": command})
        if topology.world > 1:
            distributed.barrier()
    deadline = time.perf_counter() + cfg.budget_minutes * 60.0
    torch.set_flush_denormal(True)  # tiny values in diverging unrolls: keep CPU math fast
    try:
        step = _outer_loop(out, cfg, like, adam, phi, opt, history, deadline, data_root,
                           command, say, topology)
    finally:
        torch.set_flush_denormal(False)  # torch's default
    return {"steps": step,
            "final_meta_loss": meta_run.smoothed(history)[-1] if history else None,
            "out": str(out)}


def _outer_loop(out: Path, cfg: MetaTrainConfig, like: MetaParams, adam: es.Adam, phi: Tensor,
                opt: dict[str, Tensor], history: list[dict[str, Any]], deadline: float,
                data_root: str | None, command: str | None, say: Callable[[str], None],
                topology: Topology = SINGLE) -> int:
    step, said = len(history), -1  # said: the step whose progress line was printed
    writes = topology.rank == 0
    while step < cfg.outer_steps and not _out_of_time(deadline, topology):
        t0 = time.perf_counter()
        task = sample_task(fold_in(cfg.seed, step), cfg.families, data_root)
        seed = fold_in(cfg.seed, step, 2)
        ghat, losses, dropped = es.estimate(
            lambda pts, task=task, seed=seed: _population_losses(pts, like, task, cfg, seed,
                                                                 topology),
            phi, cfg.population, cfg.sigma, torch.Generator().manual_seed(fold_in(cfg.seed,
                                                                                  step, 1)))
        phi, opt = adam.update(phi, es.clip_by_global_norm(ghat, cfg.grad_clip), opt)
        finite = losses[torch.isfinite(losses)]
        history.append({"step": step, "task": task.name,
                        "meta_loss": float(finite.mean()) if len(finite) else None,
                        "loss_plus": float(losses[0::2].mean()),
                        "loss_minus": float(losses[1::2].mean()),
                        "grad_norm": float(ghat.norm()), "dropped_pairs": dropped,
                        "seconds": time.perf_counter() - t0})
        step += 1
        if step % cfg.checkpoint_every == 0 and writes:
            _save(out, cfg, phi, like, opt, history, command)
            say(_progress(history, cfg))
            said = step
    if writes:
        _save(out, cfg, phi, like, opt, history, command)
        if said != step:  # the last step's line is not printed twice
            say(_progress(history, cfg))
    return step


def _population_losses(points: Tensor, like: MetaParams, task: Task, cfg: MetaTrainConfig,
                       seed: int, topology: Topology) -> Tensor:
    """The 2P losses: this process's share of the pairs, all-gathered across processes."""
    if topology.world == 1:
        return unroll_losses(points, like, task, cfg, seed)
    share = cfg.population // topology.world
    mine = unroll_losses(points, like, task, cfg, seed,
                         slice(topology.rank * share, (topology.rank + 1) * share))
    return distributed.all_gather_stack(mine, None, topology.world).reshape(-1)


def _out_of_time(deadline: float, topology: Topology) -> bool:
    """Whether the budget is spent, decided together (every rank takes the same steps)."""
    late = time.perf_counter() >= deadline
    return distributed.any_of([late], None)[0] if topology.world > 1 else late


def _progress(history: list[dict[str, Any]], cfg: MetaTrainConfig) -> str:
    if not history:
        return "no outer step ran (the budget was used up before the first one)"
    last = history[-1]
    return (f"outer step {last['step'] + 1}/{cfg.outer_steps}: meta-loss "
            f"{meta_run.smoothed(history)[-1]:.4f} (moving average of "
            f"{min(len(history), 20)}), {last['task']}, {last['seconds']:.1f} s/step")


def _resume(out: Path, cfg: MetaTrainConfig, like: MetaParams, adam: es.Adam, overwrite: bool,
            say: Callable[[str], None]) -> tuple[Tensor, dict[str, Tensor], list[dict]]:
    """A fresh start, or the state of the checkpoint in ``out`` when its options match
    (:func:`bdlkit.core.meta_run.resume`)."""
    fresh = flatten_meta(like)
    found = meta_run.resume(out, cfg.to_dict(), RESUMABLE, overwrite)
    if found is None:
        return fresh, adam.init(fresh), []
    tensors, history = found
    ckpt = out / meta_run.CHECKPOINT
    try:
        opt = {"m": tensors["adam_m"], "v": tensors["adam_v"], "t": tensors["adam_t"]}
        phi = tensors["phi"]
    except KeyError as err:
        raise CorruptFileError(f"{ckpt} is not a readable meta-training checkpoint (it lacks "
                               f"{err}); pass --overwrite to start afresh") from err
    if phi.shape != fresh.shape:
        raise CorruptFileError(f"{ckpt} holds {phi.numel()} meta-parameters, expected "
                               f"{fresh.numel()}; pass --overwrite to start afresh")
    say(f"resuming meta-training from outer step {len(history)} ({ckpt})")
    return phi, opt, history


def _save(out: Path, cfg: MetaTrainConfig, phi: Tensor, like: MetaParams,
          opt: dict[str, Tensor], history: list[dict[str, Any]], command: str | None) -> None:
    meta_run.save_checkpoint(out, {"phi": phi, "adam_m": opt["m"], "adam_v": opt["v"],
                                   "adam_t": opt["t"]}, history, cfg.to_dict())
    smoothed = meta_run.smoothed(history)
    save_meta_params(out / "meta_params.safetensors", unflatten_meta(phi, like), cfg.constants,
                     {"command": command or "", "seed": cfg.seed, "outer_steps": len(history),
                      "meta_loss_smoothed": smoothed[-1] if smoothed else None,
                      "families": list(cfg.families)})
    # log scale: the first unrolls of a fresh sampler can be 10-30x the rest
    meta_run.plot_curve(history, out / "meta_loss.png", "L2E meta-training",
                        "BMA meta-loss (NLL, log scale)")


__all__ = ["MetaTrainConfig", "flatten_meta", "haiku_init", "meta_train",
           "unflatten_meta", "unroll_losses"]
