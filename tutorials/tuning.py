"""Choosing lr, prior and temperature, with the diagnostics that tell you it went wrong.

On the embedded digits data (an MLP) SGLD with a too-large lr stops with a NonFiniteError
that names the step and the fix, while lr = 0.5 trains. On a 5-D Gaussian Target, four
chains started far apart show what split R-hat and bulk ESS say about a run that is too
short for its step size, against a long one. Back on digits, a cold temperature and the
prior scale change NLL and ECE. It asserts that the short run fails the R-hat/ESS
thresholds and the long run passes them. Run: ``python tutorials/tuning.py [--small]``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

import bdlkit
from bdlkit.diagnostics import ess_bulk_vehtari21, rhat_vehtari21
from bdlkit.evaluation.health import ESS_PER_CHAIN, RHAT_MAX

SEED = 0


def digits_run(ds, seed: int, epochs: int, lr: float, prior: float = 1.0,
               temperature: float = 1.0) -> bdlkit.Result:
    torch.manual_seed(seed)  # the MLP's initial weights
    net = bdlkit.models.MLP(ds.input_shape, ds.num_classes, hidden=(100,))
    model = bdlkit.BayesianModel(net, likelihood="categorical", prior=prior,
                                 temperature=temperature, num_data=ds.num_train)
    return bdlkit.infer(model, "sgld", data=ds, epochs=epochs, lr=lr, seed=seed)


def chain_health(steps: int, lr: float, seed: int) -> dict[str, float]:
    """Worst split R-hat and bulk ESS over the coordinates of 4 SGLD chains on N(0, I_5)."""
    target = bdlkit.Target(lambda th: -0.5 * (th ** 2).sum(-1), dim=5)
    init = torch.tensor([10.0, -10.0, 5.0, -5.0])[:, None].repeat(1, 5)  # (chains, dim)
    result = bdlkit.infer(target, "sgld", steps=steps, lr=lr, seed=seed, init=init)
    draws = result.samples.transpose(0, 1)  # kept draws (draws, chains, d) -> (chains, draws, d)
    chains = draws.shape[0]
    rhat = float(rhat_vehtari21(draws).max())
    ess = float(ess_bulk_vehtari21(draws).min())
    flags = []
    if rhat > RHAT_MAX:
        flags.append("rhat")
    if ess < ESS_PER_CHAIN * chains:
        flags.append("ess")
    return {"rhat": rhat, "ess": ess, "draws": draws.shape[1], "flags": flags}


def main(small: bool, out: Path, seed: int = SEED) -> dict[str, object]:
    out.mkdir(parents=True, exist_ok=True)
    ds = bdlkit.data.load("digits")
    epochs = 10 if small else 30

    # 1. The step size. lr is the per-datum learning rate of plain SGD on the mean training
    #    loss (docs/conventions.md): if SGD diverges at an lr, so does SGLD. lr = 5 does.
    try:
        digits_run(ds, seed, epochs, lr=5.0)
        diverged = False
    except bdlkit.NonFiniteError as err:
        print(f"lr 5.0: NonFiniteError: {err}")
        diverged = True
    assert diverged, "SGLD at lr 5 on digits ran to the end: the divergence stop did not act"
    good = bdlkit.evaluate(digits_run(ds, seed, epochs, lr=0.5), ds)
    m = good.metrics
    print(f"lr 0.5: accuracy {m['accuracy']:.3f}, NLL {m['nll']:.3f}, ECE {m['ece']:.3f}; "
          f"run-health checks that failed: {sorted(good.health) or 'none'}")
    for check, message in good.health.items():
        print(f"  ! {check}: {message}")
    for check, message in good.health_notes.items():  # weight-space R-hat/ESS of one chain
        print(f"  i {check}: {message}")

    # 2. Run length: several chains from dispersed starts, judged by split R-hat (< 1.01) and
    #    bulk ESS (>= 100 per chain), Vehtari et al. (2021), the thresholds of run health.
    short = chain_health(steps=200, lr=0.01, seed=seed)
    long = chain_health(steps=5000 if small else 20000, lr=0.3, seed=seed)
    for name, h in (("short run, lr 0.01, 200 steps", short),
                    (f"long run, lr 0.3, {5000 if small else 20000} steps", long)):
        print(f"{name}: max R-hat {h['rhat']:.3f}, min bulk ESS {h['ess']:.0f} of "
              f"{4 * h['draws']} draws, flagged {h['flags'] or 'nothing'}")

    # 3. Temperature and prior scale live in the problem (BayesianModel), never in the
    #    sampler: T < 1 is a cold posterior, the prior is N(0, prior^2 I) on every weight.
    rows = []
    for prior, temperature in ((1.0, 1.0), (1.0, 0.1), (0.1, 1.0), (10.0, 1.0)):
        ev = bdlkit.evaluate(digits_run(ds, seed, epochs, lr=0.5, prior=prior,
                                        temperature=temperature), ds, diagnostics=False)
        rows.append((prior, temperature, ev.metrics))
        print(f"prior {prior:>4g}, T {temperature:>3g}: accuracy {ev.metrics['accuracy']:.3f}, "
              f"NLL {ev.metrics['nll']:.3f}, ECE {ev.metrics['ece']:.3f}")

    print(f"outcome: short run flagged {short['flags']} (R-hat {short['rhat']:.3f}, ESS "
          f"{short['ess']:.0f}); long run flagged {long['flags']} (R-hat {long['rhat']:.3f}, "
          f"ESS {long['ess']:.0f})")
    assert short["flags"] and not long["flags"], (
        f"expected the short run flagged and the long one clean: short R-hat "
        f"{short['rhat']:.3f} / ESS {short['ess']:.0f}, long R-hat {long['rhat']:.3f} / "
        f"ESS {long['ess']:.0f} (thresholds {RHAT_MAX}, {ESS_PER_CHAIN} per chain)")
    return {"short": short, "long": long, "rows": rows}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="the CI size (seconds)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: temp)")
    args = parser.parse_args()
    main(args.small, args.out or Path(tempfile.mkdtemp(prefix="bdlkit-tuning-")))
