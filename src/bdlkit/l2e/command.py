"""``bdlkit meta-train l2e``: the command-line face of :mod:`bdlkit.l2e.meta_train`."""

from __future__ import annotations

import argparse
import shlex
from dataclasses import replace
from typing import Any

from bdlkit.core import distributed, meta_run
from bdlkit.l2e.kinetic import KINETIC_FORMS, NOISE_MODES, NUM_DATA
from bdlkit.l2e.meta_train import MetaTrainConfig, meta_train
from bdlkit.l2e.tasks import available_families

EXAMPLES = """examples:
  bdlkit meta-train l2e --out runs/l2e-meta --budget-minutes 5
  bdlkit meta-train l2e --out runs/l2e-meta --budget-minutes 60 --population 8
  bdlkit meta-train l2e --out runs/l2e-meta            # resumes the run in runs/l2e-meta
  bdlkit fit --method l2e --meta-params runs/l2e-meta/meta_params.safetensors \\
      --model mlp --data digits --out runs/l2e"""


def add_parser(sub: Any, formatter: type) -> argparse.ArgumentParser:
    d = MetaTrainConfig()
    p = sub.add_parser(
        "l2e", allow_abbrev=False, formatter_class=formatter, epilog=EXAMPLES,
        help="L2E's kinetic-energy MLP, by evolution strategies",
        description="Meta-train L2E's kinetic-energy MLP by antithetic evolution strategies "
        "on a distribution of small offline classification tasks (BMA meta-loss). Writes "
        "DIR/meta_params.safetensors (use with `bdlkit fit --method l2e --meta-params`), a "
        "checkpoint, history.json and meta_loss.png; rerunning with --out DIR resumes.")
    meta_run.add_run_options(p, d.budget_minutes)
    p.add_argument("--outer-steps", type=int, default=d.outer_steps,
                   help="stop after this many outer steps in total")
    p.add_argument("--population", type=int, default=d.population,
                   help=f"antithetic pairs per outer step (default {d.population})")
    p.add_argument("--sigma", type=float, default=d.sigma, help="ES perturbation scale")
    p.add_argument("--lr", type=float, default=d.lr, help="outer Adam learning rate")
    p.add_argument("--grad-clip", type=float, default=d.grad_clip,
                   help="global-norm clip of the ES gradient")
    p.add_argument("--reset-adam-each-step", action="store_true",
                   help="rebuild Adam every outer step, as the released L2E script did")
    p.add_argument("--inner-steps", type=int, default=d.inner_steps,
                   help=f"sampler steps per unroll (default {d.inner_steps}; paper 3000)")
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--num-samples", type=int, default=d.num_samples,
                   help="samples in the BMA meta-loss")
    p.add_argument("--sample-window", type=int, default=d.sample_window,
                   help="the samples are spread over this many last inner steps")
    p.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every)
    p.add_argument("--families", default=",".join(available_families()),
                   help="comma-separated task families (default: all available)")
    c = d.constants
    p.add_argument("--eps", type=float, default=c.eps, help="sampler step epsilon")
    p.add_argument("--grad-scale", type=_grad_scale, default=c.grad_scale,
                   help="gradient scale in the momentum update: a number (code: 50000) or "
                   "num_data (each task's N: temperature 1 with paper noise)")
    p.add_argument("--friction", type=float, default=c.friction, help="friction C")
    p.add_argument("--precond-mult", type=float, default=c.precond_mult)
    p.add_argument("--exp-mult", type=float, default=c.exp_mult)
    p.add_argument("--noise-mode", choices=NOISE_MODES, default=c.noise_mode)
    p.add_argument("--noise-mult", type=float, default=c.noise_mult)
    p.add_argument("--kinetic-form", choices=KINETIC_FORMS, default=c.kinetic_form,
                   help="free: beta is the MLP output (the paper); momentum: beta = s*r with a "
                   "learned s > 0, alpha = 0 (a kinetic energy, docs/l2e.md)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--data-root", default=None, help="data root (MNIST for the CNN tasks)")
    p.add_argument("--overwrite", action="store_true", help="start afresh in an existing DIR")
    return p


def _grad_scale(text: str) -> float | str:
    if text == NUM_DATA:
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or {NUM_DATA}, got {text!r}") from None


def run(args: argparse.Namespace, argv: list[str]) -> int:
    d = MetaTrainConfig()
    constants = replace(d.constants, eps=args.eps, grad_scale=args.grad_scale,
                        friction=args.friction,
                        precond_mult=args.precond_mult, exp_mult=args.exp_mult,
                        noise_mode=args.noise_mode, noise_mult=args.noise_mult,
                        kinetic_form=args.kinetic_form)
    cfg = MetaTrainConfig(
        seed=args.seed, population=args.population, sigma=args.sigma, lr=args.lr,
        grad_clip=args.grad_clip, reset_adam_each_step=args.reset_adam_each_step,
        inner_steps=args.inner_steps, batch_size=args.batch_size, num_samples=args.num_samples,
        sample_window=args.sample_window, outer_steps=args.outer_steps,
        budget_minutes=args.budget_minutes, checkpoint_every=args.checkpoint_every,
        families=tuple(f.strip() for f in args.families.split(",") if f.strip()),
        constants=constants)
    # torchrun: the population split over the processes (CPU tensors: gloo)
    with distributed.joined(backend="gloo") as topology:
        summary = meta_train(args.out, cfg, overwrite=args.overwrite, data_root=args.data_root,
                             command=shlex.join(["bdlkit", *argv]), topology=topology)
    if topology.rank != 0:
        return 0
    loss = summary["final_meta_loss"]
    print(f"meta-training: {summary['steps']} outer steps, smoothed meta-loss "
          f"{'n/a' if loss is None else f'{loss:.4f}'}; meta-parameters: "
          f"{args.out}/meta_params.safetensors, curve: {args.out}/meta_loss.png")
    return 0
