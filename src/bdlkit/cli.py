"""The ``bdlkit`` command line (for now ``demo`` and ``list``; the runner adds ``fit``).

Examples::

    bdlkit list
    bdlkit demo --steps 1500 --seed 0
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import torch

from . import algorithms, data, models


def demo(steps: int = 1500, seed: int = 0) -> list[dict[str, float | str]]:
    """Fit every available method to an MLP on scikit-learn digits; print a table."""
    from . import infer
    from .problems import BayesianModel

    ds = data.load("digits", seed=seed)
    rows: list[dict[str, float | str]] = []
    for method, hyper in (("map", {"lr": 1e-3}), ("sgld", {"lr": 0.5})):
        torch.manual_seed(seed)
        net = models.MLP(ds.input_shape, ds.num_classes, hidden=(100,))
        model = BayesianModel(net, "categorical", prior=1.0, num_data=ds.num_train)
        start = time.perf_counter()
        result = infer(model, method, data=ds, steps=steps, seed=seed, **hyper)
        probs = result.predict(ds.x_test)
        seconds = time.perf_counter() - start
        nll = -probs.clamp_min(1e-12).log().gather(1, ds.y_test[:, None]).mean().item()
        acc = (probs.argmax(1) == ds.y_test).double().mean().item()
        rows.append({"method": method, "accuracy": acc, "nll": nll, "seconds": seconds})
    print(f"digits: {ds.num_train} train / {len(ds.x_test)} test, MLP 64-100-10, {steps} steps")
    print(f"{'method':<8} {'accuracy':>9} {'NLL':>8} {'time (s)':>9}")
    for r in rows:
        print(f"{r['method']:<8} {r['accuracy']:>9.4f} {r['nll']:>8.4f} {r['seconds']:>9.1f}")
    if any(math.isnan(float(r["nll"])) for r in rows):
        raise SystemExit("demo produced NaN metrics")
    return rows


def list_components() -> None:
    """Print the methods, models and datasets bdlkit knows."""
    print("methods:")
    for name in sorted(algorithms.METHODS):
        print(f"  {name:<14} {algorithms.DESCRIPTIONS.get(name, '')}")
    print("models:")
    for name in sorted(models.MODELS):
        doc = (models.MODELS[name].__doc__ or "").strip().splitlines()
        print(f"  {name:<14} {doc[0] if doc else ''}")
    print("datasets:")
    for name, desc in data.DATASETS.items():
        print(f"  {name:<44} {desc}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bdlkit",
        description="Bayesian deep learning made practical.",
        epilog="Examples:\n  bdlkit list\n  bdlkit demo --steps 1500",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser(
        "demo",
        help="compare the available methods on digits",
        epilog="Example: bdlkit demo --steps 1500 --seed 0",
    )
    p_demo.add_argument("--steps", type=int, default=1500, help="steps per method")
    p_demo.add_argument("--seed", type=int, default=0)
    sub.add_parser("list", help="list methods, models and datasets", epilog="Example: bdlkit list")
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo(steps=args.steps, seed=args.seed)
    elif args.command == "list":
        list_components()
    return 0


if __name__ == "__main__":
    sys.exit(main())
