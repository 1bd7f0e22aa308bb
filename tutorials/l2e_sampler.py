"""L2E: the shipped sampler, then meta-training your own for a few minutes.

Part 1 fits ``bdlkit.infer(model, "l2e", ...)`` with the meta-parameters that ship with
bdlkit on the embedded digits data (an MLP) and reports test accuracy, NLL and ECE.
Part 2 meta-trains a kinetic energy of our own with the API behind
``bdlkit meta-train l2e --budget-minutes M --out DIR`` (evolution strategies over small
offline tasks; resumable), then fits L2E again with ``meta_params=DIR/meta_params.safetensors``.
It asserts that the home-made sampler reaches 0.9 test accuracy, above what any untrained
phi gives (0.01-0.80).
Run: ``python tutorials/l2e_sampler.py [--small] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

import bdlkit
from bdlkit.l2e.meta_train import MetaTrainConfig, meta_train

SEED = 0
#: asserted accuracy on digits: above every untrained phi (0.01-0.80, seeds 0-3)
TRAINED = 0.9


def fit_digits(ds, meta_params: str | Path, epochs: int, seed: int) -> dict[str, float]:
    """Fit L2E on digits with ``meta_params`` and return the BMA's test metrics."""
    torch.manual_seed(seed)  # the MLP's initial weights
    net = bdlkit.models.MLP(ds.input_shape, ds.num_classes, hidden=(100,))
    model = bdlkit.BayesianModel(net, likelihood="categorical", prior=1.0,
                                 num_data=ds.num_train)
    result = bdlkit.infer(model, "l2e", data=ds, epochs=epochs, seed=seed,
                          meta_params=str(meta_params))
    ev = bdlkit.evaluate(result, ds)
    return {k: float(ev.metrics[k]) for k in ("accuracy", "nll", "ece")} | {
        "health": sorted(ev.health)}


def main(small: bool, out: Path, seed: int = SEED) -> dict[str, float]:
    out.mkdir(parents=True, exist_ok=True)
    ds = bdlkit.data.load("digits")  # embedded: 1 257 train / 540 test 8x8 images, 10 classes
    majority = float(torch.bincount(ds.y_test).max()) / len(ds.y_test)
    epochs = 10 if small else 30

    # Part 1: the shipped meta-parameters ("pretrained", bdlkit's own meta-training run).
    shipped = fit_digits(ds, "pretrained", epochs, seed)
    print(f"shipped L2E on digits: accuracy {shipped['accuracy']:.3f}, "
          f"NLL {shipped['nll']:.3f}, ECE {shipped['ece']:.3f}, "
          f"failed health checks {shipped['health']}")

    # Part 2: meta-train our own kinetic energy. This is what
    #   bdlkit meta-train l2e --budget-minutes 3 --out DIR
    # runs (the CLI fills MetaTrainConfig from its options). --small shrinks the unrolls
    # (40 inner steps), the ES population (2 pairs) and the run (12 outer steps) so it takes
    # seconds, with a larger outer lr (0.05) so that those few steps move phi. An untrained
    # phi (seeds 0-3) gives 0.01-0.80 accuracy on digits, so the outcome is ES's doing.
    if small:
        # the step count, not the clock, ends the small run, so CI gets the same phi
        cfg = MetaTrainConfig(seed=seed, budget_minutes=10.0, outer_steps=12, population=2,
                              inner_steps=40, sample_window=20, num_samples=5, lr=0.05,
                              families=("teacher-mlp",), checkpoint_every=4)
    else:
        cfg = MetaTrainConfig(seed=seed, budget_minutes=3.0, checkpoint_every=5)
    meta_dir = out / "l2e-meta"
    summary = meta_train(meta_dir, cfg, overwrite=True, echo=None)
    history = json.loads((meta_dir / "history.json").read_text())
    losses = [h["meta_loss"] for h in history]
    print(f"meta-training: {summary['steps']} outer steps, meta-loss per step "
          f"{[round(v, 3) if v is not None else None for v in losses]} "
          f"(each step is another random task, so the curve is noisy); curve: "
          f"{meta_dir / 'meta_loss.png'}")

    # The same file the CLI's `bdlkit fit --method l2e --meta-params` takes.
    mine = fit_digits(ds, meta_dir / "meta_params.safetensors", epochs, seed)
    print(f"own L2E on digits: accuracy {mine['accuracy']:.3f}, NLL {mine['nll']:.3f}, "
          f"ECE {mine['ece']:.3f}, failed health checks {mine['health']}")

    print(f"outcome: own meta-parameters accuracy {mine['accuracy']:.3f} > {TRAINED} "
          f"(majority class {majority:.3f}, shipped {shipped['accuracy']:.3f})")
    assert mine["accuracy"] > TRAINED, (
        f"the sampler with our meta-parameters ({mine['accuracy']:.3f}) is not above "
        f"{TRAINED}, the best an untrained phi reaches being 0.80 (majority {majority:.3f})")
    return {"own": mine["accuracy"], "shipped": shipped["accuracy"], "majority": majority}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="the CI size (seconds)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: temp)")
    args = parser.parse_args()
    main(args.small, args.out or Path(tempfile.mkdtemp(prefix="bdlkit-l2e-")))
