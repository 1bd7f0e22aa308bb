"""``bdlkit fit`` on several processes (``torchrun --nproc-per-node N -m bdlkit fit ...``).

The processes form ``chain_groups`` groups (:mod:`bdlkit.core.distributed`). With one
group, all N ranks are data parallel on one run: ``OUT`` is one ordinary run directory,
written by rank 0. With G groups, chain ``g`` runs with seed ``seed + g`` into
``OUT/chain-g`` (an ordinary run directory each, written by the chain's first rank),
and after the chains end their writers gather each chain's kept draws' predictions at a
probe set and rank 0 writes the cross-chain R̂ and bulk ESS of those predictions to
``OUT/chains.json``. A chain ``g`` is exactly the one-process run with seed ``seed + g``
(``tests/distributed``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from bdlkit.core import distributed
from bdlkit.core.distributed import Topology
from bdlkit.core.lock import CHAIN_PREFIX, chain_name
from bdlkit.core.serialization import save_json
from bdlkit.diagnostics import ess_bulk_vehtari21, rhat_vehtari21, summarize
from bdlkit.engine.checkpoint import latest_checkpoint, read_meta
from bdlkit.evaluation.sampling import draw_predictions
from bdlkit.runs import directory, out_folder
from bdlkit.runs.config import RunConfig
from bdlkit.runs.launch import first_config_dir

PROBE_POINTS = 64  #: test inputs whose predictions the cross-chain diagnostics compare
MIN_DRAWS = 4  #: split R̂ and ESS need at least this many draws per chain
CHAINS_FILE = "chains.json"


def chain_folder(out: str | Path, topology: Topology) -> Path:
    """Where this rank's chain writes: ``OUT`` with one chain, else ``OUT/chain-g``."""
    out = Path(out)
    return out if topology.chain_groups == 1 else out / chain_name(topology.chain)


def chain_config(cfg: RunConfig, topology: Topology) -> RunConfig:
    """``cfg`` for this rank's chain: its seed (``seed + g``) and the launch's layout."""
    return dataclasses.replace(cfg, seed=cfg.seed + topology.chain,
                               chain_groups=topology.chain_groups,
                               data_parallel=topology.data_size)


def fit(cfg: RunConfig, out: str | Path, topology: Topology, **kwargs: Any
        ) -> directory.RunOutput | None:
    """This rank's part of the run (``kwargs``: those of :func:`bdlkit.runs.directory.fit`);
    the chain writer's output, None elsewhere."""
    if topology.chain_groups > 1:
        if kwargs.get("overwrite") and out_folder.occupied(Path(out)):
            _check_chain(cfg, Path(out), topology)  # before rank 0 deletes anything
        _prepare_chains_folder(Path(out), bool(kwargs.get("overwrite")), topology)
    output = directory.fit(chain_config(cfg, topology), chain_folder(out, topology),
                           topology=topology, **kwargs)
    _cross_chain(output, Path(out), topology)
    return output


def resume(run_dir: str | Path, topology: Topology, **kwargs: Any
           ) -> directory.RunOutput | None:
    """This rank's part of resuming ``run_dir`` (kwargs: :func:`bdlkit.runs.directory.resume`).
    A new step size, thread count or accepted change goes to the chains that have not
    finished (a chain that has is only evaluated again)."""
    folder = chain_folder(run_dir, topology)
    if topology.chain_groups > 1 and _finished(folder):
        kwargs.update(step_size=None, threads=None, accept=())
    output = directory.resume(folder, topology=topology, **kwargs)
    _cross_chain(output, Path(run_dir), topology)
    return output


def launch_layout(run_dir: str | Path) -> tuple[int, str]:
    """``(chain_groups, device)`` of the run in ``run_dir``: what joining its processes
    needs, read before."""
    cfg = directory.read_config(first_config_dir(run_dir))
    return cfg.chain_groups, cfg.device


