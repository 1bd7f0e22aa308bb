"""A GPU run, and independent chains in several processes combined for R-hat.

Part 1 fits SGHMC to a digits MLP on the best device there is (``cuda`` when a GPU is
visible, else the CPU): ``bdlkit.infer(..., device=...)`` moves the model and every batch,
and on a GPU the forward pass runs in bfloat16 under autocast (``precision="bf16"``) with
scores and the BMA in float32. Part 2 runs one SGLD chain per worker process (one per GPU
where there are several, else on the CPU), each writing its draws to a safetensors file, and
combines them into one multi-chain split R-hat. It asserts that the GPU/CPU run beats the
majority class and that the process-chains agree (R-hat < 1.01).
Run: ``python tutorials/gpu_and_processes.py [--small] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import bdlkit
from bdlkit.diagnostics import rhat_vehtari21
from bdlkit.evaluation.health import RHAT_MAX

SEED = 0
#: a correlated 4-D Gaussian: every process samples the same target
COV = torch.tensor([[1.0, 0.6, 0.0, 0.0], [0.6, 1.0, 0.0, 0.0],
                    [0.0, 0.0, 2.0, -0.5], [0.0, 0.0, -0.5, 0.5]])


def pick_device() -> str:
    """``"cuda"`` when a GPU is visible to torch, else ``"cpu"``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def device_run(small: bool) -> dict[str, float]:
    """SGHMC on digits on the chosen device; test accuracy and the majority-class rate."""
    device = pick_device()
    ds = bdlkit.data.load("digits")
    torch.manual_seed(SEED)
    net = bdlkit.models.MLP(ds.input_shape, ds.num_classes, hidden=(100,))
    model = bdlkit.BayesianModel(net, likelihood="categorical", prior=1.0,
                                 num_data=ds.num_train,
                                 precision="bf16" if device == "cuda" else "fp32")
    result = bdlkit.infer(model, "sghmc", data=ds, epochs=5 if small else 30, seed=SEED,
                          device=device)
    probs = result.predict(ds.x_test.to(device)).cpu()  # inputs on the model's device
    accuracy = float((probs.argmax(-1) == ds.y_test).float().mean())
    majority = float(torch.bincount(ds.y_test).max()) / len(ds.y_test)
    print(f"device {device}: sghmc accuracy {accuracy:.3f} (majority class {majority:.3f})")
    return {"accuracy": accuracy, "majority": majority}


def one_chain(index: int, steps: int, out: str, seed: int = SEED) -> str:
    """A worker process: one SGLD chain from a dispersed start, its draws written to
    ``out/chain-<index>.safetensors`` (files, not pickles, cross the process boundary)."""
    torch.set_num_threads(1)
    device = f"cuda:{index % torch.cuda.device_count()}" if torch.cuda.is_available() else "cpu"
    precision = torch.linalg.inv(COV)
    target = bdlkit.Target(lambda th: -0.5 * ((th @ precision) * th).sum(-1), dim=4)
    init = torch.full((1, 4), 4.0 * (-1) ** index)  # chains start on opposite sides
    # lr 0.2 is stable for this target's smallest variance (0.38); the first fifth is burn-in
    result = bdlkit.infer(target, "sgld", steps=steps, lr=0.2, seed=seed + index, init=init,
                          burnin=steps // 5, thin=4, max_samples=None,
                          device=device if device != "cpu" else None)
    path = Path(out) / f"chain-{index}.safetensors"
    save_file({"draws": result.samples[:, 0].cpu().contiguous()}, str(path))
    return str(path)


def process_chains(small: bool, out: Path, workers: int = 2, seed: int = SEED) -> float:
    """Run ``2 * workers`` chains in ``workers`` processes; the split R-hat over all of them."""
    steps = 5000 if small else 50000
    chains = 2 * workers
    context = multiprocessing.get_context("spawn")  # CUDA needs spawned workers
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        paths = list(pool.map(one_chain, range(chains), [steps] * chains,
                              [str(out)] * chains, [seed] * chains))
    draws = torch.stack([load_file(p)["draws"] for p in paths])  # (chains, draws, 4)
    rhat = float(rhat_vehtari21(draws.double()).max())
    variance = draws.flatten(0, 1).var(0)
    print(f"{chains} chains in {workers} processes, {draws.shape[1]} draws each: max split "
          f"R-hat {rhat:.4f}; variances {[round(v, 2) for v in variance.tolist()]} "
          f"(exact {[round(v, 2) for v in COV.diag().tolist()]})")
    return rhat


def main(small: bool, out: Path) -> dict[str, float]:
    out.mkdir(parents=True, exist_ok=True)
    run = device_run(small)
    rhat = process_chains(small, out)
    print(f"outcome: accuracy {run['accuracy']:.3f} > majority {run['majority']:.3f} + 0.01; "
          f"R-hat across processes {rhat:.4f} < {RHAT_MAX}")
    assert run["accuracy"] > run["majority"] + 0.01, run
    assert rhat < RHAT_MAX, f"the process-chains disagree: split R-hat {rhat:.4f}"
    return {**run, "rhat": rhat}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="the CI size (under 40 s)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: a fresh temporary folder)")
    args = parser.parse_args()
    main(args.small, args.out or Path(tempfile.mkdtemp(prefix="bdlkit-gpu-processes-")))
