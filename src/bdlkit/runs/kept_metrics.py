"""Re-evaluating a run keeps what it does not recompute.

``bdlkit evaluate R`` recomputes the test metrics every time; OOD detection (``--ood``),
agreement with a reference (``--reference``) and covariate shift (``--corruptions``) only
when asked. An evaluation without one of them keeps that part of the previous
``metrics.json`` (:func:`carry_over`) and records where it came from under
``metrics["kept_from_earlier"]``: ``{part: {"num_draws": ..., "num_test": ...}}``, the draws
and test rows of the evaluation that computed it. The run health is recomputed over the
merged metrics (the OOD AUPR check reads kept values too). Figures: ``corruptions.png`` is
redrawn from the kept metrics; ``ood.png`` needs the OOD inputs' predictive, so the file of
the evaluation that made it is kept (:func:`kept_figures`). Asking for a part again
replaces it and its record.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bdlkit.core.errors import CorruptFileError
from bdlkit.core.serialization import load_json
from bdlkit.evaluation import Evaluation
from bdlkit.evaluation.health import run_health, run_notes

#: Where ``metrics.json`` records the parts kept from an earlier evaluation.
KEPT = "kept_from_earlier"
#: The optional parts of an evaluation and their ``metrics.json`` keys (an ``ood_`` prefix
#: for OOD).
PART_KEYS: dict[str, tuple[str, ...]] = {
    "ood": ("ood_",),
    "reference": ("agreement", "total_variation", "reference_rows"),
    "corruptions": ("corruptions", "corruption_frozen_pixels"),
}
#: The figures that only the evaluation's own tensors can draw, per part.
PART_FIGURES = {"ood": "ood.png"}
#: The option that recomputes each part.
PART_OPTIONS = {"ood": "--ood", "reference": "--reference", "corruptions": "--corruptions"}


def part_keys(part: str, values: dict[str, Any]) -> list[str]:
    """The keys of ``values`` that belong to ``part`` (of :data:`PART_KEYS`)."""
    names = PART_KEYS[part]
    if part == "ood":
        return [k for k in values if k.startswith(names[0])]
    return [k for k in names if k in values]


def carry_over(previous: dict[str, Any] | None, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` plus every part ``previous`` holds and ``values`` lacks, with the record
    under :data:`KEPT` (the module docstring); ``values`` itself is not changed.

    Args:
        previous: the earlier ``metrics.json`` (None: there was none).
        values: the metrics this evaluation computed.
    """
    merged = {k: v for k, v in values.items() if k != KEPT}
    if not previous:
        return merged
    earlier = previous.get(KEPT) if isinstance(previous.get(KEPT), dict) else {}
    kept: dict[str, Any] = {}
    for part in PART_KEYS:
        keys = part_keys(part, previous)
        if not keys or part_keys(part, values):
            continue
        merged.update({k: previous[k] for k in keys})
        kept[part] = earlier.get(part) or {k: previous.get(k) for k in ("num_draws", "num_test")}
    if kept:
        merged[KEPT] = kept
    return merged


def kept_figures(values: dict[str, Any]) -> set[str]:
    """The figures of parts that ``values`` kept from an earlier evaluation and that cannot
    be redrawn from the metrics (``ood.png``)."""
    kept = values.get(KEPT) or {}
    return {PART_FIGURES[part] for part in kept if part in PART_FIGURES}


def describe(values: dict[str, Any]) -> str | None:
    """One sentence on what was kept and from which evaluation; None when nothing was."""
    kept = values.get(KEPT) or {}
    if not kept:
        return None
    parts = ", ".join(
        f"{part} ({record.get('num_draws')} draws, {record.get('num_test')} test rows)"
        for part, record in kept.items())
    options = " ".join(PART_OPTIONS[part] for part in kept)
    return (f"kept from an earlier evaluation, not recomputed: {parts}; pass {options} to "
            "recompute")


def reevaluated(run_dir: Path, ev: Evaluation, result: Any, ds: Any) -> Evaluation:
    """``ev`` with the parts of ``run_dir``'s current ``metrics.json`` that it did not
    compute (:func:`carry_over`) and the run health over the merged metrics; ``ev`` when
    there is no readable earlier ``metrics.json`` or nothing to keep."""
    path = Path(run_dir) / "metrics.json"
    try:
        previous = load_json(path) if path.is_file() else None
    except (CorruptFileError, ValueError, OSError):
        previous = None  # an unreadable file keeps nothing; it is rewritten next
    merged = carry_over(previous if isinstance(previous, dict) else None, ev.metrics)
    if KEPT not in merged:
        return ev
    merged["health"] = run_health(merged, result, ev.test, ds)
    merged.pop("health_notes", None)
    if notes := run_notes(merged):
        merged["health_notes"] = notes
    return dataclasses.replace(ev, metrics=merged)


__all__ = ["KEPT", "PART_FIGURES", "PART_KEYS", "carry_over", "describe", "kept_figures",
           "part_keys", "reevaluated"]
