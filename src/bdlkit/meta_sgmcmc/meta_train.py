"""Meta-training of Meta-SGMCMC: ``bdlkit meta-train meta-sgmcmc --out DIR``.

``docs/meta_sgmcmc.md`` (Meta-training). The authors' protocol, on bdlkit's offline task
distribution (:mod:`bdlkit.l2e.tasks`, the one L2E's meta-training draws from, so that the
two learned samplers see the same data and neither sees a ``bench l2e`` task):

* **Epochs.** Each outer epoch draws one task and runs ``unrolls`` unroll calls on it: the
  first from θ ~ N(0, init_std²) and p = 0 in ``chains`` parallel chains, each next one
  continuing from the last state ("continuation unrolls"). One Adam step on the Q_f and D_f
  networks follows each unroll call.
* **Unroll.** ``unroll_steps`` sampler steps (:mod:`.dynamics`, Γ by autograd with
  ``create_graph=True``) on minibatches of ``batch_size``; the target network's energy and
  gradient are evaluated per chain (``torch.func.vmap``) and held fixed (no second-order
  terms, as the authors' code). Every ``loss_every`` steps the cross-chain KL surrogate
  (:func:`.stein.kl_surrogate`) of the chains' states is added to the loss; truncated
  backpropagation every ``tbptt`` steps: the accumulated loss is differentiated into the
  meta-gradient and the chains' graph is cut, after that step's KL evaluation (so every
  evaluation carries a gradient; one extra energy evaluation at the end of the unroll). The Adam step uses the mean over the KL
  evaluations of the unroll.
* **Optimiser.** Adam, lr 3e-3, betas (0.5, 0.9) (the authors' HEAD), eps 1e-8.
* **Reproducibility.** Every randomness of (epoch e, unroll k) is seeded by (seed, e, k):
  the task by (seed, e). A run resumed from its checkpoint (written after each unroll,
  with the chains' state) repeats the uninterrupted run exactly (the same tensors and records).

Files in DIR: see :mod:`bdlkit.core.meta_run`. The default budget (``epochs``, ``unrolls``,
``unroll_steps``) is the authors' 40 × 8 unrolls of 200 steps; the chains are 20, as theirs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.func import functional_call, grad_and_value, vmap
from torch.nn import functional as F

from bdlkit.core import meta_files, meta_run
from bdlkit.core.lock import run_lock
from bdlkit.core.rng import fold_in
from bdlkit.core.serialization import CorruptFileError, remove_stale_temps, save_json
from bdlkit.l2e import es
from bdlkit.l2e.tasks import Task, available_families, sample_task
from bdlkit.meta_sgmcmc import dynamics as dyn
from bdlkit.meta_sgmcmc.pretrained import save_meta_params
from bdlkit.meta_sgmcmc.stein import kl_surrogate

#: options that may change between a run and its resumption
RESUMABLE = ("epochs", "budget_minutes")
#: The default task families, the MLP ones. The authors meta-train on an MLP, and on 2 CPU
#: cores a CNN task's step (20 chains x batch 500) costs 6-20x an MLP's (88-309 ms vs 15 ms)
MLP_FAMILIES = ("mnist1d-mlp", "teacher-mlp")


def default_families() -> tuple[str, ...]:
    return tuple(f for f in MLP_FAMILIES if f in available_families())


def _print(text: str) -> None:
    print(text, flush=True)


@dataclass(frozen=True)
class MetaTrainConfig:
    seed: int = 0
    chains: int = 20
    epochs: int = 40
    unrolls: int = 8
    unroll_steps: int = 200
    tbptt: int = 15
    loss_every: int = 3
    batch_size: int = 500
    init_std: float = 0.2
    lr: float = 3e-3
    beta1: float = 0.5
    beta2: float = 0.9
    budget_minutes: float = 60.0
    families: tuple[str, ...] = field(default_factory=default_families)
    constants: dyn.Constants = field(default_factory=dyn.Constants)

    def __post_init__(self) -> None:
        meta_run.check_options(self, ("chains", "epochs", "unrolls", "unroll_steps", "tbptt",
                                      "loss_every", "batch_size"),
                               ("init_std", "lr", "budget_minutes"), available_families())
        if self.chains < 2:
            raise ValueError(f"meta-train chains must be >= 2 (the Stein estimator compares "
                             f"chains), got {self.chains}")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"meta-train {name} must be in [0, 1), "
                                 f"got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        return meta_run.options_dict(self)


# --------------------------------------------------------------------------- φ as a vector
def flatten_meta(meta: dyn.MetaParams) -> Tensor:
    return meta_files.flatten(meta, dyn.META_KEYS)


def unflatten_meta(vec: Tensor) -> dyn.MetaParams:
    return meta_files.unflatten(vec, dyn.META_SHAPES)


# --------------------------------------------------------------------------- the unroll
@dataclass
class Chains:
    """The chains' state between unrolls: θ and p as (chains, d)."""

    theta: Tensor
    p: Tensor


