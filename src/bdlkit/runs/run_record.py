"""What a run directory's record pins: the inputs a resume and an evaluation must find
unchanged, and the changes ``bdlkit fit --resume DIR --accept FIELD`` lets a run continue with.

``config.yaml`` records every :class:`~bdlkit.runs.config.RunConfig` field; each checkpoint
records the run's fingerprint (:func:`bdlkit.engine.resume.run_fingerprint`). Every field
is one of three kinds (``tests/runs/test_run_record.py`` checks that each is one):

* :data:`IN_FINGERPRINT`: pinned by the fingerprint as it always was (the method, seed,
  length, hyperparameters, the problem's repr, the minibatch and row count, the sample
  store's settings, compile).
* :data:`PINNED`: recorded in each checkpoint as its ``pinned`` fields and compared with
  ``config.yaml`` by every resume and evaluation (:func:`check_against`); those in
  :data:`RESUME_ONLY` (how the steps compute, not what: an evaluation may run elsewhere)
  by a resume only. The data is pinned by its content (:func:`data_digest`), checked
  against ``data_sha256`` whenever a run's data is loaded (:func:`check_data`); the
  thread count is the one the run had (``threads``, set for the run by
  :func:`using_threads`), so that a resume repeats the steps' arithmetic bit for bit.
* :data:`HARMLESS`: changes neither results nor the log (where files are, how often
  checkpoints are written).

A difference is refused with one line naming the field and the fix. Those in
:data:`ACCEPTABLE` may be continued with deliberately (:func:`reconciled`): the change is
recorded under ``changes:`` (step, option, from, to), and the checkpoints up to that step
keep the old value, which is what a later resume compares them with (:func:`value_at`: a
resume stopped before its next checkpoint is resumed again without a new ``--accept``).
The command a refusal suggests is the run's own (:func:`bdlkit.runs.launch.resume_command`).
A run recorded before a field was pinned (no ``data_sha256`` or
``threads`` in config.yaml, no ``pinned`` in its checkpoints) is read as before, unchecked
(as ``_UNRECORDED`` in :mod:`bdlkit.engine.resume` treats older checkpoints); its first resume
records them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from bdlkit.core.errors import InputError
from bdlkit.core.serialization import tensor_digest
from bdlkit.core.value_range import SPAN, WHY, positive_problem
from bdlkit.data.dataset import is_data_file
from bdlkit.engine.checkpoint import latest_checkpoint, read_meta
from bdlkit.engine.resume import pinned_fields
from bdlkit.runs.config_values import ConfigValueError
from bdlkit.runs.launch import resume_command

#: Fields the checkpoint fingerprint pins, and through which of its entries.
IN_FINGERPRINT: dict[str, str] = {
    "method": "method", "seed": "seed", "steps": "total_steps", "epochs": "total_steps",
    "batch_size": "data (the minibatch)", "hyper": "hyperparameters",
    "prior_scale": "problem (the prior)", "temperature": "problem", "kld": "problem",
    "likelihood": "problem", "precision": "problem",
    "pretrained": "problem (the prior's mean: a digest of the file's random weights)",
    "burnin": "samples", "thin": "samples", "max_samples": "samples", "compile": "compile",
}
#: Fields each checkpoint records (``pinned``) and every resume and evaluation compares.
PINNED: dict[str, str] = {
    "data_sha256": "the data's content",
    "data_kwargs": "the data's split, scaling and task options",
    "model": "the network", "model_kwargs": "the network's options",
    "bayesian": "which weights are random", "dtype": "the arithmetic of every step",
    "log_every": "log.jsonl's cadence", "eval_every": "log.jsonl's held-out evaluations",
    "eval_samples": "the VI predictive's draws (metrics.json)",
    "threads": "the steps' arithmetic (the order of parallel sums)",
    "device": "the steps' arithmetic",
}
#: Pinned fields only a resume compares (how the steps compute, not what they compute).
RESUME_ONLY = ("threads", "device")
#: Pinned fields a resume may continue with changed (``--accept FIELD``), and what that means.
ACCEPTABLE: dict[str, str] = {
    "threads": "the steps from here on are not bit-exact with a run at either count",
    "device": "the steps from here on are not bit-exact with a run on either device",
    "log_every": "log.jsonl takes the new cadence from here on",
    "eval_every": "log.jsonl takes the new evaluations from here on",
}
#: Why a pinned field that is not acceptable is not.
NOT_ACCEPTABLE: dict[str, str] = {
    "data_sha256": "a run fitted on one data set and continued on another is a posterior "
                   "of neither",
    "eval_samples": "metrics.json would not be the run's (bdlkit evaluate --num-draws N "
                    "evaluates with another number of draws)",
}
#: Fields that change neither results nor the log.
HARMLESS: dict[str, str] = {
    "data": "the data's path: its content is pinned (data_sha256); edit it where the file moved",
    "data_root": "where named data sets are found: their content is pinned",
    "checkpoint_every": "which steps are checkpointed: a resume is bit-exact from any",
    "checkpoint_minutes": "the same, by time",
    "chain_groups": "checked against the launch (torchrun)",
    "data_parallel": "checked against the launch (torchrun)",
    "changes": "the record of accepted changes itself",
}
#: Pinned fields an older bdlkit did not record (None in its config.yaml, not checked).
RECORDED_SINCE = ("data_sha256", "threads")
#: The key of a loaded data set's ``meta`` that holds its :func:`data_digest`.
DIGEST = "sha256"
_CHUNK = 1 << 20


def data_digest(name: str, ds: Any) -> str:
    """The data's content digest: the SHA-256 of a ``.npz``/``.csv`` file's bytes, or for a
    named data set of its loaded arrays (:func:`~bdlkit.core.serialization.tensor_digest`
    of every split's inputs and targets as the loader returns them: the loaders compute
    in numpy float64, so the digest is the same in every process at every thread count;
    it changes with the data files under the data root and with the loader's version).

    Args:
        name: the data set's name or the file's path (as ``config.yaml`` records it).
        ds: the data set loaded from it (before any device or dtype cast).
    """
    if is_data_file(name):
        h = hashlib.sha256()
        with open(name, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
        return h.hexdigest()
    parts = ("x_train", "y_train", "x_test", "y_test", "x_val", "y_val")
    return tensor_digest({p: getattr(ds, p) for p in parts if getattr(ds, p) is not None})


def check_data(cfg: Any, digest: str, *, new_run: bool = False) -> None:
    """Refuse data whose ``digest`` differs from the one ``cfg`` records (``data_sha256``).

    Args:
        cfg: the run's :class:`~bdlkit.runs.config.RunConfig` (None: nothing recorded).
        digest: the :func:`data_digest` of the data just loaded.
        new_run: ``cfg`` is a new run's (``bdlkit fit --out``): its ``data_sha256`` was
            given with its options (e.g. in a run's ``config.yaml`` used as ``--config``),
            and the refusal says so; else it is a recorded run's (resume, evaluate).
    """
    recorded = cfg.data_sha256
    if recorded is None or recorded == digest:
        return
    if new_run:
        raise InputError(
            f"data_sha256 {recorded}, given for this new run (e.g. in a run's config.yaml "
            f"used as --config), pins other data than {cfg.data} (SHA-256 {digest}): remove "
            f"the key data_sha256 to fit on this data (the run records its digest), or fit "
            f"the data it pins")
    fix = ("fit a new run on this data with --out (a run cannot continue, or be evaluated, "
           "on other data)")
    if is_data_file(cfg.data):
        raise InputError(
            f"data file {cfg.data} has changed since the run was fitted on it: its SHA-256 is "
            f"now {digest}, the run recorded {recorded} (data_sha256 in config.yaml); restore "
            f"the file the run was fitted on (or point data: in config.yaml at a copy of it), "
            f"or {fix}")
    raise InputError(
        f"data set {cfg.data!r} (data_kwargs {cfg.data_kwargs}) is not the data the run was "
        f"fitted on: its arrays hash to SHA-256 {digest}, the run recorded {recorded} "
        f"(data_sha256 in config.yaml); restore the data files under the data root "
        f"(data_root, $BDLKIT_DATA) and the library versions the run used, or {fix}")


def inputs(ds: Any) -> dict[str, Any]:
    """What a run records of its inputs as it runs: the data's digest (``ds.meta``) and the
    thread count (``torch.get_num_threads()``)."""
    return {"data_sha256": ds.meta[DIGEST], "threads": torch.get_num_threads()}


def pinned(cfg: Any, ds: Any, *, stepping: bool) -> dict[str, str]:
    """The pinned fields of a run of ``cfg`` on ``ds`` as its checkpoints record them (JSON
    text): the data's digest and thread count as the run has them (:func:`inputs`), the
    others from ``cfg``; ``stepping=False`` (an evaluation) leaves out :data:`RESUME_ONLY`."""
    values = {**cfg.to_dict(), **inputs(ds)}
    return {name: _text(values[name]) for name in PINNED
            if stepping or name not in RESUME_ONLY}


def with_inputs(cfg: Any, ds: Any) -> Any:
    """``cfg`` with the fields an older bdlkit did not record (:data:`RECORDED_SINCE`)
    filled in from the run as it runs now (:func:`inputs`)."""
    found = {k: v for k, v in inputs(ds).items() if getattr(cfg, k) is None}
    return dataclasses.replace(cfg, **found) if found else cfg


@contextlib.contextmanager
def using_threads(count: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to ``count`` (None: left as it is) for the block,
    and set back after it."""
    before = torch.get_num_threads()
    if count is not None and count != before:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def check_accept(accept: tuple[str, ...]) -> None:
    """Refuse a field ``--accept`` cannot take, saying why (or naming those it can)."""
    for name in accept:
        if name in ACCEPTABLE:
            continue
        which = f"--accept takes {', '.join(ACCEPTABLE)}"
        if name in ("data", "data_sha256"):
            raise InputError(f"--accept {name}: the data cannot change within a run: "
                             f"{NOT_ACCEPTABLE['data_sha256']}; fit a new run on the new "
                             f"data with --out ({which})")
        if name in PINNED:
            why = NOT_ACCEPTABLE.get(name, f"it changes {PINNED[name]}, so the run would be "
                                     "neither the old one nor a new one")
            raise InputError(f"--accept {name}: a run cannot continue with another {name}: "
                             f"{why}; start a new run with --out ({which})")
        raise InputError(f"--accept {name}: not a field a resume can accept; {which} "
                         f"(docs/runs.md, 'What the run record pins')")


def reconciled(cfg: Any, run_dir: Path, meta: dict[str, Any] | None, *,
               threads: int | None = None, accept: tuple[str, ...] = ()) -> Any:
    """``cfg`` (``run_dir``'s config.yaml) to resume with: the thread count ``threads``
    (``--threads``) where given, and each pinned field that differs from the newest
    checkpoint's (``meta``; None: no checkpoint to compare with) and that ``accept``
    names recorded under ``changes`` at that checkpoint's step. A difference ``changes``
    already records at or after that step (a change accepted by a resume stopped before
    its next checkpoint: :func:`value_at`) is no difference, and is not recorded again.
    Nothing is written here.

    Raises:
        InputError: a field ``accept`` cannot take, or that does not differ; a difference
            that ``accept`` does not name (the message says how to restore it or gives
            the command that accepts it: :func:`bdlkit.runs.launch.resume_command`);
            ``accept`` on a finished run.
    """
    check_accept(accept)
    if meta is None:  # the runner refuses: no checkpoint to continue from
        return cfg
    step, total = int(meta.get("step", 0)), int(meta.get("total_steps", -1))
    finished = step >= total >= 0
    if finished and (accept or threads not in (None, cfg.threads)):
        raise InputError(f"{run_dir} has finished ({step} of {total} steps): nothing "
                         "continues, so there is no change to make; drop --accept and "
                         "--threads")
    if threads is not None:
        try:
            cfg = dataclasses.replace(cfg, threads=threads)
        except ConfigValueError as err:
            raise err.relabel("--threads") from None
    names = [n for n in PINNED if not (finished and n in RESUME_ONLY)]
    found = differences(cfg, meta, names)
    for name in accept:
        now = getattr(cfg, name)
        if name not in found and _text(value_at(cfg.changes, name, now, step)) == _text(now):
            raise InputError(f"--accept {name}: {name} is {now} as the run recorded; nothing "
                             f"to accept (change it with --threads or in config.yaml first)")
    missing = [name for name in found if name not in accept]
    if missing:
        name = next((n for n in missing if n not in ACCEPTABLE), missing[0])
        old, new = found[name]
        source = (f"--threads {new}" if name == "threads" and threads is not None
                  else f"config.yaml has {name}: {new}")
        command = resume_command(run_dir, threads=threads, accept=dict.fromkeys(
            n for n in (*accept, *found) if n in ACCEPTABLE))
        raise InputError(f"{run_dir}: {source}, but the run's checkpoints were written "
                         f"with {name}: {old}; "
                         f"{_fix(name, old, run_dir, threads, finished, command)}")
    if not found:
        return cfg
    kept = [c for c in cfg.changes if not (c["option"] in found and c["step"] >= step)]
    changes = [{"step": step, "option": name, "from": old, "to": new}
               for name, (old, new) in found.items()]
    return dataclasses.replace(cfg, changes=[*kept, *changes])


def value_at(changes: list[dict[str, Any]], name: str, value: Any, step: int) -> Any:
    """Field ``name``'s value when the checkpoint of ``step`` was written: its value now,
    ``value``, with the changes recorded at ``step`` or later undone, newest first (a
    change at step s holds for the steps after s; the checkpoint of s has the old value).
    A change whose ``to`` is not the value then is not undone (the field was edited since).

    Args:
        changes: the run's ``changes`` record.
        name: the field.
        value: its value in ``config.yaml`` (or ``--threads``).
        step: the checkpoint's step.
    """
    for change in reversed(changes):
        if change["option"] != name or change["step"] < step:
            continue
        if _text(change["to"]) != _text(value):
            break
        value = change["from"]
    return value


def changes_of(cfg: Any) -> dict[str, int]:
    """Options changed on resume -> the step of their latest change (``cfg.changes``)."""
    return {c["option"]: c["step"] for c in cfg.changes}


def with_step_size(cfg: Any, knob: str, name: str, value: Any, *,
                    step: int) -> Any:
    """``cfg`` with the step size ``knob`` set to ``value`` and the change recorded."""
    flag = "--" + knob.replace("_", "-")
    if name != knob:
        raise InputError(f"--resume changes only the step size of method {cfg.method!r}, "
                         f"{flag}; got --{name.replace('_', '-')}. To change other options, "
                         "start a new run with --out")
    if positive_problem(value):
        raise InputError(f"{flag} must be a finite number > 0 in {SPAN} ({WHY}), got {value!r}")
    values = cfg.to_dict()
    old = values["hyper"].get(knob)
    values["hyper"][knob] = float(value)
    values["changes"] = [*(values.get("changes") or []),
                         {"step": step, "option": knob, "from": old,
                          "to": float(value)}]
    return type(cfg)(**values)


def newest_meta(run_dir: Path) -> dict[str, Any] | None:
    """The metadata of ``run_dir``'s newest checkpoint (None: none, or unreadable)."""
    path = latest_checkpoint(run_dir / "checkpoints")
    return None if path is None else read_meta(path)


def check_against(cfg: Any, meta: dict[str, Any], run_dir: Path) -> None:
    """Refuse a ``config.yaml`` whose pinned fields (but :data:`RESUME_ONLY`) differ from
    those the final checkpoint (``meta``) recorded: the check of an evaluation."""
    names = [n for n in PINNED if n not in RESUME_ONLY]
    for name, (old, new) in differences(cfg, meta, names).items():
        hint = f" ({NOT_ACCEPTABLE[name]})" if name == "eval_samples" else ""
        raise InputError(f"{run_dir}/config.yaml has {name}: {new}, but the run was written "
                         f"with {name}: {old}; restore {name}: {old} in config.yaml{hint}")


def differences(cfg: Any, meta: dict[str, Any], names: list[str]) -> dict[str, tuple]:
    """``{field: (checkpoint's value, cfg's value)}`` for the fields of ``names`` whose
    value at the checkpoint's step (:func:`value_at`) differs from the checkpoint's; those
    the checkpoint or config.yaml does not record are not compared."""
    saved, values, found = pinned_fields(meta), cfg.to_dict(), {}
    step = int(meta.get("step", 0))
    for name in names:
        if name not in saved or (name in RECORDED_SINCE and values[name] is None):
            continue
        if saved[name] != _text(value_at(cfg.changes, name, values[name], step)):
            found[name] = (_value(saved[name]), values[name])
    return found


def _fix(name: str, old: Any, run_dir: Path, threads: int | None, finished: bool,
         command: str) -> str:
    """How to resume past a difference in ``name``: restore the value, or accept it with
    ``command`` (:func:`bdlkit.runs.launch.resume_command`: the run's own launch, with
    ``--threads`` and every difference to accept)."""
    restore = (f"resume without --threads (the run's count, {old}, is used)"
               if name == "threads" and threads is not None
               else f"restore {name}: {old} in {run_dir}/config.yaml")
    if name in ACCEPTABLE and not finished:
        return (f"{restore}; or continue with the new value: {command} ({ACCEPTABLE[name]}; "
                "recorded under changes: in config.yaml)")
    why = NOT_ACCEPTABLE.get(name, "" if name in ACCEPTABLE else
                             f"a run cannot continue with another {name}: start a new run "
                             "with --out")
    return f"{restore}" + (f" ({why})" if why else "")


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text
