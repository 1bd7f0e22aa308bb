"""Analysis for the ``efficiency`` suite: goals, ratios, profiles and the notes of results.md.

Kept apart from :mod:`.efficiency` (which builds the problems and measures time and
memory) so each file has one job: this one turns measured rows into ratios against the
issue's goals and explains, from a cProfile of one step, where the time goes.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

#: ratio key -> the largest value that meets the goal
#: the targets (issues [efficiency], [l2e], [perf] and [perf-2]): ``torch_sgd`` is the
#: hand-written floor of training (module forward/backward + torch.optim.SGD), ``sgd``
#: bdlkit's map, ``ivon_opt`` ivon-opt's own optimizer loop
GOALS: dict[str, float] = {
    "score_vi/sgd": 1.25, "score_vi/advi": 1.1, "score_vi_mem/advi_mem": 1.5,
    "mlp:score_vi/sgd": 1.5,
    "score_vi/torch_sgd": 1.1, "l2e/sghmc": 1.1,
    "mlp:score_vi/torch_sgd": 1.5, "mlp:advi/torch_sgd": 1.5, "mlp:sghmc/torch_sgd": 1.35,
    "mlp:sgld/torch_sgd": 1.35, "mlp:l2e/sghmc": 10.0,
    "mlp:sgld/posteriors_sgld": 0.8, "mlp:sghmc/posteriors_sghmc": 0.8,
    "mlp:score_vi/posteriors_vi_diag": 0.8, "mlp:advi/posteriors_vi_diag": 0.8,
    "target:infer/torch loop": 1.5, "target:infer compiled/infer": 0.01,
    "mlp:advi/ivon_opt": 1.1, "l2e_mem/sgd_mem": 1.5, "meta_sgmcmc_mem/sgd_mem": 1.5,
    "mlp:advi_flow/advi": 3.0, "mlp:score_vi_flow/score_vi": 3.0,
}
TIME_PAIRS = [("sgd", "torch_sgd"), ("torch_sgld", "torch_sgd"), ("sgld", "torch_sgld"),
              ("score_vi", "torch_sgd"), ("advi", "torch_sgd"), ("sgld", "torch_sgd"),
              ("sghmc", "torch_sgd"), ("sgld", "posteriors_sgld"),
              ("sghmc", "posteriors_sghmc"), ("score_vi", "posteriors_vi_diag"),
              ("advi", "posteriors_vi_diag"), ("advi", "ivon_opt"), ("score_vi", "ivon_opt"),
              ("ivon", "ivon_opt"), ("ivon", "torch_sgd"), ("ivon_opt", "torch_sgd"),
              ("posteriors_sgld", "torch_sgd"),
              ("posteriors_sghmc", "torch_sgd"), ("posteriors_vi_diag", "torch_sgd"),
              ("score_vi", "sgd"), ("score_vi", "advi"), ("advi", "sgd"), ("fisher_vi", "sgd"),
              ("fisher_vi", "score_vi"), ("sgld", "sgd"), ("sghmc", "sgd"), ("l2e", "sghmc"),
              ("l2e", "sgd"), ("meta_sgmcmc", "sghmc"), ("meta_sgmcmc", "sgd"),
              ("score_vi_flow", "score_vi"), ("advi_flow", "advi"),
              ("score_vi_spline", "score_vi"), ("advi_spline", "advi")]
MEM_PAIRS = [("score_vi", "advi"), ("score_vi", "sgd"), ("advi", "sgd"), ("fisher_vi", "sgd"),
             ("ivon", "sgd"), ("sgld", "sgd"), ("l2e", "sghmc"), ("meta_sgmcmc", "sghmc"),
             ("l2e", "sgd"), ("meta_sgmcmc", "sgd"),
             ("score_vi_flow", "score_vi"), ("advi_flow", "advi"),
             ("score_vi_spline", "score_vi"), ("advi_spline", "advi")]
#: functions whose cumulative time is reported as a phase of a profiled step
PHASES = ("value_and_score", "minibatch_scores", "sample", "draw_eps", "reparam",
          "rb_gradients", "mc_gradients", "elbo_grad", "loss_and_grad", "update",
          "apply_grads", "stack", "randn_like", "all_finite")

def failure(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"failed: {type(err).__name__}: {text[:160]}"


# --------------------------------------------------------------------------- profiling
def profile_step(algorithm: Any, state: Any, batch: Any, steps: int) -> dict[str, Any]:
    """cProfile of ``steps`` steps: top self times and the phases of the step (ms/step)."""
    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.enable()
    try:
        for _ in range(steps):
            state, _ = algorithm.step(state, batch)
    except Exception as err:  # recorded, never fatal
        return {"ms_per_step": None, "self_ms": [], "phases_ms": {}, "error": failure(err)}
    finally:
        prof.disable()
    total = time.perf_counter() - start
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    scale = 1e3 / steps
    top = sorted(stats.items(), key=lambda kv: -kv[1][2])[:10]
    phases: dict[str, float] = {}
    for (filename, _, func), (_, _, _, cum, _) in stats.items():
        if func in PHASES and "bdlkit" in filename:
            key = f"{Path(filename).stem}.{func}"
            phases[key] = max(phases.get(key, 0.0), cum * scale)
    return {"ms_per_step": total * scale,
            "self_ms": [{"function": func_name(key), "ms_per_step": v[2] * scale,
                         "calls_per_step": v[1] / steps} for key, v in top],
            "phases_ms": dict(sorted(phases.items(), key=lambda kv: -kv[1]))}


def func_name(key: tuple[str, int, str]) -> str:
    filename, line, func = key
    if filename == "~":
        return func
    parts = Path(filename).parts
    where = "/".join(parts[parts.index("bdlkit"):]) if "bdlkit" in parts else Path(filename).name
    return f"{where}:{line}({func})"


# --------------------------------------------------------------------------- ratios
def goal_key(model_name: str, key: str) -> str:
    return key if model_name == "resnet20_frn" else f"{model_name}:{key}"


def ratio_of(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def ratio(values: dict[str, float | None], a: str, b: str) -> float | None:
    return ratio_of(values.get(a), values.get(b))


def ratio_table(rows: list[dict[str, Any]], time_field: str = "step_time_s",
            memory: bool = True) -> dict[str, float]:
    ratios: dict[str, float] = {}
    for model_name in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model_name]
        times = {r["method"]: r[time_field] for r in mine}
        mems = {r["method"]: r["peak_mem_mb"] for r in mine}
        for a, b in TIME_PAIRS:
            if (value := ratio(times, a, b)) is not None:
                ratios[goal_key(model_name, f"{a}/{b}")] = value
        for a, b in MEM_PAIRS if memory else ():
            if (value := ratio(mems, a, b)) is not None:
                ratios[goal_key(model_name, f"{a}_mem/{b}_mem")] = value
    return ratios


# --------------------------------------------------------------------------- report
def note(ratios: dict[str, float], ratios_min: dict[str, float],
          goals: dict[str, bool | None], skipped: dict[str, str], profiles: dict[str, Any],
          dev: torch.device, load: dict[str, float | None], labels: dict[str, str],
          target: dict[str, Any] | None = None, sections: Sequence[str] = ()) -> str:
    """The notes of results.md: the ratio table with each goal's status, what the columns
    mean, the skipped rows, the Target section, ``sections`` (markdown, in order) and the
    profiles of missed goals."""
    from bdlkit.runs import figures as report

    mark = {True: "met", False: "**missed**", None: "not measured"}

    def ratio_row(key: str) -> dict[str, Any]:
        goal = GOALS.get(key)
        return {"ratio": key, "value": ratios.get(key), "fastest_rounds": ratios_min.get(key),
                "goal": "" if goal is None else f"<= {goal}",
                "status": "" if goal is None else mark[goals[f"{key} <= {goal}"]]}

    ratio_rows = [ratio_row(k) for k in [*ratios, *(k for k in GOALS if k not in ratios)]]
    mem = ("torch.cuda.max_memory_allocated growth per method" if dev.type == "cuda" else
           "RSS growth of a fresh subprocess per (model, method): VmHWM after resetting it "
           "with /proc/self/clear_refs, glibc mmap threshold 64 KiB; noise a few MB, so MLP "
           "numbers are indicative only")
    parts = ["## Ratios and goals\n",
             "Unprefixed ratios are ResNet20-FRN, `mlp:` the MLP 784-256-256-10; `a/b` divides "
             "median step times (`fastest_rounds`: of the fastest rounds, less sensitive to "
             "other load on the machine; the goals are judged on the medians), `a_mem/b_mem` "
             "peak memory growth.\n",
             report.markdown_table(ratio_rows, floatfmt=".3f"),
             f"`step_time_s`: median per-step time over interleaved rounds (`timed`: steps x "
             f"rounds); `peak_mem_mb`: {mem}. `sgd` is `map` with `optimizer=\"sgd\"` "
             f"(momentum 0.9). Inputs are random, so accuracy is not measured. 1-minute load "
             f"average before/after: {load['before']}/{load['after']} on {os.cpu_count()} "
             f"cores (other work on the machine inflates and scatters the times)."]
    if (load["before"] or 0) > 0.5 * (os.cpu_count() or 1):
        parts.append("\n**The machine was busy before the run started** (load average "
                     f"{load['before']}): times and ratios are unreliable; rerun on an idle "
                     "machine.")
    if skipped:
        parts.append("\nSkipped: " + "; ".join(f"`{m}` ({why})" for m, why in skipped.items())
                     + ".")
    parts.append(FLOOR_NOTE)
    if target:
        parts += [f"\n## Target: the README example ({target['steps']} SGLD steps on a 3-D "
                  f"standard normal, median of {target['rounds']} interleaved rounds)\n",
                  report.markdown_table(target["rows"], floatfmt=".4g"), TARGET_NOTE]
    parts += [text for text in sections if text]
    for model_name, by_method in profiles.items():
        parts.append(f"\n## Where the time goes: {labels[model_name]} (cProfile)\n")
        for method, prof in by_method.items():
            if prof.get("error"):
                parts.append(f"`{method}`: profiling {prof['error']}\n")
                continue
            phases = ", ".join(f"{k} {v:.2f}" for k, v in prof["phases_ms"].items())
            parts.append(f"`{method}`: {prof['ms_per_step']:.2f} ms/step under the profiler; "
                         f"phases (ms/step, cumulative, nested): {phases or '-'}\n")
            parts.append(report.markdown_table(prof["self_ms"], floatfmt=".3f"))
    return "\n".join(parts)


FLOOR_NOTE = (
    "\n`torch_sgd` is the hand-written floor of training (the module's forward and backward "
    "and `torch.optim.SGD(momentum=0.9)`), the denominator of the `[perf]` goals; "
    "`torch_sgld` adds one `randn` of every coordinate into a preallocated buffer and an "
    "in-place add, the floor of any SG-MCMC step (`torch_sgld/torch_sgd` is what the noise "
    "alone costs). `posteriors_*` are the same methods in posteriors at its default "
    "`inplace=False`, on the same log posterior per datum, in the same process. `ivon_opt` "
    "is ivon-opt's own optimizer loop on a copy of the module and the same batch "
    "(`sampled_params(train=True)`, the mean negative log-likelihood's backward, `step()`), "
    "with bdlkit `ivon`'s learning rate, initial curvature, betas, data size and weight "
    "decay: `ivon/ivon_opt` compares the same algorithm, `advi/ivon_opt` and "
    "`score_vi/ivon_opt` bdlkit's other diagonal-Gaussian VI steps with the peer a user "
    "would pick for VI on networks. `l2e` runs "
    "its 9-32-32-2 kinetic MLP on every coordinate each step: 9·32 + 32·32 + 32·2 = 1 376 "
    "multiply-adds per parameter, against 3 x 128 = 384 per weight for the network's own "
    "forward and backward at batch 128, so arithmetic alone puts `l2e/sghmc` near "
    "1 + 1376/384 = 4.6 on the MLP; on ResNet20-FRN, where each weight is reused across "
    "the image, it is a few percent.")
TARGET_NOTE = (
    "\n`infer`: `bdlkit.infer` as the README calls it (runner, draw store, NaN checks); "
    "`infer (score=)`: with the Target's analytic gradient; `step loop`: `algorithm.step` "
    "alone; `torch loop`: the minimal eager SGLD in torch (requires_grad, backward, in-place "
    "update); `infer (compile=True)`: the same call compiled, in unrolled chunks of 100 "
    "steps (bdlkit.engine.compiled), over 50 times as many steps, once: `us_per_step` "
    "without the one-off `compile_s` (which `seconds` includes), `vs_eager_infer` per step "
    "against `infer`. `target:infer compiled with its compile/infer` is the per-step ratio "
    "with the compile time spread over the run.")


def load_avg() -> float | None:
    """The 1-minute load average (other work on the machine skews the timings)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