def _energy(task: Task) -> Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]:
    """(g, u) of one chain's flat θ on a minibatch: u = mean CE + ½‖θ‖²/N (a N(0, I) prior),
    g = ∇u (both per datum: U/N and ∂U/N)."""
    module, n = task.module, task.num_data
    named = list(module.named_parameters())
    sizes = [p.numel() for _, p in named]

    def loss(flat: Tensor, x: Tensor, y: Tensor) -> Tensor:
        params = {k: c.reshape(p.shape) for (k, p), c in zip(named, flat.split(sizes))}
        prior = flat.square().sum() / (2 * n)
        return F.cross_entropy(functional_call(module, params, (x,)), y) + prior

    return vmap(grad_and_value(loss), in_dims=(0, None, None))


def num_params(task: Task) -> int:
    return sum(p.numel() for p in task.module.parameters())


def unroll(phi: Tensor, chains: Chains, task: Task, cfg: MetaTrainConfig, seed: int
           ) -> tuple[Chains, Tensor | None, dict[str, Any]]:
    """One unroll call from ``chains``: returns the chains' last state, the meta-gradient
    (mean over the KL evaluations; None when every window was non-finite) and statistics."""
    c, n = cfg.constants, task.num_data
    scales = c.scales(n)
    eps = scales.eps
    gen = torch.Generator().manual_seed(seed)
    energy = _energy(task)
    phi = phi.detach().requires_grad_()
    meta = unflatten_meta(phi)
    total = torch.zeros_like(phi)
    theta, p = chains.theta.detach(), chains.p.detach()
    window: list[Tensor] = []
    kls: list[float] = []
    dropped = 0
    for t in range(cfg.unroll_steps + 1):
        idx = torch.randint(0, n, (cfg.batch_size,), generator=gen)
        with torch.no_grad():
            g, u = energy(theta.detach(), task.x_train[idx], task.y_train[idx])
        u = u.unsqueeze(-1)
        # the KL of θ_t, then the cut at t: every evaluation sees θ with its window's graph
        if t > 0 and t % cfg.loss_every == 0:
            window.append(kl_surrogate(theta, -n * g))
        if t > 0 and (t % cfg.tbptt == 0 or t == cfg.unroll_steps):
            dropped += _backward(window, phi, total, kls)
            window = []
            theta, p = theta.detach(), p.detach()
        if t == cfg.unroll_steps:
            break
        mom = dyn.momentum_terms(meta, c, scales, u, p, g, create_graph=True)
        z = torch.randn(theta.shape, generator=gen, dtype=theta.dtype)
        p = dyn.momentum_update(p, n * g, mom, eps, 1.0, z)
        pos = dyn.position_terms(meta, c, u, p, create_graph=True)
        theta = dyn.position_update(theta, p, pos, eps, 1.0)
    evaluations = len(kls)
    stats = {"meta_loss": sum(kls) / evaluations if evaluations else None,
             "dropped_windows": dropped, "energy": float(u.mean()),
             "theta_rms": float(theta.square().mean().sqrt())}
    ghat = total / evaluations if evaluations else None
    return Chains(theta.detach(), p.detach()), ghat, stats


def _backward(window: list[Tensor], phi: Tensor, total: Tensor, kls: list[float]) -> int:
    """Add the window's meta-gradient to ``total``; 1 when it is dropped (non-finite)."""
    if not window:
        return 0
    loss = torch.stack(window).sum()
    grads, = torch.autograd.grad(loss, phi, allow_unused=True)
    if not torch.isfinite(loss) or grads is None or not torch.isfinite(grads).all():
        return 1
    total.add_(grads)
    kls.extend(float(v.detach()) for v in window)
    return 0


def fresh_chains(task: Task, cfg: MetaTrainConfig, seed: int) -> Chains:
    gen = torch.Generator().manual_seed(seed)
    theta = cfg.init_std * torch.randn(cfg.chains, num_params(task), generator=gen)
    return Chains(theta, torch.zeros_like(theta))


# --------------------------------------------------------------------------- outer loop
def meta_train(out: str | Path, cfg: MetaTrainConfig, *, overwrite: bool = False,
               data_root: str | None = None, command: str | None = None,
               echo: Callable[[str], None] | None = _print) -> dict[str, Any]:
    """Run (or resume) meta-training into ``out`` holding its lock; returns a summary."""
    out = Path(out)
    with run_lock(out, "meta-training meta-sgmcmc"):
        remove_stale_temps(out)
        say = echo or (lambda _: None)
        adam = es.Adam(lr=cfg.lr, b1=cfg.beta1, b2=cfg.beta2, eps=1e-8, eps_root=0.0)
        phi, opt, chains, history = _resume(out, cfg, adam, overwrite, say)
        save_json(out / "config.json", {**cfg.to_dict(), "command": command})
        deadline = time.perf_counter() + cfg.budget_minutes * 60.0
        torch.set_flush_denormal(True)  # tiny values in the unrolls: keep CPU math fast
        try:
            steps = _outer_loop(out, cfg, adam, phi, opt, chains, history, deadline,
                                data_root, command, say)
        finally:
            torch.set_flush_denormal(False)  # torch's default
    smooth = meta_run.smoothed(history)
    return {"steps": steps, "final_meta_loss": smooth[-1] if smooth else None,
            "out": str(out)}


