"""``bdlkit meta-train meta-sgmcmc``: the command line of
:mod:`bdlkit.meta_sgmcmc.meta_train`."""

from __future__ import annotations

import argparse
import shlex
from dataclasses import replace
from typing import Any

from bdlkit.core import meta_run
from bdlkit.meta_sgmcmc.meta_train import MetaTrainConfig, meta_train

EXAMPLES = """examples:
  bdlkit meta-train meta-sgmcmc --out runs/msg-meta --budget-minutes 5
  bdlkit meta-train meta-sgmcmc --out runs/msg-meta     # resumes the run in runs/msg-meta
  bdlkit fit --method meta_sgmcmc --meta-params runs/msg-meta/meta_params.safetensors \\
      --model mlp --data digits --out runs/msg"""


def add_parser(sub: Any, formatter: type) -> argparse.ArgumentParser:
    d = MetaTrainConfig()
    p = sub.add_parser(
        "meta-sgmcmc", allow_abbrev=False, formatter_class=formatter, epilog=EXAMPLES,
        help="Meta-SGMCMC's Q_f and D_f networks, by truncated backpropagation",
        description="Meta-train Meta-SGMCMC's curl (Q_f) and diffusion (D_f) networks on "
        "parallel chains of small offline classification tasks, minimising the cross-chain "
        "KL surrogate (Stein gradient estimator) by truncated backpropagation through the "
        "sampler. Writes DIR/meta_params.safetensors (use with `bdlkit fit --method "
        "meta_sgmcmc --meta-params`), a checkpoint, history.json and meta_loss.png; "
        "rerunning with --out DIR resumes.")
    meta_run.add_run_options(p, d.budget_minutes)
    p.add_argument("--epochs", type=int, default=d.epochs,
                   help=f"outer epochs, one task each (default {d.epochs})")
    p.add_argument("--unrolls", type=int, default=d.unrolls,
                   help=f"unroll calls (Adam steps) per epoch, 1 + continuations "
                   f"(default {d.unrolls})")
    p.add_argument("--unroll-steps", type=int, default=d.unroll_steps,
                   help=f"sampler steps per unroll call (default {d.unroll_steps})")
    p.add_argument("--chains", type=int, default=d.chains,
                   help=f"parallel chains of the KL surrogate (default {d.chains})")
    p.add_argument("--tbptt", type=int, default=d.tbptt,
                   help=f"truncate backpropagation every this many steps (default {d.tbptt})")
    p.add_argument("--loss-every", type=int, default=d.loss_every,
                   help=f"evaluate the KL surrogate every this many steps (default "
                   f"{d.loss_every})")
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--init-std", type=float, default=d.init_std,
                   help="std of the chains' initial parameters")
    p.add_argument("--lr", type=float, default=d.lr, help="Adam learning rate")
    p.add_argument("--families", default=",".join(d.families),
                   help="comma-separated task families (default: the MLP families)")
    c = d.constants
    p.add_argument("--step-mult", type=float, default=c.step_mult, help="eps = sqrt(step_mult / N)")
    p.add_argument("--d-max", type=float, default=c.d_max, help="upper clamp of D_f")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--data-root", default=None, help="data root (MNIST for the CNN tasks)")
    p.add_argument("--overwrite", action="store_true", help="start afresh in an existing DIR")
    return p


def run(args: argparse.Namespace, argv: list[str]) -> int:
    d = MetaTrainConfig()
    cfg = MetaTrainConfig(
        seed=args.seed, chains=args.chains, epochs=args.epochs, unrolls=args.unrolls,
        unroll_steps=args.unroll_steps, tbptt=args.tbptt, loss_every=args.loss_every,
        batch_size=args.batch_size, init_std=args.init_std, lr=args.lr,
        budget_minutes=args.budget_minutes,
        families=tuple(f.strip() for f in args.families.split(",") if f.strip()),
        constants=replace(d.constants, step_mult=args.step_mult, d_max=args.d_max))
    summary = meta_train(args.out, cfg, overwrite=args.overwrite, data_root=args.data_root,
                         command=shlex.join(["bdlkit", *argv]))
    loss = summary["final_meta_loss"]
    print(f"meta-training: {summary['steps']} outer steps, smoothed KL surrogate "
          f"{'n/a' if loss is None else f'{loss:.4g}'}; meta-parameters: "
          f"{args.out}/meta_params.safetensors, curve: {args.out}/meta_loss.png")
    return 0
