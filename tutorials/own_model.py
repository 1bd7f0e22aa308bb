"""Your own nn.Module and DataLoader with score_vi and sghmc, and predictive intervals.

A 1-D regression problem is generated in the script (y = sin 2x + 0.3 x + noise, σ = 0.3).
A two-layer tanh network written here is wrapped in ``bdlkit.BayesianModel`` with a Gaussian
likelihood whose noise σ is learned with the weights, and fitted from a torch DataLoader (its
own seeded generator) by variational inference (``score_vi``) and a sampler (``sghmc``).
Each result's 90 % interval (``Result.intervals``) is checked on held-out points: the script
asserts that its empirical coverage lies in [0.8, 0.99] for both methods (mean-field VI
is conservative here: it underfits and over-estimates σ).

Run: ``python tutorials/own_model.py [--small] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import bdlkit  # noqa: E402
from bdlkit.problems import Gaussian  # noqa: E402

SEED = 0
NOISE = 0.3  # the data's true noise std
LEVEL = 0.9
LOW, HIGH = 0.8, 0.99  # the asserted range of the 90 % interval's test coverage
#: run sizes: training points and epochs per method (the CI size first)
SIZES = {
    "small": {"n_train": 500, "epochs_vi": 150, "epochs_sghmc": 150},
    "full": {"n_train": 2000, "epochs_vi": 300, "epochs_sghmc": 300},
}


def make_data(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` points x ~ U(-3, 3), y = sin(2x) + 0.3x + N(0, NOISE²); x is ``(n, 1)``."""
    x = torch.rand(n, 1, generator=generator) * 6 - 3
    y = torch.sin(2 * x[:, 0]) + 0.3 * x[:, 0] + NOISE * torch.randn(n, generator=generator)
    return x, y


class TinyNet(nn.Module):
    """1 -> width -> width -> 1 with tanh; returns ``(n,)`` means, one per input row."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(1, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(),
            nn.Linear(width, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x).squeeze(-1)


def make_model(n_train: int) -> bdlkit.BayesianModel:
    """A fresh network (initialised under a fixed seed) as a Bayesian model: an isotropic
    N(0, 1) prior on every weight and a Gaussian likelihood with a learned σ (started at 0.5)."""
    torch.manual_seed(SEED)
    return bdlkit.BayesianModel(
        TinyNet(), likelihood=Gaussian(noise=0.5, learn_noise=True), prior=1.0,
        num_data=n_train,  # N: the minibatch likelihood is scaled to it (docs/conventions.md)
    )


def make_loader(x: torch.Tensor, y: torch.Tensor) -> DataLoader:
    """A shuffling DataLoader with its own generator, so every run sees the same order."""
    return DataLoader(TensorDataset(x, y), batch_size=50, shuffle=True,
                      generator=torch.Generator().manual_seed(SEED))


def main(small: bool, out: Path) -> dict[str, float]:
    size = SIZES["small" if small else "full"]
    out.mkdir(parents=True, exist_ok=True)
    data_gen = torch.Generator().manual_seed(SEED)
    x_train, y_train = make_data(size["n_train"], data_gen)
    x_test, y_test = make_data(1000, data_gen)  # held-out points from the same distribution
    grid = torch.linspace(-3.5, 3.5, 200).unsqueeze(-1)

    fits = {
        # Mean-field Gaussian VI. score_vi's default gradient solver (inner_steps=1) takes
        # exactly ADVI's steps; lr 2e-2 (Adam) moves σ away from init_std=1e-2 within the run.
        "score_vi": dict(epochs=size["epochs_vi"], lr=2e-2),
        # SGHMC at the Bayes posterior (T = 1); lr is per datum, stable for momentum SGD
        # (friction 0.1); larger lr made the learned noise σ jump. First half is burn-in.
        "sghmc": dict(epochs=size["epochs_sghmc"], lr=5e-3, alpha=0.1),
    }
    coverage: dict[str, float] = {}
    fig, axes = plt.subplots(1, len(fits), figsize=(10, 3.5), sharey=True)
    for ax, (method, options) in zip(axes, fits.items()):
        model = make_model(size["n_train"])
        result = bdlkit.infer(model, method, data=make_loader(x_train, y_train), seed=SEED,
                              **options)
        # BMA mean/variance and the per-draw predictions on a leading draw axis S
        pred, per_draw = result.predict(x_test, return_samples=True)
        lower, upper = result.intervals(x_test, level=LEVEL)  # of the BMA mixture
        inside = (y_test >= lower) & (y_test <= upper)
        coverage[method] = inside.float().mean().item()
        rmse = (pred.mean - y_test).pow(2).mean().sqrt().item()
        sigma = per_draw.std.mean().item()  # the learned noise σ, averaged over draws
        print(f"{method}: {per_draw.mean.shape[0]} draws, test RMSE {rmse:.3f}, "
              f"learned noise σ {sigma:.3f} (true {NOISE}), mean 90 % width "
              f"{(upper - lower).mean().item():.3f}")

        g_pred = result.predict(grid)
        g_lo, g_hi = result.intervals(grid, level=LEVEL)
        ax.fill_between(grid[:, 0], g_lo, g_hi, alpha=0.3, label="90 % interval")
        ax.plot(grid[:, 0], g_pred.mean, label="BMA mean")
        ax.scatter(x_train[:300, 0], y_train[:300], s=3, c="k", label="training data")
        ax.set_title(f"{method}: coverage {coverage[method]:.2f}")
        ax.set_xlabel("x")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "own_model_intervals.png", dpi=120)
    plt.close(fig)
    (out / "coverage.json").write_text(json.dumps(coverage, indent=2))

    line = " ".join(f"{m}={c:.3f}" for m, c in coverage.items())
    print(f"coverage90 {line}  (plot: {out / 'own_model_intervals.png'})")
    assert all(LOW <= c <= HIGH for c in coverage.values()), (
        f"90 % interval coverage outside [{LOW}, {HIGH}]: {line}")
    return coverage


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="the CI size (under 40 s)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: a fresh temporary folder)")
    args = parser.parse_args()
    main(args.small, args.out or Path(tempfile.mkdtemp(prefix="bdlkit-own-model-")))
