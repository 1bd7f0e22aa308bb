"""Choosing and checking the checkpoint a run continues from.

:func:`open_newest` reads the newest checkpoint whose checksum holds; a damaged one is
set aside (renamed ``<name>.damaged``, :func:`bdlkit.engine.checkpoint.set_aside`) with a
:class:`~bdlkit.core.errors.RecoveryWarning` and the previous one is used: resuming is
bit-exact, so continuing from an earlier checkpoint gives the same run, only later.
:func:`check_fingerprint` refuses a checkpoint written by another configuration.
:func:`set_aside_diverged` runs when a run stops on NaN: the checkpoints after the newest
*sane* one (finite parameters below its bound) are set aside as ``.diverged``, so a
``--resume`` (with a smaller step size) starts from parameters that are still usable.
:func:`listed_files` names the sample shards the kept checkpoints need.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

from bdlkit.core.errors import CorruptFileError, RecoveryWarning, caller_stacklevel
from bdlkit.engine import vi_checks
from bdlkit.engine.checkpoint import (
    Checkpoint,
    list_checkpoints,
    load_checkpoint,
    read_meta,
    sane,
    set_aside,
)

CHECKPOINT_FORMAT = 2  # 2: the hyperparameter record of bdlkit.core.protocol.AlgorithmBase
FORMAT_SINCE = "0.2.0"  # the release that introduced CHECKPOINT_FORMAT 2
SANE_FACTOR = 1e6  # a sane checkpoint's max |θ| is at most this times max(1, max |θ₀|)


def open_newest(folder: Path) -> tuple[Path, Checkpoint]:
    """The newest readable checkpoint in ``folder`` (damaged newer ones set aside)."""
    found = list_checkpoints(folder)
    if not found and any(folder.glob("*.safetensors.diverged")):
        raise FileNotFoundError(
            f"every checkpoint in {folder} had diverged parameters (set aside as *.diverged): "
            "start the run again with --overwrite and a smaller step size"
        )
    if not found:
        raise FileNotFoundError(
            f"no checkpoint in {folder}: the run stopped before its first checkpoint; start "
            "it again with --overwrite"
        )
    for path in reversed(found):
        try:
            return path, load_checkpoint(path)
        except CorruptFileError as err:
            moved = set_aside(path, "damaged")
            warnings.warn(f"{err}; set it aside as {moved.name} and continuing from the "
                          "previous checkpoint", RecoveryWarning, stacklevel=caller_stacklevel())
    raise CorruptFileError(
        f"every checkpoint in {folder} is damaged (set aside as *.damaged): the run cannot be "
        "resumed; start it again with --overwrite, or restore a checkpoint from a backup"
    )


#: What a checkpoint that does not record a key was written with (an older bdlkit's).
_UNRECORDED = {"algorithm_version": "1", "compile": "off"}
#: The fingerprint's key of the caller's pinned fields (:func:`run_fingerprint`).
PINNED = "pinned"


def run_fingerprint(algorithm: Any, problem: Any, data: str, store: Any, compiled: str,
                    pinned: dict[str, str] | None = None) -> dict[str, str]:
    """What :func:`check_fingerprint` compares, as text for the checkpoint: the
    algorithm's name, kind and shown fields (its options and fixed constants; the derived
    members are ``repr=False``), the version of its update rule, the problem, the data
    (``data``: minibatch, rows, chains), the sample store's settings, how the steps run
    (``compiled``) and what the caller pins besides (``pinned``: field -> text, e.g. a run
    directory's data digest and thread count, :mod:`bdlkit.runs.run_record`)."""
    hyper = {name: repr(value) for name, value in algorithm.record().items()}
    found = {"hyperparameters": json.dumps(hyper, sort_keys=True),
             "algorithm_version": str(algorithm.VERSION), "problem": repr(problem),
             "data": data}
    if store is not None:
        found["samples"] = (f"burnin={store.burnin}, thin={store.thin}, "
                            f"max_samples={store.max_samples}")
    found["compile"] = compiled
    if pinned:
        found[PINNED] = json.dumps(pinned, sort_keys=True)
    return found


def pinned_fields(meta: dict[str, Any]) -> dict[str, str]:
    """The pinned fields a checkpoint recorded (``{}`` for one written before they were)."""
    try:
        found = json.loads(meta.get(PINNED) or "{}")
    except (TypeError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _check_pinned(meta: dict[str, Any], value: str, path: Path, changed: tuple[str, ...],
                  fix: str) -> None:
    """Refuse a pinned field whose value differs from checkpoint ``path``'s, but those
    ``changed`` names and those the checkpoint does not record (written before they were)."""
    saved = pinned_fields(meta)
    for name, now in json.loads(value).items():
        if name in saved and name not in changed and saved[name] != now:
            raise ValueError(f"checkpoint {path} was written with {name}={saved[name]}, but "
                             f"this run has {name}={now}; {fix}")


def check_fingerprint(meta: dict[str, Any], expected: dict[str, Any], path: Path,
                      method: str, changed: tuple[str, ...] = (),
                      fix: str = "resume with the run's own configuration") -> None:
    """Refuse checkpoint ``path`` (metadata ``meta``) unless it was written by the run
    ``expected`` describes (:meth:`bdlkit.Runner.fingerprint`, method, seed, length).
    ``changed`` names hyperparameters and pinned fields the caller has deliberately
    changed (a resume with a smaller step size, or ``--accept threads``). A key the
    checkpoint does not record (written by an older bdlkit) is not checked (``samples``,
    ``pinned`` and each pinned field) or takes the value that bdlkit ran with
    (``_UNRECORDED``: version 1, eager steps)."""
    written = meta.get("checkpoint_format", 1)
    if written > CHECKPOINT_FORMAT:
        raise ValueError(
            f"checkpoint {path} has checkpoint format {written}, newer than this bdlkit's "
            f"({CHECKPOINT_FORMAT}): resume it with the bdlkit release that wrote it"
        )
    for key, value in expected.items():
        saved = meta.get(key, _UNRECORDED.get(key))
        if key == "algorithm_version" and saved != value:
            raise ValueError(
                f"checkpoint {path} was written by version {saved} of {method}, whose update "
                f"rule differs from this bdlkit's (version {value}); finish the run with the "
                "bdlkit release that started it, or start it again"
            )
        if key == "hyperparameters" and saved != value and written < CHECKPOINT_FORMAT:
            raise ValueError(
                f"checkpoint {path} has checkpoint format {written} (written before bdlkit "
                f"{FORMAT_SINCE}); this version writes format {CHECKPOINT_FORMAT} and records "
                f"{key} differently, so it cannot check that the run is the same: finish the "
                "run with the bdlkit release that started it, or start it again"
            )
        if key == "hyperparameters" and changed:
            saved, value = _without(saved, changed), _without(value, changed)
        if key in ("samples", PINNED) and key not in meta:
            continue
        if key == PINNED:
            _check_pinned(meta, value, path, changed, fix)
            continue
        if key == "problem" and isinstance(saved, str) and "mean=given)" in saved:
            value = _GIVEN_DIGEST.sub("mean=given)", value)  # recorded before the digest
        if saved != value:
            was, now = first_difference(saved, value) if key == "problem" else (None, None)
            if was is not None or now is not None:  # name the field: likelihood, precision
                raise ValueError(
                    f"checkpoint {path} was written with a different problem: "
                    f"{was or 'no ' + _field_name(now)} in the checkpoint, "
                    f"{now or 'no ' + _field_name(was)} in this run; {fix}"
                )
            raise ValueError(
                f"checkpoint {path} was written with {key}={saved!r}, but this run has "
                f"{key}={value!r}; {fix}"
            )


_GIVEN_DIGEST = re.compile(r"mean=given:[0-9a-f]+\)")


def _fields(text: str) -> list[str]:
    """The top-level ``name=value`` fields of a repr ``Kind(a, b=C(d, e), f=g)``."""
    inner = text[text.find("(") + 1 : text.rfind(")")] if "(" in text else text
    parts, depth, start = [], 0, 0
    for i, char in enumerate(inner):
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(inner[start:i].strip())
            start = i + 1
    return [*parts, inner[start:].strip()]


def first_difference(saved: Any, value: Any) -> tuple[str | None, str | None]:
    """The first field in which two problem reprs differ (``likelihood=Gaussian(...)``
    against ``likelihood=Categorical()``); ``None`` on a side that lacks it, and
    ``(None, None)`` when the reprs cannot be compared field by field."""
    if not (isinstance(saved, str) and isinstance(value, str)):
        return None, None
    old, new = _fields(saved), _fields(value)
    for i in range(max(len(old), len(new))):
        a, b = (old[i] if i < len(old) else None), (new[i] if i < len(new) else None)
        if a != b:
            return a, b
    return None, None


def _field_name(field: str | None) -> str:
    return (field or "").split("=")[0]


def _without(record: Any, names: tuple[str, ...]) -> Any:
    if not isinstance(record, str):
        return record
    values = json.loads(record)
    return json.dumps({k: v for k, v in values.items() if k not in names}, sort_keys=True)


def listed_files(folder: Path, skip: Path | None = None) -> set[str]:
    """Sample shard files listed by the checkpoints in ``folder`` (but ``skip``)."""
    names: set[str] = set()
    for path in list_checkpoints(folder):
        meta = read_meta(path) if path != skip else None
        store = meta.get("store") if meta else None
        if isinstance(store, dict) and isinstance(store.get("shards"), list):
            names |= {s["file"] for s in store["shards"] if isinstance(s, dict) and "file" in s}
    return names


def newest_sane(folder: Path) -> Path | None:
    """The newest checkpoint whose parameters were finite and below its bound."""
    for path in reversed(list_checkpoints(folder)):
        meta = read_meta(path)
        if meta is not None and sane(meta):
            return path
    return None


def set_aside_diverged(folder: Path) -> Path | None:
    """After a NaN stop: set aside the checkpoints newer than the newest sane one, so a
    resume starts from it; returns it (None when there is none)."""
    keep = newest_sane(folder)
    for path in list_checkpoints(folder):
        if keep is None or path > keep:
            set_aside(path, "diverged")
    return keep


def nan_message(algorithm: Any, what: str, t: int, run_dir: Path | None
                ) -> tuple[str, Path | None]:
    """The NaN stop's message, and the checkpoint a resume continues from: with a
    ``run_dir`` the checkpoints after the newest sane one are set aside first
    (:func:`set_aside_diverged`), so the message names that one. A log density that is
    already NaN at step 1 was evaluated at the initial parameters, before any step size
    acted: the message says so instead of blaming the step size."""
    if t == 1 and what != "the parameters":  # step 1 evaluates it at the start
        good = set_aside_diverged(run_dir / "checkpoints") if run_dir is not None else None
        return (f"{algorithm.label}: {what} was NaN or infinite at step 1, where it is "
                "evaluated at the initial parameters, so no step size is to blame: the "
                "initial (or --pretrained) parameters hold NaN or inf, or the model gives a "
                "non-finite density there: check the initial weights, the data (extreme "
                "values) and the prior scale, and that the network's outputs at its "
                "initialisation are finite"), good
    knob, lr = vi_checks.step_size(algorithm)  # the option the algorithm declares
    hint = f" (now {knob}={lr})" if isinstance(lr, (int, float)) else ""
    kept, good = "", None
    if run_dir is not None:
        good = set_aside_diverged(run_dir / "checkpoints")
        kept = (f"; the last checkpoint with finite, bounded parameters is {good} (later "
                f"ones are set aside as *.diverged): `bdlkit fit --resume {run_dir} "
                f"--{knob.replace('_', '-')} <smaller>` continues from it" if good else
                "; no checkpoint before it has usable parameters")
    return (f"{algorithm.label}: {what} became NaN or infinite at step {t}{kept}. The step "
            f"size is probably too large: lower {knob}{hint}, e.g. by 10x; or check the data "
            "for extreme values and the prior scale"), good