def _outer_loop(out: Path, cfg: MetaTrainConfig, adam: es.Adam, phi: Tensor,
                opt: dict[str, Tensor], chains: Chains | None, history: list[dict[str, Any]],
                deadline: float, data_root: str | None, command: str | None,
                say: Callable[[str], None]) -> int:
    step = len(history)
    while step < cfg.epochs * cfg.unrolls and time.perf_counter() < deadline:
        t0 = time.perf_counter()
        epoch, k = divmod(step, cfg.unrolls)
        task = sample_task(fold_in(cfg.seed, epoch), cfg.families, data_root)
        if k == 0 or chains is None:
            chains = fresh_chains(task, cfg, fold_in(cfg.seed, epoch, 0, 1))
        chains, ghat, stats = unroll(phi, chains, task, cfg, fold_in(cfg.seed, epoch, k))
        if ghat is not None:
            phi, opt = adam.update(phi, ghat, opt)
        if not torch.isfinite(chains.theta).all() or not torch.isfinite(chains.p).all():
            chains = None  # a diverged unroll: the next one starts fresh chains
        history.append({"step": step, "epoch": epoch, "unroll": k, "task": task.name,
                        **stats, "grad_norm": None if ghat is None else float(ghat.norm()),
                        "restarted": chains is None, "seconds": time.perf_counter() - t0})
        step += 1
        _save(out, cfg, phi, opt, chains, history, command)
        say(_progress(history, cfg))
    _save(out, cfg, phi, opt, chains, history, command)
    return step


def _progress(history: list[dict[str, Any]], cfg: MetaTrainConfig) -> str:
    if not history:
        return "no outer step ran (the budget was used up before the first one)"
    last = history[-1]
    loss = last["meta_loss"]
    return (f"outer step {last['step'] + 1}/{cfg.epochs * cfg.unrolls} (epoch "
            f"{last['epoch'] + 1}, unroll {last['unroll'] + 1}): KL surrogate "
            f"{'n/a' if loss is None else f'{loss:.4g}'}, mean energy {last['energy']:.4f}, "
            f"{last['task']}, {last['seconds']:.1f} s")


def _resume(out: Path, cfg: MetaTrainConfig, adam: es.Adam, overwrite: bool,
            say: Callable[[str], None]
            ) -> tuple[Tensor, dict[str, Tensor], Chains | None, list[dict[str, Any]]]:
    fresh = flatten_meta(dyn.init_meta_params(torch.Generator().manual_seed(cfg.seed)))
    found = meta_run.resume(out, cfg.to_dict(), RESUMABLE, overwrite)
    if found is None:
        return fresh, adam.init(fresh), None, []
    tensors, history = found
    try:
        phi = tensors["phi"]
        opt = {"m": tensors["adam_m"], "v": tensors["adam_v"], "t": tensors["adam_t"]}
        chains = (Chains(tensors["chain_theta"], tensors["chain_p"])
                  if "chain_theta" in tensors else None)
    except KeyError as err:
        raise CorruptFileError(f"{out / meta_run.CHECKPOINT} lacks {err}; pass --overwrite "
                               "to start afresh") from err
    if phi.shape != fresh.shape:
        raise CorruptFileError(f"{out / meta_run.CHECKPOINT} holds {phi.numel()} "
                               f"meta-parameters, expected {fresh.numel()}; pass --overwrite")
    say(f"resuming meta-training from outer step {len(history)} "
        f"({out / meta_run.CHECKPOINT})")
    return phi, opt, chains, history


def _save(out: Path, cfg: MetaTrainConfig, phi: Tensor, opt: dict[str, Tensor],
          chains: Chains | None, history: list[dict[str, Any]], command: str | None) -> None:
    tensors = {"phi": phi.detach(), "adam_m": opt["m"], "adam_v": opt["v"], "adam_t": opt["t"]}
    if chains is not None:
        tensors.update(chain_theta=chains.theta, chain_p=chains.p)
    meta_run.save_checkpoint(out, tensors, history, cfg.to_dict())
    smooth = meta_run.smoothed(history)
    save_meta_params(out / "meta_params.safetensors", unflatten_meta(phi.detach()),
                     cfg.constants,
                     {"command": command or "", "seed": cfg.seed, "outer_steps": len(history),
                      "meta_loss_smoothed": smooth[-1] if smooth else None,
                      "families": list(cfg.families)})
    meta_run.plot_curve(history, out / "meta_loss.png", "Meta-SGMCMC meta-training",
                        "cross-chain KL surrogate", log=False)


__all__ = ["Chains", "MetaTrainConfig", "flatten_meta", "fresh_chains", "meta_train",
           "unflatten_meta", "unroll"]
