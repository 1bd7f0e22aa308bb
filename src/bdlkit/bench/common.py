"""Pieces every benchmark suite shares: machine description, a warm-up, cached cells."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def machine_info() -> dict[str, Any]:
    """Versions and core counts recorded next to every benchmark result."""
    return {"python": platform.python_version(), "torch": torch.__version__,
            "platform": platform.platform(), "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads()}


def warm_up() -> None:
    """A few untimed steps so one-off costs (lazy imports, torch.func and allocator
    warm-up) are not charged to whichever method a suite times first."""
    from bdlkit import data, infer, models
    from bdlkit.problems import BayesianModel

    ds = data.load("digits")
    net = models.MLP(ds.input_shape, ds.num_classes, hidden=(100,))
    model = BayesianModel(net, "categorical", prior=1.0, num_data=ds.num_train)
    for method in ("map", "sgld"):
        infer(model, method, data=ds, steps=20, seed=0)


def cached_cell(out: Path, name: str, key: dict[str, Any], compute: Callable[[], Any],
                echo: bool = True) -> Any:
    """``compute()``, or what an earlier run with the same ``key`` left in
    ``out/cells/<name>.json``: a suite of hours resumes after a crash, and processes that
    run disjoint ``--settings`` of one suite share one folder (a last run without
    ``--settings`` then only writes the tables). ``key`` holds the options the value
    depends on (plan, seed, grids); the code is in it too (:func:`source_digest`), so a
    cell computed by other code is never reused. ``compute()`` must return JSON (NaN and
    ±inf are stored as null)."""
    import json

    from bdlkit.core.errors import CorruptFileError
    from bdlkit.core.serialization import load_json, save_json

    path = out / "cells" / f"{name}.json"
    key = json.loads(json.dumps({**key, "code": source_digest()}, default=str))
    if path.is_file():
        try:
            stored = load_json(path)
        except CorruptFileError:  # a run killed mid-write cannot leave one (atomic writes)
            stored = None
        if isinstance(stored, dict) and stored.get("key") == key:
            if echo:
                print(f"  {name}: reused from {path}", file=sys.stderr, flush=True)
            return stored["value"]
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_json(path, {"key": key, "value": value})
    return json.loads(path.read_text())["value"]  # the same value, stored or reused


def source_digest() -> str:
    """SHA-256 of bdlkit's own source files (``*.py`` under the package, in path order)."""
    import hashlib

    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def mean_std(runs: list[dict[str, Any]], keys: tuple[str, ...] | list[str],
             no_std: tuple[str, ...] = ()) -> dict[str, float]:
    """``key`` (mean over ``runs``) and ``key_std`` (their sample std, when there are two or
    more and ``key`` is not in ``no_std``) for every key; runs where a key is missing or
    None are left out of that key."""
    import statistics

    out: dict[str, float] = {}
    for key in keys:
        vals = [r[key] for r in runs if r.get(key) is not None]
        if vals:
            out[key] = statistics.fmean(vals)
            if len(vals) > 1 and key not in no_std:
                out[f"{key}_std"] = statistics.stdev(vals)
    return out


def cached_reference(values: dict[str, Any], folder: Path, chains: int
                     ) -> tuple[Any, Any, bool, float]:
    """The HMC reference of ``values`` (``bdlkit.runs.reference`` options) in ``folder``: reused
    when one with the same options is there, rebuilt when the options differ (e.g. after a
    ``--quick`` run). Returns (reference, its RunConfig, reused, seconds)."""
    import time

    from bdlkit.runs import reference
    from bdlkit.runs.config import RunConfig

    cfg = RunConfig(**reference.with_defaults(values))
    start = time.perf_counter()
    reused = (folder / "reference.json").is_file()
    try:
        ref = reference.build(cfg, folder, chains=chains)
    except FileExistsError:  # a reference of another setting: rebuild
        reused = False
        ref = reference.build(cfg, folder, chains=chains, overwrite=True)
    return ref, cfg, reused, time.perf_counter() - start


def prepare_bench_out(out: Path) -> Path:
    """Create or refresh a suite's output folder; refuse a folder bdlkit did not write."""
    from bdlkit.runs.out_folder import prepare_out

    return prepare_out(out, overwrite=True, marker=".bdlkit-bench",
                       entries=("results.json", "results.md", "report.md", "runs", "plots",
                                "modes.json", "modes.md"))


def write_results(out: Path, suite: str, quick: bool, command: str | None, title: str,
                  setup: str, rows: list[dict[str, Any]], meta: dict[str, Any],
                  note: str = "", floatfmt: str = ".4f",
                  table: list[dict[str, Any]] | None = None) -> str:
    """``results.json`` (rows, settings, command, machine) and ``results.md`` (a table of
    ``table``, by default the rows themselves)."""
    from bdlkit.core.serialization import atomic_write_bytes, save_json
    from bdlkit.runs import figures as report

    command = command or f"bdlkit bench {suite}{' --quick' if quick else ''} --out {out}"
    machine = machine_info()
    save_json(out / "results.json", {"suite": suite, "command": command, **meta,
                                     "machine": machine, "rows": rows})
    text = (f"# {suite}: {title}\n\nCommand: `{command}`  \n{setup}; machine: {machine}\n\n"
            f"{report.markdown_table(rows if table is None else table, floatfmt=floatfmt)}\n"
            + (f"\n{note}\n" if note else ""))
    atomic_write_bytes(out / "results.md", text.encode())
    return command
