"""``bdlkit bench l2e-precision``: can L2E's kinetic MLP run in bfloat16 on small networks?

L2E evaluates its 9-32-32-2 MLP on every coordinate each step (1 376 multiply-adds per
parameter, ``docs/performance.md``), which on a small fully-connected network costs
several SGHMC steps. This suite measures, on the shipped meta-parameters and the features
of a real L2E chain (the MLP 784-256-256-10 of ``bench efficiency``, random inputs, after
``warmup`` steps):

* the time of one kinetic evaluation (features + MLP) in float32 and with the MLP in
  bfloat16 (features cast, outputs cast back), median of interleaved rounds;
* how far the bfloat16 outputs α_φ and β_φ are from the float32 ones (relative to their
  root mean square), and what that does to one position step ε·β_φ.

Verdict: bfloat16 pays if it is faster *and* its error is below the tolerance
(:data:`TOLERANCE` of the rms); faster but outside it is inconclusive (it would take an
end-to-end comparison of the chains), and bdlkit keeps float32. A subsample of coordinates is not measured: it would give
the other coordinates no kinetic energy at all, a different sampler, not a cheaper one.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import torch

from bdlkit.bench.common import prepare_bench_out, write_results

DESCRIPTION = "L2E's kinetic MLP in float32 against bfloat16: time and output error"
#: the largest relative error (of the outputs' rms) that leaves the sampler unchanged
TOLERANCE = 1e-2


def _kinetic_inputs(steps: int, seed: int) -> tuple[Any, tuple]:
    """The shipped kinetic and the (grad, params, momentum, moments) of an L2E chain on the
    benchmark MLP after ``steps`` steps."""
    from bdlkit.algorithms.sgmcmc import l2e
    from bdlkit.bench.efficiency import _problem
    from bdlkit.core.tree import tree_leaves
    from bdlkit.l2e.kinetic import update_moments

    problem, batch = _problem("mlp", seed, torch.device("cpu"))
    alg = l2e.build(problem)
    state = alg.init(generator=torch.Generator().manual_seed(seed))
    for _ in range(steps):
        state, _ = alg.step(state, batch)
    _, score = problem.value_and_score(state.params, batch)
    grad = [-s / problem.num_data for s in tree_leaves(score)]
    moments = update_moments(tree_leaves(state.moments), grad)
    return alg.kinetic_fn, (grad, tree_leaves(state.params), tree_leaves(state.momentum), moments)


def _bf16(kinetic: Any, inputs: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    from bdlkit.l2e.kinetic import features, mlp

    x = features(*inputs).to(torch.bfloat16)
    out = mlp(kinetic.on(x), x).float()
    return kinetic.exp_mult * out[:, 0], kinetic.precond_mult * out[:, 1]


def _fp32(kinetic: Any, inputs: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    alpha, beta = kinetic(*inputs)
    return torch.cat([a.reshape(-1) for a in alpha]), torch.cat([b.reshape(-1) for b in beta])


def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True, rounds: int | None = None, warmup: int | None = None
        ) -> list[dict[str, Any]]:
    prepare_bench_out(out)
    rounds = rounds or (5 if quick else 15)
    warmup = warmup if warmup is not None else (20 if quick else 100)
    kinetic, inputs = _kinetic_inputs(warmup, seed)
    cases = {"float32": _fp32, "bfloat16 MLP": _bf16}
    outputs = {k: fn(kinetic, inputs) for k, fn in cases.items()}  # also warms up
    times: dict[str, list[float]] = {k: [] for k in cases}
    with torch.no_grad():
        for r in range(rounds):
            for case in list(cases)[r % 2:] + list(cases)[:r % 2]:
                start = time.perf_counter()
                cases[case](kinetic, inputs)
                times[case].append(time.perf_counter() - start)
    ref_alpha, ref_beta = outputs["float32"]
    rows = []
    for case, (alpha, beta) in outputs.items():
        errors = {name: float((got - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt())
                  for name, got, ref in (("alpha", alpha, ref_alpha), ("beta", beta, ref_beta))}
        seconds = statistics.median(times[case])
        rows.append({"case": case, "ms_per_call": 1e3 * seconds,
                     "vs_float32": seconds / statistics.median(times["float32"]),
                     "alpha_rel_rms_error": errors["alpha"],
                     "beta_rel_rms_error": errors["beta"],
                     "within_tolerance": max(errors.values()) <= TOLERANCE})
        if echo:
            print(f"  {case:<14} {rows[-1]['ms_per_call']:.2f} ms/call, errors α "
                  f"{errors['alpha']:.2e} β {errors['beta']:.2e}")
    bf16 = rows[1]
    faster = bf16["vs_float32"] < 0.9
    verdict = ("bfloat16 pays: faster and within tolerance" if faster and
               bf16["within_tolerance"] else
               "bfloat16 does not pay: it is not faster here" if not faster else
               "inconclusive: bfloat16 is faster but its outputs differ by more than the "
               "tolerance; whether that changes the sampler's results needs an end-to-end "
               "comparison of the chains (not run), so float32 stays")
    d = sum(t.numel() for t in inputs[1])
    note = (f"\nKinetic MLP on d = {d} coordinates (the MLP 784-256-256-10 of `bench "
            f"efficiency`), shipped meta-parameters, features of an L2E chain after {warmup} "
            f"steps; median of {rounds} interleaved rounds, torch threads "
            f"{torch.get_num_threads()}. Errors: rms(bf16 - fp32) / rms(fp32) of α_φ and "
            f"β_φ; tolerance {TOLERANCE}. **Verdict: {verdict}.** The intrinsic cost stays "
            "9·32 + 32·32 + 32·2 = 1 376 multiply-adds per parameter and step (about 4.6 "
            "SGHMC steps of this network at batch 128 by arithmetic alone). A subsample of "
            "coordinates is not measured: the others would get no kinetic energy at all.")
    write_results(out, "l2e-precision", quick, command, DESCRIPTION,
                  f"d = {d}, warm-up {warmup} L2E steps, {rounds} rounds", rows,
                  {"verdict": verdict, "tolerance": TOLERANCE, "d": d}, note=note)
    return rows


__all__ = ["DESCRIPTION", "TOLERANCE", "run"]
