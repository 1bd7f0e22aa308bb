"""The acceptance runs of BayesDLL's MNIST protocol on the command line, and what they ended at.

    python scripts/kld_cli_check.py --out benchmarks/results/kld-cli [--seeds 0 1 2]

For each of score_vi's closed form, ivon and advi, with the model mlp and cnn and each seed:
``bdlkit fit --method M [--solver closed_form] --kld 1e-3 --model MODEL --data mnist
--epochs 100 --seed S --out R``. Each run is read back (``bdlkit.load``) for its exit code,
whether it stopped with a NonFiniteError, its test accuracy and NLL, and σ moved: the
median σ of the final q over the median σ of q₀ (a q whose σ never left its start is a
point estimate). Writes ``results.json`` and ``results.md`` (with this command).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

import bdlkit

METHODS = {"score_vi closed_form": ["--method", "score_vi", "--solver", "closed_form"],
           "ivon": ["--method", "ivon"], "advi": ["--method", "advi"]}


def sigma_moved(run: Path) -> float:
    result = bdlkit.load(run)
    algorithm = result.algorithm
    q = algorithm.approximation(result.state)
    q0 = algorithm.approximation(algorithm.init(generator=torch.Generator().manual_seed(0)))
    def median(approx: object) -> float:
        return float(torch.cat([s.reshape(-1) for s in approx.std.values()]).median())

    return median(q) / median(q0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for label, method in METHODS.items():
        for model in ("mlp", "cnn"):
            for seed in args.seeds:
                run = args.out / "runs" / f"{label.replace(' ', '_')}-{model}-{seed}"
                cmd = [sys.executable, "-m", "bdlkit", "fit", *method, "--kld", "1e-3", "--model", model, "--data",
                       "mnist", "--epochs", "100", "--seed", str(seed), "--out", str(run),
                       "--overwrite", "--no-progress"]
                start = time.perf_counter()
                done = subprocess.run(cmd, capture_output=True, text=True, check=False)
                row = {"method": label, "model": model, "seed": seed, "exit": done.returncode,
                       "seconds": time.perf_counter() - start,
                       "nonfinite": "NonFiniteError" in done.stderr + done.stdout
                       or "NaN" in done.stderr}
                if done.returncode == 0:
                    test = json.loads((run / "metrics.json").read_text())
                    row.update(accuracy=test["accuracy"], nll=test["nll"],
                               sigma_moved=sigma_moved(run))
                else:
                    row["error"] = done.stderr.strip().splitlines()[-1:]
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    command = "python scripts/kld_cli_check.py --out " + str(args.out) + (
        "" if args.seeds == [0, 1, 2] else " --seeds " + " ".join(map(str, args.seeds)))
    (args.out / "results.json").write_text(json.dumps({"command": command, "rows": rows},
                                                      indent=1))
    lines = ["# BayesDLL's MNIST protocol on the command line (kld 1e-3, 100 epochs)", "",
             f"Command: `{command}`; each run: `bdlkit fit --method M --kld 1e-3 --model MODEL "
             "--data mnist --epochs 100 --seed S` (MNIST-1000, batch 128: 800 steps).", "",
             "| method | model | seed | exit | NonFinite | test accuracy | test NLL | σ moved | "
             "seconds |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['model']} | {r['seed']} | {r['exit']} | "
                     f"{'yes' if r['nonfinite'] else 'no'} | {r.get('accuracy', float('nan')):.4f} | "
                     f"{r.get('nll', float('nan')):.4f} | {r.get('sigma_moved', float('nan')):.3g} | "
                     f"{r['seconds']:.0f} |")
    ok = all(r["exit"] == 0 and not r["nonfinite"] and abs(r["sigma_moved"] - 1) > 0.05
             for r in rows)
    lines += ["", f"Every run exited 0 without a NonFiniteError and with σ moved: **{ok}**. "
              "σ moved is the median σ of the final q over that of q₀."]
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
