"""The ``efficiency`` suite: step time and peak memory of each method, side by side.

Methods (:data:`~.efficiency_setup.METHOD_SPECS`): plain SGD (``map`` with
``optimizer="sgd"``, momentum 0.9, the cost of ordinary training), ``score_vi``, ``advi``,
``ivon`` and ``fisher_vi`` (S = 1), ``score_vi_flow`` and ``advi_flow`` (S = 1,
``family="flow"``: a neural spline flow on the last layer, the diagonal Gaussian
elsewhere), ``score_vi_spline`` and ``advi_spline`` (``family="spline"``: a monotone
spline per tensor on every weight; the ratios ``score_vi_flow/score_vi``, ... are what
each family costs over the diagonal one), ``sgld`` and any other registered minibatch
sampler (default hyperparameters; ``l2e`` and ``meta_sgmcmc`` with their shipped
meta-parameters); beside them the torch floor rows and the peer rows of
:mod:`.efficiency_peers` (posteriors; ivon-opt's own optimizer loop). A method that is not
in :data:`bdlkit.algorithms.METHODS` when the suite runs, or a peer that is not installed,
is skipped and listed under ``skipped`` with the reason; one that fails (out of memory,
diverges, cannot be built) keeps its row with the reason in ``status``: the suite never
stops for one method.

Models: an MLP 784-256-256-10 (ReLU) and ResNet20-FRN (3x32x32 input), both with 10
classes, a N(0, 1) prior and ``num_data`` = 50 000. Data: one fixed random batch of 128
(inputs N(0, 1), uniform labels), reused by every step: what is measured is the step,
not data loading.

**Step time** (:mod:`.efficiency_timing`). All rows of a model are built in one process,
each is warmed up (``warmup`` untimed steps, after the shared :func:`~.common.warm_up`),
and then timed *interleaved*: ``repeats`` rounds, each round timing ``steps`` consecutive
steps of every row in turn (the order rotates from round to round), so slow drifts of the
machine hit all rows alike (:data:`SIZES`: quick 20 steps x 5 rounds on the MLP, 2 x 3 on
ResNet20-FRN; full 50 x 9 and 4 x 7). ``step_time_s`` is the median over rounds of the
per-step time (``step_time_min_s`` the fastest round; ``ratios_min`` divides those, which
is less sensitive to other load on a shared machine). A row whose fastest warm-up step
shows it would overrun ``budget_s`` is *time-boxed*: fewer steps per round, then fewer
rounds; ``timed`` says how many steps x rounds it got. On CUDA the timer synchronises
the device.

**Denormals.** ``denormal_speedup`` is each row's step time with float32 denormals not
flushed over flushed (``torch.set_flush_denormal``), ``denormal_rounds`` interleaved rounds
of half the row's steps each way (:data:`DENORMAL_CHECK`: quick, 3 rounds on the MLP only;
full, 5 on every model; on the CPU only, whose setting it is), the caller's setting
restored; a row above :data:`~.efficiency_timing.DENORMAL_FLAG` (1.1) is flagged in the
notes: some of its arithmetic runs on denormal numbers.

**Peak memory** (:mod:`.efficiency_memory`). ``peak_mem_mb`` is the peak memory *growth*
over the built model and batch while the algorithm is initialised and runs ``mem_steps``
steps (1 quick, 2 full): on CUDA ``torch.cuda.max_memory_allocated``; on the CPU the RSS
growth of a fresh subprocess per (model, method). Noise: a few MB, so the numbers are
meaningful for ResNet20-FRN (hundreds of MB of activations) and only indicative for the
MLP. In ``quick`` mode memory is measured on ResNet20-FRN only (the model the memory goals
are about) to keep the subprocess count small. Floor and peer rows take no memory
measurement.

**Target** (:mod:`.efficiency_target`): the README example, ``bdlkit.infer`` against a
minimal torch loop. **Whole run** (:mod:`.efficiency_fit`): one ``bdlkit fit`` on the
digits MLP as a fresh process, split into start-up, data, set-up, training, evaluation,
against the same steps of a bare loop. Both run with the whole suite (``methods=None``)
or when ``target_steps`` / ``fit_steps`` is given.

``ratios`` (unprefixed: ResNet20-FRN; ``"mlp:"``: the MLP; ``"target:"``, ``"fit:"``)
divide median step times (``a/b``) or peak memory (``a_mem/b_mem``); ``goals`` checks the
targets of the issues (:data:`~.efficiency_report.GOALS`, ``null``: not measured) and the
ratio table gives each goal's status. When a time goal of score_vi is missed, the compared
steps are profiled with ``cProfile`` (self time per function and the time of each phase of
the step) and the breakdown is written to ``results.json`` (``profile``) and ``results.md``.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from bdlkit import algorithms
from bdlkit.bench import efficiency_fit, efficiency_target
from bdlkit.bench import efficiency_peers as peers
from bdlkit.bench.common import prepare_bench_out, warm_up, write_results
from bdlkit.bench.efficiency_memory import peak_memory, subprocess_memory
from bdlkit.bench.efficiency_report import (
    GOALS,
    goal_key,
    load_avg,
    note,
    profile_step,
    ratio,
    ratio_of,
    ratio_table,
)
from bdlkit.bench.efficiency_setup import (
    BATCH_SIZE,
    METHOD_SPECS,
    MODEL_SPECS,
    NUM_DATA,
    build,
    extra_samplers,
    problem_for,
    registered,
)
from bdlkit.bench.efficiency_timing import denormal_note, say, time_model

DESCRIPTION = ("step time and peak memory of score_vi, advi, ivon, fisher_vi, SGD and the "
               "samplers on an MLP and ResNet20-FRN beside torch, posteriors and ivon-opt; "
               "the whole bdlkit fit run (ratios and goals)")

#: model name -> {quick: (steps per round, rounds, warm-up steps)}: cheap MLP steps get more
SIZES: dict[str, dict[bool, tuple[int, int, int]]] = {
    "mlp": {True: (20, 5, 2), False: (50, 9, 3)},
    "resnet20_frn": {True: (2, 3, 2), False: (4, 7, 2)},
}
#: {quick: (rounds of the denormal check, the models it runs on; None: all)}
DENORMAL_CHECK: dict[bool, tuple[int, tuple[str, ...] | None]] = {
    True: (3, ("mlp",)), False: (5, None)}
# the building blocks under the names that scripts timing single rows call
_build, _problem, _subprocess_memory = build, problem_for, subprocess_memory


def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True, models: Sequence[str] | None = None,
        methods: Sequence[str] | None = None, steps: int | None = None,
        repeats: int | None = None, warmup: int | None = None, memory: bool = True,
        memory_models: Sequence[str] | None = None, mem_steps: int | None = None,
        budget_s: float | None = None, device: str | None = None,
        profile: bool = True, shared_warm_up: bool = True,
        target_steps: int | None = None, fit_steps: int | None = None,
        denormal_rounds: int | None = None,
        denormal_models: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Time and measure every method on every model into ``out``; returns the rows.

    Args:
        out: the results folder (``results.json``, ``results.md``).
        quick: the quick sizes (:data:`SIZES`, :data:`DENORMAL_CHECK`, memory on
            ResNet20-FRN only, :data:`~.efficiency_fit.FIT_STEPS`).
        seed: the seed of the networks, the batch and every row.
        command: the command recorded with the results (default: the CLI's).
        echo: progress on stderr.
        models, methods: the models and rows to run (default: all; then the Target and
            whole-run sections run too).
        steps, repeats, warmup: steps per round, rounds and warm-up steps (default:
            :data:`SIZES`).
        memory, memory_models, mem_steps: whether, on which models and over how many
            steps peak memory is measured.
        budget_s: seconds of timed steps per row before it is time-boxed.
        device: the torch device (default: CUDA when available).
        profile: profile the steps of a missed score_vi time goal.
        shared_warm_up: False skips :func:`~.common.warm_up` (the per-row warm-up steps
            still run).
        target_steps: steps per case of the Target section (:mod:`~.efficiency_target`,
            3 rounds quick, 5 full; default with the whole suite: the README's 20 000).
        fit_steps: steps of the whole ``bdlkit fit`` run (:mod:`~.efficiency_fit`;
            default with the whole suite: 300 quick, 1 000 full).
        denormal_rounds, denormal_models: rounds of the denormal check (0: off) and the
            models it runs on (default: :data:`DENORMAL_CHECK`).
    """
    if methods is None and target_steps is None:
        target_steps = efficiency_target.README_STEPS
    if methods is None and fit_steps is None:
        fit_steps = efficiency_fit.FIT_STEPS[quick]
    default_rounds, default_models = DENORMAL_CHECK[quick]
    denormal_rounds = default_rounds if denormal_rounds is None else denormal_rounds
    prepare_bench_out(out)
    model_names = list(models or MODEL_SPECS)
    sizes = {m: (steps or SIZES[m][quick][0], repeats or SIZES[m][quick][1],
                 SIZES[m][quick][2] if warmup is None else warmup) for m in model_names}
    mem_steps = mem_steps or (1 if quick else 2)
    budget_s = budget_s or (30.0 if quick else 180.0)
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if memory_models is None:
        memory_models = ("resnet20_frn",) if quick else tuple(model_names)
    denormal_models = tuple(denormal_models or default_models or model_names)
    wanted = list(methods or METHOD_SPECS) + ([] if methods else
                                              [*extra_samplers(), *peers.FLOORS, *peers.PEERS])
    skipped = {m: peers.available(m) for m in wanted if m in (*peers.FLOORS, *peers.PEERS)
               and peers.available(m)}
    skipped |= {m: f"method {registered(m)!r} is not registered in bdlkit.algorithms.METHODS"
                for m in wanted if m not in (*peers.FLOORS, *peers.PEERS)
                and registered(m) not in algorithms.METHODS}
    chosen = [m for m in wanted if m not in skipped]
    say(echo, f"efficiency on {dev}: methods {chosen}; skipped {sorted(skipped)}")
    load_before = load_avg()
    if shared_warm_up:
        warm_up()
    rows: list[dict[str, Any]] = []
    profiles: dict[str, Any] = {}
    for model_name in model_names:
        label = MODEL_SPECS[model_name][0]
        problem, batch = problem_for(model_name, seed, dev)
        n_steps, n_rounds, n_warm = sizes[model_name]
        model_rows, states = time_model(
            model_name, problem, batch, chosen, n_steps, n_rounds, n_warm, budget_s, seed, dev,
            echo, denormal_rounds if model_name in denormal_models and dev.type == "cpu" else 0)
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
            mem, how, err = peak_memory(model_name, row["method"], seed, dev, mem_steps,
                                        problem, batch)
            row["peak_mem_mb"], row["mem_method"] = mem, how
            if err:
                row["status"] = err if row["status"] == "ok" else f"{row['status']}; {err}"
            say(echo, f"  {label:<20} {row['method']:<10} peak memory "
                      f"{'-' if mem is None else f'{mem:.1f} MB'} ({how}) {err or ''}")
        rows += model_rows
        del problem, batch
        gc.collect()
    target = (efficiency_target.run(target_steps, 3 if quick else 5)
              if target_steps else None)
    if fit_steps:
        say(echo, f"whole run: bdlkit fit, {fit_steps} steps, as a fresh process")
    whole_run = (efficiency_fit.run(fit_steps, seed, torch.get_num_threads())
                 if fit_steps else None)
    ratios = (ratio_table(rows) | (target["ratios"] if target else {})
              | (whole_run["ratios"] if whole_run else {}))
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
                "denormal_rounds": denormal_rounds,
                "denormal_models": (list(denormal_models) if denormal_rounds and dev.type == "cpu"
                                    else []),
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
                   "target": target, "fit": whole_run},
                  note=note(ratios, ratios_min, goals, skipped, profiles, dev,
                            settings["load_avg_1min"],
                            {k: spec[0] for k, spec in MODEL_SPECS.items()}, target,
                            [denormal_note(rows), efficiency_fit.section(whole_run)]),
                  floatfmt=".4g")
    return rows


