"""The Target section of ``bench efficiency``: per-step cost on a small log density.

The README's first example, ``bdlkit.infer(Target 3-D standard normal, "sgld",
steps=20000)``, timed four ways in one process, interleaved over ``rounds`` (median):

* ``infer``: ``bdlkit.infer`` as a user calls it (no progress bar): runner, draw store,
  log and NaN checks included;
* ``infer (score=)``: the same with the Target's analytic ``score=`` (no autograd);
* ``step loop``: ``algorithm.step`` alone, ``steps`` times (the algorithm's own cost);
* ``torch loop``: the minimal hand-written SGLD in torch, θ with ``requires_grad``,
  ``backward()`` and in-place updates under ``no_grad`` (the floor of eager torch).

and, once, outside the rounds:

* ``infer (compile=True)``: the same call compiled (:mod:`bdlkit.engine.compiled`) over
  ``COMPILED_FACTOR`` times as many steps (10⁶ for the README's 20 000): its
  ``us_per_step`` leaves out the one-off compile, reported as ``compile_s`` beside the
  whole call's ``seconds``.

The goals (issue [perf]) are ``infer / torch loop <= 1.5`` and, per step, compiled /
eager ``infer <= 0.01`` (100x).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

import torch

import bdlkit

DIM = 3
LR = 0.1
README_STEPS = 20_000
#: the compiled run is this many times longer than the eager ones (10⁶ steps)
COMPILED_FACTOR = 50


def log_prob(theta: torch.Tensor) -> torch.Tensor:
    return -0.5 * (theta**2).sum(-1)


def score(theta: torch.Tensor) -> torch.Tensor:
    return -theta


def _infer(steps: int, analytic: bool) -> None:
    target = bdlkit.Target(log_prob, dim=DIM, score=score if analytic else None)
    bdlkit.infer(target, method="sgld", steps=steps, seed=0, progress=False)


def _step_loop(steps: int) -> None:
    target = bdlkit.Target(log_prob, dim=DIM)
    alg = bdlkit.algorithms.sgld.build(target)
    state = alg.init(generator=torch.Generator().manual_seed(0))
    for _ in range(steps):
        state, _ = alg.step(state, None)


def _torch_loop(steps: int) -> None:
    g = torch.Generator().manual_seed(0)
    theta = torch.randn(DIM, generator=g).requires_grad_(True)
    sd = math.sqrt(2 * LR)
    noise = torch.empty(DIM)
    for _ in range(steps):
        log_prob(theta).backward()
        with torch.no_grad():
            theta.add_(theta.grad, alpha=LR).add_(noise.normal_(generator=g), alpha=sd)
        theta.grad = None


def _compiled(steps: int) -> dict[str, Any]:
    """One compiled ``infer`` of ``steps`` steps: its wall time and its compile time."""
    target = bdlkit.Target(log_prob, dim=DIM)
    start = time.perf_counter()
    result = bdlkit.infer(target, method="sgld", steps=steps, seed=0, compile=True)
    seconds = time.perf_counter() - start
    report = result.config["compile"]
    return {"case": "infer (compile=True)", "steps": steps, "seconds": seconds,
            "compile_s": report["compile_s"], "fallback": report["fallback"],
            "us_per_step": 1e6 * (seconds - report["compile_s"]) / steps}


CASES = {"infer": lambda n: _infer(n, False), "infer (score=)": lambda n: _infer(n, True),
         "step loop": _step_loop, "torch loop": _torch_loop}


def run(steps: int, rounds: int) -> dict[str, Any]:
    """Rows ``{case, seconds, us_per_step}`` and the ratios to the torch loop."""
    for fn in CASES.values():  # warm-up: imports, kernel caches
        fn(min(steps, 200))
    times: dict[str, list[float]] = {k: [] for k in CASES}
    for r in range(rounds):
        order = list(CASES)[r % len(CASES):] + list(CASES)[:r % len(CASES)]
        for case in order:
            start = time.perf_counter()
            CASES[case](steps)
            times[case].append(time.perf_counter() - start)
    median = {k: statistics.median(v) for k, v in times.items()}
    rows = [{"case": k, "steps": steps, "seconds": median[k],
             "us_per_step": 1e6 * median[k] / steps,
             "vs_torch_loop": median[k] / median["torch loop"]} for k in CASES]
    ratios = {f"target:{k}/torch loop": median[k] / median["torch loop"]
              for k in CASES if k != "torch loop"}
    compiled = _compiled(COMPILED_FACTOR * steps)
    eager = 1e6 * median["infer"] / steps
    compiled["vs_torch_loop"] = compiled["us_per_step"] / (1e6 * median["torch loop"] / steps)
    compiled["vs_eager_infer"] = compiled["us_per_step"] / eager
    rows.append(compiled)
    ratios["target:infer compiled/infer"] = compiled["vs_eager_infer"]  # per step
    ratios["target:infer compiled with its compile/infer"] = (
        1e6 * compiled["seconds"] / compiled["steps"] / eager)
    return {"rows": rows, "steps": steps, "rounds": rounds, "ratios": ratios}


__all__ = ["CASES", "run"]
