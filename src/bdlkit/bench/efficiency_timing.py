"""Step time of the rows of ``bench efficiency``: interleaved rounds and the denormal check.

:func:`time_model` builds every row of a model in one process, warms each up and times
them *interleaved*: each round times ``steps`` consecutive steps of every row in turn (the
order rotating from round to round), so slow drifts of the machine hit all rows alike.
A row whose fastest warm-up step shows it would overrun ``budget_s`` is time-boxed (fewer
steps per round, then fewer rounds).

:func:`denormal_speedups` then times each row's step with float32 denormals flushed to
zero (``torch.set_flush_denormal(True)``) and not, interleaved (the order of the two
alternating from round to round), and gives ``denormal_speedup`` = time(not flushed) /
time(flushed): about 1 when the step holds no denormal numbers, clearly above 1 when some
of its arithmetic runs on them (slow microcode paths on x86). The caller's setting is
restored afterwards (:func:`bdlkit.core.denormals.flushing` reads it: torch has no getter;
``flushing_denormals`` is that function).
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from bdlkit.bench.efficiency_memory import release
from bdlkit.bench.efficiency_report import failure
from bdlkit.bench.efficiency_setup import MODEL_SPECS, build
from bdlkit.core.denormals import flushing as flushing_denormals  # the bench's name for it
from bdlkit.problems import BayesianModel

#: a row whose step runs this much faster with denormals flushed is flagged in the notes
DENORMAL_FLAG = 1.1


def say(echo: bool, text: str) -> None:
    """Progress of the suite on stderr (``echo=False``: silent)."""
    if echo:
        print(text, file=sys.stderr, flush=True)


@contextlib.contextmanager
def denormals_flushed(on: bool) -> Iterator[None]:
    """Run the block with denormals flushed (``on``) or not; the setting found is restored."""
    before = flushing_denormals()
    torch.set_flush_denormal(on)
    try:
        yield
    finally:
        torch.set_flush_denormal(before)


def time_model(model_name: str, problem: BayesianModel, batch: Any, methods: list[str],
               steps: int, repeats: int, warmup: int, budget_s: float, seed: int,
               dev: torch.device, echo: bool, denormal_rounds: int = 0
               ) -> tuple[list[dict[str, Any]], dict[str, tuple[Any, Any]]]:
    """The rows of ``methods`` on one model (median per-step time over interleaved rounds,
    the fastest round, ``timed``, ``status``, ``denormal_speedup`` over ``denormal_rounds``
    rounds, None when 0) and each row's live ``(algorithm, state)`` for profiling."""
    label = MODEL_SPECS[model_name][0]
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    rows: dict[str, dict[str, Any]] = {}
    live: dict[str, list[Any]] = {}  # method -> [algorithm, state]
    plan: dict[str, tuple[int, int]] = {}  # method -> (steps per round, rounds)
    for method in methods:
        rows[method] = {"model": model_name, "method": method, "status": "ok",
                        "step_time_s": None, "step_time_min_s": None, "peak_mem_mb": None,
                        "timed": None, "mem_method": None, "denormal_speedup": None}
        try:
            algorithm, state = build(method, problem, seed)
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
            release(dev)
            say(echo, f"  {label:<20} {method:<10} {rows[method]['status']}")
            continue
        live[method] = [algorithm, state]
        n, r = steps, repeats
        if last * n * r > budget_s:  # time-box: fewer steps per round, then fewer rounds
            n = max(1, int(budget_s / (last * r)))
            r = r if last * n * r <= budget_s else max(1, int(budget_s / last))
        plan[method] = (n, r)
    times: dict[str, list[float]] = {m: [] for m in live}
    for round_ in range(repeats):
        for method in _rotated(list(live), round_):
            n, r = plan[method]
            if round_ >= r:
                continue
            took = _timed_steps(live, method, batch, n, sync, rows, dev)
            if took is not None:
                times[method].append(took)
    for method, ts in times.items():
        if not ts:
            continue
        n, r = plan[method]
        row = rows[method]
        row.update(step_time_s=statistics.median(ts), step_time_min_s=min(ts),
                   timed=f"{n}x{len(ts)}")
        if (n, r) != (steps, repeats) and row["status"] == "ok":
            row["status"] = f"ok (time-boxed to {n} steps x {r} rounds)"
        say(echo, f"  {label:<20} {method:<10} {1e3 * row['step_time_s']:9.2f} ms/step "
                  f"({row['timed']}) {'' if row['status'] == 'ok' else row['status']}")
    if denormal_rounds:
        speedups = denormal_speedups(live, plan, batch, denormal_rounds, sync, rows, dev)
        for method, speedup in speedups.items():
            rows[method]["denormal_speedup"] = speedup
        say(echo, f"  {label:<20} denormal speedup (not flushed / flushed): "
                  + ", ".join(f"{m} {s:.2f}" for m, s in speedups.items() if s is not None))
    return list(rows.values()), {m: (a, s) for m, (a, s) in live.items()}


