"""``bdlkit.load``: open anything bdlkit wrote, without unpickling.

Two layouts hold a finished run:

- a **result folder** written by :meth:`bdlkit.Result.save` (``result.json``,
  ``state.safetensors``, ``samples.safetensors``): read by :func:`load_result`, which
  needs the problem to restore the algorithm's state;
- a **run directory** written by ``bdlkit fit`` (``config.yaml``, ``checkpoints/``,
  ``samples/``): rebuilt from its own configuration by :func:`bdlkit.runs.directory.load_run`.

:func:`load` tells them apart and records which it found in ``Result.source``.
"""

from __future__ import annotations

import os
from pathlib import Path

from bdlkit.algorithms import get_method
from bdlkit.core import rng
from bdlkit.core.protocol import Problem
from bdlkit.core.serialization import (
    CorruptFileError,
    load_json,
    load_tensors,
    state_from_tensors,
)
from bdlkit.engine.result import FORMAT_VERSION, Result
from bdlkit.engine.result_contract import ResultContract
from bdlkit.runs.directory import load_run

RESULT_FOLDER = "result folder (Result.save)"
RUN_DIRECTORY = "run directory (bdlkit fit)"


def load(path: str | os.PathLike, problem: Problem | None = None) -> Result:
    """The :class:`Result` saved at ``path``: a :meth:`Result.save` folder or a ``bdlkit
    fit`` run directory (``Result.source`` says which).

    Args:
        path: the folder.
        problem: for a result folder, the problem it was run on (e.g. the same
            ``BayesianModel``): without it the result holds samples and history only.
            A run directory rebuilds its own problem from ``config.yaml``, so pass none.
    """
    path = Path(path)
    if (path / "config.yaml").is_file() and not (path / "result.json").exists():
        if problem is not None:
            raise ValueError(f"{path} is a {RUN_DIRECTORY}: it rebuilds its data, network and "
                             "prior from config.yaml; call bdlkit.load without problem=")
        result = load_run(path)[0]
        result.source = RUN_DIRECTORY
        return result
    if path.is_dir() and not (path / "result.json").exists():
        raise FileNotFoundError(f"{path} holds neither result.json (a {RESULT_FOLDER}) nor "
                                f"config.yaml (a {RUN_DIRECTORY}): nothing bdlkit can load")
    result = load_result(path, problem)
    result.source = RESULT_FOLDER
    return result


def load_result(path: str | os.PathLike, problem: Problem | None = None) -> Result:
    """Read a :meth:`Result.save` folder without unpickling anything.

    Without ``problem`` the result holds samples and history only; pass the same
    problem (e.g. the same ``BayesianModel``) to restore the algorithm state and use
    ``predict``: another one (a different prior, likelihood or network layer, though the
    shapes agree) is refused, naming what differs (:mod:`bdlkit.engine.result_contract`).
    A folder written in another format (by another bdlkit version) is refused, saying
    which.
    """
    path = Path(path)
    meta = load_json(path / "result.json")
    where = path / "result.json"
    _check_format(meta, where)
    if "config" not in meta:
        raise CorruptFileError(f"{where} is not a bdlkit result (format {FORMAT_VERSION}): "
                               "it holds no config; save the result again")
    config, files = meta["config"], meta.get("files")
    if not isinstance(config, dict) or not isinstance(config.get("method"), str):
        raise CorruptFileError(f"{where} names no method (its config has no 'method'): it "
                               "was edited or damaged; save the result again")
    if files is not None and not (isinstance(files, dict) and all(
            v is None or isinstance(v, str) for v in files.values())):
        raise CorruptFileError(f"{where}: 'files' must map file names to checksums")
    samples = None
    tensors = _read(path, "samples.safetensors", files)
    if tensors is not None:
        samples = tensors["_"] if set(tensors) == {"_"} else tensors
    algorithm = state = None
    contract = ResultContract.from_json(meta.get("contract"))
    if problem is not None:
        contract.check_problem(problem, path)
        if not config.get("hyper_serializable", True):
            raise ValueError(
                f"{path} was run with non-serialisable hyperparameters ({config['hyper']}); "
                "rebuild the algorithm yourself and load state.safetensors with "
                "bdlkit.core.serialization.state_from_tensors"
            )
        algorithm = get_method(config["method"]).build(problem, **config["hyper"])
        if isinstance(config.get("steps"), int):  # the run's length, bound as the runner did
            algorithm = algorithm.for_run(config["steps"])
        gen = rng.generator(0)
        chains = config.get("chains")
        init = problem.init_params(gen, chains) if chains else problem.init_params(gen)
        template = algorithm.init(init, generator=gen)
        saved = _read(path, "state.safetensors", files)
        if saved is None:
            raise CorruptFileError(f"{path} holds no state.safetensors: save the result again")
        state = state_from_tensors(template, saved)
    return Result(problem, algorithm, state, samples, meta.get("history", []), config,
                  kind=config.get("kind"), contract=contract)


def _check_format(meta: object, where: Path) -> None:
    """Refuse a ``result.json`` that is not a result's, or one of another format version
    (written by a newer or older bdlkit), with what to do."""
    written = meta.get("format") if isinstance(meta, dict) else None
    if not isinstance(written, int) or isinstance(written, bool):
        raise CorruptFileError(f"{where} is not a bdlkit result (it records no format "
                               "version): save the result again")
    if written > FORMAT_VERSION:
        raise CorruptFileError(
            f"{where} was written by a newer bdlkit (result format {written}; this bdlkit "
            f"reads format {FORMAT_VERSION}): upgrade bdlkit (pip install -U bdlkit) to "
            "load it, or run the inference again with this version")
    if written < FORMAT_VERSION:
        raise CorruptFileError(
            f"{where} was written by an older bdlkit (result format {written}; this bdlkit "
            f"reads format {FORMAT_VERSION}): load it with the bdlkit release that saved "
            "it, or run the inference again and save it with this one")


def _read(path: Path, name: str, files: dict[str, str | None] | None) -> dict | None:
    """The tensors of ``path/name``, checked against the checksum ``result.json`` lists (a
    result saved before checksums lists none: the file is read if it is there)."""
    file = path / name
    advice = "the result is damaged: save it again, or restore it from a backup"
    if files is None or name not in files:
        return load_tensors(file, advice) if file.exists() else None
    if files[name] is None:
        return None
    if not file.exists():
        raise CorruptFileError(f"{file} is missing, but {path / 'result.json'} lists it; "
                               f"{advice}")
    return load_tensors(file, advice, expected=files[name])
