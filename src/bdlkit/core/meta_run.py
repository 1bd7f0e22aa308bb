"""The run folder of a meta-training (``bdlkit meta-train l2e|meta-sgmcmc --out DIR``).

Both learners write the same files: ``config.json``; ``checkpoint.safetensors`` (the
learner's tensors, written atomically, with the number of outer steps and the options in its
metadata); ``history.json`` (one record per outer step); ``meta_params.safetensors``;
``meta_loss.png``. A rerun with the same ``--out`` resumes from the checkpoint when its
options match the stored ones (only the options a learner declares resumable may differ).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import Tensor

from bdlkit.core.meta_files import constants_dict
from bdlkit.core.plotting import new_figure, save_png
from bdlkit.core.serialization import (
    CorruptFileError,
    load_json,
    load_tensors_with_metadata,
    save_json,
    save_tensors,
)
from bdlkit.core.value_range import positive_problem

#: files a run writes in its folder (removed by ``overwrite``)
OUTPUTS = ("checkpoint.safetensors", "history.json", "meta_params.safetensors",
           "meta_loss.png", "config.json")
CHECKPOINT = "checkpoint.safetensors"


def check_options(cfg: Any, ints: Sequence[str], positive: Sequence[str],
                  available_families: Sequence[str]) -> None:
    """``ValueError`` naming the option when one of ``ints`` is not an integer >= 1, one of
    ``positive`` is not a number > 0 in bdlkit's range (:mod:`bdlkit.core.value_range`), or ``cfg.families`` is empty or names a family not available."""
    for name in ints:
        value = getattr(cfg, name)
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"meta-train {name} must be an integer >= 1, got {value!r}")
    for name in positive:
        problem = positive_problem(getattr(cfg, name))
        if problem:
            raise ValueError(f"meta-train {name} {problem}")
    unknown = set(cfg.families) - set(available_families)
    if unknown or not cfg.families:
        raise ValueError(f"meta-train families {sorted(unknown) or '()'} are not available; "
                         f"valid here: {tuple(available_families)}")


def options_dict(cfg: Any) -> dict[str, Any]:
    """A meta-training config as the JSON its run folder records (families as a list)."""
    d = dataclasses.asdict(cfg)
    d["families"] = list(cfg.families)
    d["constants"] = constants_dict(cfg.constants)  # as a run before a new constant recorded it
    return d


def resume(out: Path, options: dict[str, Any], resumable: tuple[str, ...], overwrite: bool
           ) -> tuple[dict[str, Tensor], list[dict[str, Any]]] | None:
    """The checkpoint's tensors and the history up to it, or None for a fresh start
    (no checkpoint, or ``overwrite``, which removes the run's files). The options are
    compared with the ones stored *in the checkpoint*, so a newer config.json (an
    interrupted ``--overwrite``) cannot pass an old state off as new."""
    ckpt = out / CHECKPOINT
    if overwrite:
        for name in OUTPUTS:
            (out / name).unlink(missing_ok=True)
    if not ckpt.exists():
        return None
    tensors, meta = load_tensors_with_metadata(ckpt)
    try:
        saved = json.loads(meta["config"])
        steps = int(meta["steps"])
        history = load_json(out / "history.json")[:steps]
    except (KeyError, ValueError, TypeError, FileNotFoundError) as err:
        raise CorruptFileError(f"{ckpt} is not a readable meta-training checkpoint ({err}); "
                               "pass --overwrite to start afresh") from err
    mine = json.loads(json.dumps(options))
    differ = sorted(k for k in mine if k not in resumable and saved.get(k) != mine[k])
    if differ:
        raise ValueError(f"{out} holds a meta-training run with other options ({differ}); "
                         "pass --overwrite to start afresh, or another --out")
    if len(history) != steps:
        raise CorruptFileError(f"{ckpt} does not match its history.json; pass --overwrite "
                               "to start afresh")
    return tensors, history


def save_checkpoint(out: Path, tensors: dict[str, Tensor], history: list[dict[str, Any]],
                    options: dict[str, Any]) -> None:
    """history.json, then the checkpoint recording how many of its records it covers."""
    save_json(out / "history.json", history)
    save_tensors(out / CHECKPOINT, tensors,
                 metadata={"steps": str(len(history)),
                           "config": json.dumps(options, sort_keys=True)})


def smoothed(history: list[dict[str, Any]], window: int = 20,
             key: str = "meta_loss") -> list[float]:
    """The moving average of ``key`` over the last ``window`` records (None values skipped)."""
    vals = [h[key] for h in history]
    out = []
    for i in range(len(vals)):
        chunk = [v for v in vals[max(0, i - window + 1): i + 1] if v is not None]
        out.append(sum(chunk) / len(chunk) if chunk else float("nan"))
    return out


def plot_curve(history: list[dict[str, Any]], path: Path, title: str, ylabel: str,
               log: bool = True) -> Path | None:
    """The meta-loss per outer step and its moving average (``None`` without matplotlib)."""
    fig = new_figure((6, 3.5))
    if fig is None or not history:
        return None
    ax = fig.add_subplot(1, 1, 1)
    steps = list(range(len(history)))
    ax.plot(steps, [h["meta_loss"] for h in history], lw=0.6, alpha=0.4, label="per step")
    ax.plot(steps, smoothed(history), lw=2, label="moving average (20)")
    ax.set_xlabel("outer step")
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return save_png(fig, path)


__all__ = ["CHECKPOINT", "OUTPUTS", "check_options", "options_dict", "plot_curve", "resume",
           "save_checkpoint", "smoothed"]


def add_run_options(parser: argparse.ArgumentParser, budget_minutes: float) -> None:
    """The options every ``bdlkit meta-train LEARNER`` has: the run folder and the budget."""
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="run folder (resumed if present)")
    parser.add_argument("--budget-minutes", type=float, default=budget_minutes,
                        help=f"wall-clock budget of this invocation (default {budget_minutes:g})")
