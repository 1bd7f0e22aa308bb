"""The ``efficiency`` suite: step time and peak memory of each method, side by side.

Methods: plain SGD (``map`` with ``optimizer="sgd"``, momentum 0.9, the cost of ordinary
training), ``score_vi`` (S = 1), ``advi`` (S = 1), ``fisher_vi`` (S = 1), ``score_vi_flow``
and ``advi_flow`` (S = 1, ``family="flow"``: a neural spline flow on the last layer, the
diagonal Gaussian elsewhere), ``score_vi_spline`` and ``advi_spline`` (``family="spline"``:
a monotone spline per tensor on every weight; the ratios ``score_vi_flow/score_vi``,
``score_vi_spline/score_vi``, ... are what each family costs over the diagonal one),
``sgld`` and any
other registered minibatch sampler (default hyperparameters; ``l2e`` and ``meta_sgmcmc``
with their shipped meta-parameters). A method that is not in
:data:`bdlkit.algorithms.METHODS` when the suite runs is skipped and listed under
``skipped``; one that fails (out of memory, diverges, cannot be built) keeps its row with
the reason in ``status``: the suite never stops for one method.

Models: an MLP 784-256-256-10 (ReLU) and ResNet20-FRN (3x32x32 input), both with 10
classes, a N(0, 1) prior and ``num_data`` = 50 000. Data: one fixed random batch of 128
(inputs N(0, 1), uniform labels), reused by every step: what is measured is the step,
not data loading.

**Step time.** All methods of a model are built in one process, each is warmed up
(``warmup`` untimed steps, after the shared :func:`~.common.warm_up`), and then timed
*interleaved*: ``repeats`` rounds, each round timing ``steps`` consecutive steps of every
method in turn (the order rotates from round to round), so slow drifts of the machine hit
all methods alike (:data:`SIZES`: quick 20 steps x 5 rounds on the MLP, 2 x 3 on
ResNet20-FRN; full 50 x 9 and 4 x 7). ``step_time_s`` is the median over rounds of the
per-step time (``step_time_min_s`` the fastest round; ``ratios_min`` divides those, which
is less sensitive to other load on a shared machine). A method whose fastest warm-up step
shows it would overrun ``budget_s`` (``fisher_vi`` on ResNet20-FRN under load, typically)
is *time-boxed*: fewer steps per round, then fewer rounds; ``timed`` says how many steps
x rounds it got. On CUDA the timer synchronises the device.

**Peak memory.** ``peak_mem_mb`` is the peak memory *growth* over the built model and
batch while the algorithm is initialised and runs ``mem_steps`` steps (1 quick, 2 full;
the second step also holds the previous state): the method's state
(λ, anchor, optimiser moments, ...) plus the transient memory of a step (activations,
gradients, second-order graphs).

* CUDA: ``torch.cuda.max_memory_allocated`` minus the allocated memory before ``init``,
  per method, after the timing phase (peak statistics reset for each method).
* CPU: there is no allocator counter, so each (model, method) runs in a *fresh
  subprocess* that builds the model and batch, runs one discarded step of the same method
  (one-off allocations: lazy imports, kernel caches, thread pools), resets the kernel's
  peak-RSS mark (``/proc/self/clear_refs``) and reads ``VmRSS``, then runs a fresh
  ``init`` and the steps and reads ``VmHWM``; where
  ``clear_refs`` is unavailable it falls back to ``resource.getrusage(...).ru_maxrss``
  (then a lower bound when the baseline high-water mark was already higher). glibc is
  told to serve every allocation above 64 KiB by ``mmap`` (``MALLOC_MMAP_THRESHOLD_``),
  so freed tensors leave RSS at once and RSS follows live tensor memory. Noise: a few MB
  (allocator arenas, small tensors, page granularity, thread stacks), so the numbers are
  meaningful for ResNet20-FRN (hundreds of MB of activations) and only indicative for
  the MLP (a few MB). In ``quick`` mode memory is measured on ResNet20-FRN only (the
  model the memory goal is about) to keep the subprocess count small.

``ratios`` (unprefixed: ResNet20-FRN; ``"mlp:"``: the MLP) divide median step times
(``a/b``) or peak memory (``a_mem/b_mem``); ``goals`` checks the targets of the issue:
on ResNet20-FRN score_vi/sgd <= 1.25 and score_vi/advi <= 1.1 in time,
score_vi_mem/advi_mem <= 1.5, and l2e/sghmc <= 1.5 (L2E's cost per step close to SGHMC's,
issue [l2e]); on the MLP score_vi/sgd <= 1.5 (``null``: not measured).
When a time goal is missed, the compared steps are profiled with ``cProfile`` (self time
per function and the time of each phase of the step) and the breakdown is written to
``results.json`` (``profile``) and ``results.md``.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from bdlkit import algorithms
from bdlkit import models as zoo
from bdlkit.bench import efficiency_peers as peers
from bdlkit.bench import efficiency_target
from bdlkit.bench.common import prepare_bench_out, warm_up, write_results
from bdlkit.bench.efficiency_report import (
    GOALS,
    failure,
    goal_key,
    load_avg,
    note,
    profile_step,
    ratio,
    ratio_of,
    ratio_table,
)
from bdlkit.problems import BayesianModel

DESCRIPTION = ("step time and peak memory of score_vi, advi, fisher_vi, SGD and the samplers "
               "on an MLP and ResNet20-FRN (ratios and goals)")

BATCH_SIZE = 128
NUM_DATA = 50_000
NUM_CLASSES = 10

#: model name -> (label, input shape, constructor)
MODEL_SPECS: dict[str, tuple[str, tuple[int, ...], Callable[[], torch.nn.Module]]] = {
    "mlp": ("MLP 784-256-256-10", (784,),
            lambda: zoo.MLP(784, NUM_CLASSES, hidden=(256, 256))),
    "resnet20_frn": ("ResNet20-FRN", (3, 32, 32),
                     lambda: zoo.resnet20_frn(num_classes=NUM_CLASSES)),
}
#: model name -> {quick: (steps per round, rounds, warm-up steps)}: cheap MLP steps get more
#: (with warm-up steps)
SIZES: dict[str, dict[bool, tuple[int, int, int]]] = {
    "mlp": {True: (20, 5, 2), False: (50, 9, 3)},
    "resnet20_frn": {True: (2, 3, 2), False: (4, 7, 2)},
}
#: suite method name -> (registered method, hyperparameters)
METHOD_SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "sgd": ("map", {"optimizer": "sgd", "lr": 1e-3}),
    "score_vi": ("score_vi", {"num_samples": 1}),
    "advi": ("advi", {"num_samples": 1}),
    "fisher_vi": ("fisher_vi", {"num_samples": 1}),
    "sgld": ("sgld", {}),
    "score_vi_flow": ("score_vi", {"num_samples": 1, "family": "flow"}),
    "advi_flow": ("advi", {"num_samples": 1, "family": "flow"}),
    "score_vi_spline": ("score_vi", {"num_samples": 1, "family": "spline"}),
    "advi_spline": ("advi", {"num_samples": 1, "family": "spline"}),
}
MMAP_THRESHOLD = 65536
#: the run length that cyclical samplers' schedules are set up for
RUN_LENGTH = 1000
#: full-batch reference samplers, not timed by default (``_extra_samplers``)
FULL_BATCH = ("hmc", "nuts")


def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True, models: Sequence[str] | None = None,
        methods: Sequence[str] | None = None, steps: int | None = None,
        repeats: int | None = None, warmup: int | None = None, memory: bool = True,
        memory_models: Sequence[str] | None = None, mem_steps: int | None = None,
        budget_s: float | None = None, device: str | None = None,
        profile: bool = True, shared_warm_up: bool = True,
        target_steps: int | None = None) -> list[dict[str, Any]]:
    """Time and measure every method on every model into ``out``; returns the rows.

    ``models``, ``methods``, ``steps`` (per round), ``repeats`` (rounds), ``warmup``,
    ``memory`` / ``memory_models``, ``mem_steps`` and ``budget_s`` (seconds of timed
    steps per method before it is time-boxed) override the quick/full sizes (tests);
    ``shared_warm_up=False`` skips :func:`~.common.warm_up` (the per-method warm-up steps
    still run). The Target section (:mod:`~.efficiency_target`: ``target_steps`` steps per
    case, 3 rounds quick, 5 full) runs with the whole suite (``methods=None``: 20 000
    steps, the README example) or when ``target_steps`` is given.
    """
    if target_steps is None and methods is None:
        target_steps = efficiency_target.README_STEPS
    prepare_bench_out(out)
    model_names = list(models or MODEL_SPECS)
    sizes = {m: (steps or SIZES[m][quick][0], repeats or SIZES[m][quick][1],
                 SIZES[m][quick][2] if warmup is None else warmup) for m in model_names}
    mem_steps = mem_steps or (1 if quick else 2)
    budget_s = budget_s or (30.0 if quick else 180.0)
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if memory_models is None:
        memory_models = ("resnet20_frn",) if quick else tuple(model_names)
    wanted = list(methods or METHOD_SPECS) + ([] if methods else
                                              [*_extra_samplers(), *peers.FLOORS, *peers.PEERS])
    skipped = {m: peers.available(m) for m in wanted if m in (*peers.FLOORS, *peers.PEERS)
               and peers.available(m)}
    skipped |= {m: f"method {_registered(m)!r} is not registered in bdlkit.algorithms.METHODS"
                for m in wanted if m not in (*peers.FLOORS, *peers.PEERS)
                and _registered(m) not in algorithms.METHODS}
    chosen = [m for m in wanted if m not in skipped]
    _say(echo, f"efficiency on {dev}: methods {chosen}; skipped {sorted(skipped)}")
    load_before = load_avg()
    if shared_warm_up:
        warm_up()
    rows: list[dict[str, Any]] = []
    profiles: dict[str, Any] = {}
    for model_name in model_names:
        label = MODEL_SPECS[model_name][0]
        problem, batch = _problem(model_name, seed, dev)
        n_steps, n_rounds, n_warm = sizes[model_name]
        model_rows, states = _time_model(model_name, problem, batch, chosen, n_steps, n_rounds,
                                         n_warm, budget_s, seed, dev, echo)
        times = {r["method"]: r["step_time_s"] for r in model_rows}
        missed = [b for (a, b) in (("score_vi", "sgd"), ("score_vi", "advi"))
                  if goal_key(model_name, f"{a}/{b}") in GOALS
                  and ratio(times, a, b) is not None
                  and ratio(times, a, b) > GOALS[goal_key(model_name, f"{a}/{b}")]]
        if profile and missed:
            profiles[model_name] = {m: profile_step(*states[m], batch, max(1, n_steps // 2))
                                    for m in ["score_vi", *missed] if m in states}
        del states
        gc.collect()
        for row in model_rows:
            if row["method"] in (*peers.FLOORS, *peers.PEERS):
                row["mem_method"] = "not measured (floor or peer row)"
                continue
            if not memory or model_name not in memory_models:
                row["mem_method"] = "not measured" + (" (off)" if not memory else
                                                      f" (only {', '.join(memory_models)})")
                continue
            mem, how, err = _memory(model_name, row["method"], seed, dev, mem_steps, problem,
                                    batch)
            row["peak_mem_mb"], row["mem_method"] = mem, how
            if err:
                row["status"] = err if row["status"] == "ok" else f"{row['status']}; {err}"
            _say(echo, f"  {label:<20} {row['method']:<10} peak memory "
                       f"{'-' if mem is None else f'{mem:.1f} MB'} ({how}) {err or ''}")
        rows += model_rows
        del problem, batch
        gc.collect()
    target = (efficiency_target.run(target_steps, 3 if quick else 5)
              if target_steps else None)
    ratios = ratio_table(rows) | (target["ratios"] if target else {})
    ratios_min = ratio_table(rows, "step_time_min_s", memory=False)
    goals = {f"{k} <= {v}": (None if ratios.get(k) is None else bool(ratios[k] <= v))
             for k, v in GOALS.items()}
    for row in rows:  # ratios to SGD on the same model, for the table
        base = next((r for r in rows if r["model"] == row["model"] and r["method"] == "sgd"),
                    None)
        row["time_vs_sgd"] = ratio_of(row.get("step_time_s"), base and base["step_time_s"])
        row["mem_vs_sgd"] = ratio_of(row.get("peak_mem_mb"), base and base["peak_mem_mb"])
    settings = {"batch_size": BATCH_SIZE, "num_data": NUM_DATA,
                "steps_x_rounds": {m: f"{n}x{r}" for m, (n, r, _) in sizes.items()},
                "warmup": {m: w for m, (_, _, w) in sizes.items()}, "budget_s": budget_s,
                "mem_steps": mem_steps, "memory_models": list(memory_models) if memory else [],
                "device": str(dev), "seed": seed,
                "models": {m: MODEL_SPECS[m][0] for m in model_names},
                "hyper": {m: METHOD_SPECS.get(m, (m, {}))[1] for m in chosen},
                "load_avg_1min": {"before": load_before, "after": load_avg()}}
    write_results(out, "efficiency", quick, command, "step time and peak memory per method",
                  f"batch {BATCH_SIZE} of random inputs, N = {NUM_DATA}; steps x interleaved "
                  f"rounds {settings['steps_x_rounds']} after {settings['warmup']} warm-up steps, "
                  f"median per-step time; device {dev}", rows,
                  {"settings": settings, "ratios": ratios, "goals": goals,
                   "ratios_min": ratios_min,
                   "goal_thresholds": dict(GOALS), "skipped": skipped, "profile": profiles,
                   "target": target},
                  note=note(ratios, ratios_min, goals, skipped, profiles, dev,
                             settings["load_avg_1min"],
                             {k: spec[0] for k, spec in MODEL_SPECS.items()}, target),
                  floatfmt=".4g")
    return rows


# --------------------------------------------------------------------------- building
def _registered(method: str) -> str:
    return METHOD_SPECS.get(method, (method, {}))[0]


def _extra_samplers() -> list[str]:
    """Registered minibatch samplers the suite has no entry for (timed with default
    hyperparameters). The full-batch references (:data:`FULL_BATCH`) are left out: one of
    their steps is a whole trajectory, not comparable with a minibatch step."""
    known = {spec[0] for spec in METHOD_SPECS.values()}
    return [m for m in sorted(algorithms.METHODS)
            if m not in known and m not in FULL_BATCH and algorithms.kind_of(m) == "sampler"]


def _problem(model_name: str, seed: int, dev: torch.device
             ) -> tuple[BayesianModel, tuple[torch.Tensor, torch.Tensor]]:
    _, shape, build = MODEL_SPECS[model_name]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = build().to(dev)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(BATCH_SIZE, *shape, generator=g).to(dev)
    y = torch.randint(0, NUM_CLASSES, (BATCH_SIZE,), generator=g).to(dev)
    return BayesianModel(net, "categorical", prior=1.0, num_data=NUM_DATA), (x, y)


def _build(method: str, problem: BayesianModel, seed: int) -> tuple[Any, Any]:
    if method in (*peers.FLOORS, *peers.PEERS):
        return peers.build(method, problem, seed)
    name, hyper = METHOD_SPECS.get(method, (method, {}))
    # a schedule tied to the run length (cyclical samplers) as for a 1 000-step run
    algorithm = algorithms.get_method(name).build(problem, **hyper).for_run(RUN_LENGTH)
    return algorithm, algorithm.init(generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- timing
def _time_model(model_name: str, problem: BayesianModel, batch: Any, methods: list[str],
                steps: int, repeats: int, warmup: int, budget_s: float, seed: int,
                dev: torch.device, echo: bool
                ) -> tuple[list[dict[str, Any]], dict[str, tuple[Any, Any]]]:
    label = MODEL_SPECS[model_name][0]
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    rows: dict[str, dict[str, Any]] = {}
    live: dict[str, list[Any]] = {}  # method -> [algorithm, state]
    plan: dict[str, tuple[int, int]] = {}  # method -> (steps per round, rounds)
    for method in methods:
        rows[method] = {"model": model_name, "method": method, "status": "ok",
                        "step_time_s": None, "step_time_min_s": None, "peak_mem_mb": None,
                        "timed": None, "mem_method": None}
        try:
            algorithm, state = _build(method, problem, seed)
            spent, last = 0.0, float("inf")
            for _ in range(warmup):  # warm-up; the fastest step estimates the cost of a step
                sync()
                start = time.perf_counter()
                state, _ = algorithm.step(state, batch)
                sync()
                took = time.perf_counter() - start
                spent, last = spent + took, min(last, took)
                if spent > budget_s / 2:
                    break
            last = 0.0 if last == float("inf") else last
        except Exception as err:  # recorded in the row, never fatal
            rows[method]["status"] = failure(err)
            _release(dev)
            _say(echo, f"  {label:<20} {method:<10} {rows[method]['status']}")
            continue
        live[method] = [algorithm, state]
        n, r = steps, repeats
        if last * n * r > budget_s:  # time-box: fewer steps per round, then fewer rounds
            n = max(1, int(budget_s / (last * r)))
            r = r if last * n * r <= budget_s else max(1, int(budget_s / last))
        plan[method] = (n, r)
    times: dict[str, list[float]] = {m: [] for m in live}
    for round_ in range(repeats):
        order = list(live)[round_ % max(1, len(live)):] + list(live)[:round_ % max(1, len(live))]
        for method in order:
            n, r = plan[method]
            if round_ >= r:
                continue
            algorithm, state = live[method]
            try:
                sync()
                start = time.perf_counter()
                for _ in range(n):
                    state, _ = algorithm.step(state, batch)
                sync()
            except Exception as err:  # recorded, never fatal
                rows[method]["status"] = failure(err)
                del live[method]
                _release(dev)
                continue
            times[method].append((time.perf_counter() - start) / n)
            live[method][1] = state
    for method, ts in times.items():
        if not ts:
            continue
        n, r = plan[method]
        row = rows[method]
        row.update(step_time_s=statistics.median(ts), step_time_min_s=min(ts),
                   timed=f"{n}x{len(ts)}")
        if (n, r) != (steps, repeats) and row["status"] == "ok":
            row["status"] = f"ok (time-boxed to {n} steps x {r} rounds)"
        _say(echo, f"  {label:<20} {method:<10} {1e3 * row['step_time_s']:9.2f} ms/step "
                   f"({row['timed']}) {'' if row['status'] == 'ok' else row['status']}")
    return list(rows.values()), {m: (a, s) for m, (a, s) in live.items()}


def _release(dev: torch.device) -> None:
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------- memory
def _memory(model_name: str, method: str, seed: int, dev: torch.device, mem_steps: int,
            problem: BayesianModel, batch: Any) -> tuple[float | None, str, str | None]:
    """(peak growth in MB, how it was measured, error or None)."""
    if dev.type == "cuda":
        return _cuda_memory(method, problem, batch, seed, dev, mem_steps)
    return _subprocess_memory(model_name, method, seed, mem_steps)


def _cuda_memory(method: str, problem: BayesianModel, batch: Any, seed: int,
                 dev: torch.device, mem_steps: int) -> tuple[float | None, str, str | None]:
    how = "cuda max_memory_allocated growth"
    _release(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    base = torch.cuda.memory_allocated(dev)
    try:
        _run_steps(method, problem, batch, seed, mem_steps)
        torch.cuda.synchronize(dev)
        peak = torch.cuda.max_memory_allocated(dev) - base
    except Exception as err:  # recorded, never fatal
        return None, how, "memory " + failure(err)
    finally:
        _release(dev)
    return peak / 2**20, how, None


def _run_steps(method: str, problem: BayesianModel, batch: Any, seed: int, steps: int) -> None:
    algorithm, state = _build(method, problem, seed)
    for _ in range(steps):
        state, _ = algorithm.step(state, batch)


def _subprocess_memory(model_name: str, method: str, seed: int, mem_steps: int,
                       timeout_s: float = 900.0) -> tuple[float | None, str, str | None]:
    """Run :func:`_probe` in a fresh interpreter and read its JSON answer."""
    import bdlkit

    spec = {"model": model_name, "method": method, "seed": seed, "steps": mem_steps,
            "threads": torch.get_num_threads()}
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD))
    src = str(Path(bdlkit.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    code = "import sys; from bdlkit.bench.efficiency import _probe; _probe(sys.argv[1])"
    try:
        proc = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], check=False,
                              env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, "rss", f"memory probe timed out after {timeout_s:.0f} s"
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        why = (f"killed by signal {-proc.returncode} (out of memory?)" if proc.returncode < 0
               else " ".join(proc.stderr.strip().splitlines()[-1:])[:160])
        return None, "rss", f"memory probe failed: {why}"
    answer = json.loads(lines[-1])
    return answer.get("peak_mem_mb"), answer["how"], answer.get("error")


def _probe(spec_json: str) -> None:
    """Subprocess entry: build, one discarded step, reset the RSS peak mark, then a fresh
    ``init`` + ``steps`` steps; print ``{"peak_mem_mb", "how", "error"}`` as JSON."""
    spec = json.loads(spec_json)
    torch.set_num_threads(int(spec["threads"]))
    problem, batch = _problem(spec["model"], int(spec["seed"]), torch.device("cpu"))
    answer: dict[str, Any] = {"how": "rss", "peak_mem_mb": None, "error": None}
    try:  # one discarded step of the same method: one-off allocations (imports, kernels)
        _run_steps(spec["method"], problem, batch, int(spec["seed"]), 1)
    except Exception as err:  # recorded, never fatal
        answer["error"] = "memory " + failure(err)
        print(json.dumps(answer), flush=True)
        return
    gc.collect()
    exact = _reset_peak_rss()
    base_kb = _status_kb("VmRSS") if exact else _maxrss_kb()
    answer["how"] = ("rss growth (VmHWM after clear_refs)" if exact
                     else "rss growth (ru_maxrss, lower bound)")
    try:
        _run_steps(spec["method"], problem, batch, int(spec["seed"]), int(spec["steps"]))
    except Exception as err:  # recorded, never fatal
        answer["error"] = "memory " + failure(err)
    peak_kb = _status_kb("VmHWM") if exact else _maxrss_kb()
    if answer["error"] is None and base_kb is not None and peak_kb is not None:
        answer["peak_mem_mb"] = max(0.0, peak_kb - base_kb) / 1024
    print(json.dumps(answer), flush=True)


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (Linux >= 4.0); False where that is unavailable."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return _status_kb("VmHWM") is not None
    except OSError:
        return False


def _status_kb(field: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return float(line.split()[1])
    except OSError:
        pass
    return None


def _maxrss_kb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform == "darwin" else float(peak)  # bytes on macOS


def _say(echo: bool, text: str) -> None:
    if echo:
        print(text, file=sys.stderr, flush=True)