def _check_chain(cfg: RunConfig, out: Path, topology: Topology) -> None:
    """Build this rank's chain (data, problem, algorithm, its resolved configuration) as
    :func:`bdlkit.runs.directory.fit` will, writing nothing: a configuration that cannot
    run is refused before ``--overwrite`` clears ``OUT`` (every rank fails alike)."""
    chain_cfg = chain_config(cfg, topology)
    runner = directory.build_runner(chain_cfg, chain_folder(out, topology),
                                    ds=directory.load_dataset(chain_cfg, new_run=True),
                                    topology=topology)[0]
    directory.resolved(chain_cfg, runner)


def _prepare_chains_folder(out: Path, overwrite: bool, topology: Topology) -> None:
    """``OUT`` of a chain-groups run: refused when it exists (a run of any kind) unless
    ``overwrite``; then rank 0 clears what bdlkit wrote there (an earlier run's chains,
    ``chains.json``, a one-process run) and marks it, while the other ranks wait."""
    if topology.rank == 0:
        chains = tuple(p.name for p in out.glob(f"{CHAIN_PREFIX}*")) if out.is_dir() else ()
        out_folder.prepare_out(out, overwrite,
                              entries=(*out_folder.RUN_ENTRIES, CHAINS_FILE, *chains))
    distributed.barrier()


def finished_note(run_dir: str | Path, chain_groups: int) -> str | None:
    """What ``bdlkit fit --resume`` says of a run whose every chain had already reached its
    last step (nothing is continued; the run is evaluated again); None for any other run."""
    run_dir = Path(run_dir)
    folders = [run_dir] if chain_groups == 1 else [run_dir / chain_name(g)
                                                   for g in range(chain_groups)]
    if not all(_finished(folder) for folder in folders):
        return None
    meta = read_meta(latest_checkpoint(folders[0] / "checkpoints"))
    return (f"{run_dir} had already finished ({meta['step']} of {meta['total_steps']} "
            f"steps): nothing to continue; evaluating it again (as `bdlkit evaluate "
            f"{run_dir}` does)")


def _finished(folder: Path) -> bool:
    """Whether the run in ``folder`` has a checkpoint at its last step."""
    newest = latest_checkpoint(folder / "checkpoints")
    meta = read_meta(newest) if newest is not None else None
    return bool(meta) and int(meta["step"]) >= int(meta.get("total_steps", -1)) >= 0


def _cross_chain(output: directory.RunOutput | None, out: Path, topology: Topology) -> None:
    """Gather the chains' function-space draws on their writers; rank 0 writes the R̂/ESS."""
    if topology.chain_groups == 1 or not topology.writer:
        return
    result = output.result
    if not result.algorithm.collects_draws:  # one approximation or ensemble per chain
        if topology.rank == 0:
            (out / CHAINS_FILE).unlink(missing_ok=True)  # not an earlier run's
        return
    read = directory.read_config(chain_folder(out, topology))
    x = directory.eval_split(directory.load_dataset(read))[0][:PROBE_POINTS]
    preds = draw_predictions(result, x).flatten(1)  # (draws, probe values)
    chains = distributed.all_gather_stack(preds, topology.writers, topology.chain_groups)
    if topology.rank != 0:
        return
    found: dict[str, Any] = {
        "method": read.method, "chains": topology.chain_groups,
        "draws_per_chain": int(chains.shape[1]), "probe_points": int(x.shape[0]),
        "seeds": [read.seed - topology.chain + g for g in range(topology.chain_groups)]}
    if chains.shape[1] < MIN_DRAWS:
        found["note"] = f"fewer than {MIN_DRAWS} kept draws per chain: no R-hat or ESS"
    else:
        found["function_rhat_vehtari21"] = summarize(rhat_vehtari21(chains), (1.01, 1.1))
        found["function_ess_bulk_mean"] = float(torch.nanmean(ess_bulk_vehtari21(chains)))
    save_json(out / CHAINS_FILE, found)