def denormal_speedups(live: dict[str, list[Any]], plan: dict[str, tuple[int, int]],
                      batch: Any, rounds: int, sync: Callable[[], None],
                      rows: dict[str, dict[str, Any]], dev: torch.device
                      ) -> dict[str, float | None]:
    """time(not flushed) / time(flushed) of each live row's step: ``rounds`` interleaved
    rounds of half its planned steps per round each way (median); None where flushing is
    unsupported (``torch.set_flush_denormal`` answers False) or the row failed. The
    caller's denormal setting is restored (:func:`denormals_flushed`)."""
    with denormals_flushed(True):
        supported = flushing_denormals()
    times: dict[str, dict[bool, list[float]]] = {m: {False: [], True: []} for m in live}
    for round_ in range(rounds if supported else 0):
        for method in _rotated(list(live), round_):
            n, r = plan[method]
            if round_ >= r:
                continue
            for flush in (False, True) if round_ % 2 == 0 else (True, False):
                with denormals_flushed(flush):
                    took = _timed_steps(live, method, batch, max(1, n // 2), sync, rows, dev)
                if took is None:
                    break
                times[method][flush].append(took)
    return {m: (statistics.median(t[False]) / statistics.median(t[True])
                if t[False] and t[True] and m in live else None) for m, t in times.items()}


def denormal_note(rows: list[dict[str, Any]]) -> str:
    """The notes' paragraph on the denormal check: the rows above :data:`DENORMAL_FLAG`
    flagged, or the largest speedup when none is ("" when nothing was checked)."""
    checked = [r for r in rows if r.get("denormal_speedup") is not None]
    if not checked:
        return ""
    models = ", ".join(dict.fromkeys(r["model"] for r in checked))
    text = (f"\n**Denormals** (checked on {models}): `denormal_speedup` is a row's step time "
            "with float32 denormals not flushed over flushed (`torch.set_flush_denormal`), "
            "interleaved, the setting restored afterwards. ")
    flagged = [r for r in checked if r["denormal_speedup"] > DENORMAL_FLAG]
    if flagged:
        return text + (f"**Flagged** (> {DENORMAL_FLAG}: some of the step's arithmetic runs "
                       "on denormal numbers, a slow path of the CPU): " + ", ".join(
                           f"`{r['model']}:{r['method']}` {r['denormal_speedup']:.2f}"
                           for r in flagged) + ".")
    top = max(checked, key=lambda r: r["denormal_speedup"])
    return text + (f"No row runs more than {DENORMAL_FLAG}x faster flushed (largest: "
                   f"`{top['model']}:{top['method']}` {top['denormal_speedup']:.2f}).")


def _rotated(methods: list[str], round_: int) -> list[str]:
    k = round_ % max(1, len(methods))
    return methods[k:] + methods[:k]


def _timed_steps(live: dict[str, list[Any]], method: str, batch: Any, n: int,
                 sync: Callable[[], None], rows: dict[str, dict[str, Any]],
                 dev: torch.device) -> float | None:
    """Seconds per step of ``n`` steps of row ``method`` (its state carried on); a failure
    is recorded in its row, which leaves ``live``, and gives None."""
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
        release(dev)
        return None
    live[method][1] = state
    return (time.perf_counter() - start) / n


__all__ = ["DENORMAL_FLAG", "denormal_note", "denormal_speedups", "denormals_flushed",
           "flushing_denormals", "say", "time_model"]
