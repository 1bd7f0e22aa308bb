"""Every message that says how to go on gives the run's own resume command (issue 45, after
review): a full disk (mend 4) as a stopped run does, through the one
:func:`bdlkit.runs.launch.resume_command`; and a chain's folder name is stated once, in
:mod:`bdlkit.core.lock` (mend 6).
"""

from __future__ import annotations

import argparse
import ast
import errno
import os
import re
from pathlib import Path

import pytest

import bdlkit
from bdlkit.cli_errors import no_space
from bdlkit.core.distributed import Topology
from bdlkit.core.lock import RUN_MARKER, chain_name, own_chain
from bdlkit.runs import launch, ranks
from bdlkit.runs.yaml_files import save_yaml

CHECKPOINT = "step-000000005.safetensors"


def _one_process_run(tmp_path: Path, data_parallel: int) -> Path:
    run = tmp_path / "R"
    (run / "checkpoints").mkdir(parents=True)
    save_yaml(run / "config.yaml", {"method": "sgld", "data_parallel": data_parallel})
    (run / "checkpoints" / CHECKPOINT).write_bytes(b"")
    return run


def _chain_groups_run(tmp_path: Path) -> Path:
    """OUT of 2 chains of one rank each; only chain 1 has a checkpoint."""
    out = tmp_path / "OUT"
    for g in range(2):
        (out / chain_name(g) / "checkpoints").mkdir(parents=True)
        save_yaml(out / chain_name(g) / "config.yaml",
                  {"method": "sgld", "chain_groups": 2, "data_parallel": 1})
    (out / RUN_MARKER).write_text("")
    (out / chain_name(1) / "checkpoints" / CHECKPOINT).write_bytes(b"")
    return out


@pytest.mark.parametrize(("layout", "launcher"), [
    (lambda tmp: _one_process_run(tmp, 1), "bdlkit"),
    (lambda tmp: _one_process_run(tmp, 2), "torchrun --nproc-per-node 2 -m bdlkit"),
    (_chain_groups_run, "torchrun --nproc-per-node 2 -m bdlkit")])
def test_mend4_a_full_disk_gives_the_runs_own_resume_command(tmp_path, layout, launcher):
    """The full-disk line used to say `bdlkit fit --resume R` for every run."""
    run = layout(tmp_path)
    err = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(run / "log.jsonl"))
    line = no_space("fit", argparse.Namespace(resume=None, out=str(run)), err)
    assert line.endswith(f"then `{launcher} fit --resume {run}` continues from its newest "
                         "checkpoint"), line


def test_mend4_a_full_disk_before_any_chain_checkpoint_says_to_start_again(tmp_path):
    out = _chain_groups_run(tmp_path)
    (out / chain_name(1) / "checkpoints" / CHECKPOINT).unlink()
    line = no_space("fit", argparse.Namespace(resume=str(out), out=None),
                    OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    assert line.endswith(f"run the command again with --overwrite ({out} has no checkpoint "
                         "yet)")


def test_mend6_a_chains_folder_is_named_and_read_back_alike(tmp_path):
    out = _chain_groups_run(tmp_path)
    chain = ranks.chain_folder(out, Topology(world=4, rank=3, chain_groups=2))
    assert chain == out / chain_name(1) and own_chain(out, chain)
    assert launch.top_folder(chain) == out and launch.chain_folders(chain) == [
        out / chain_name(0), chain]
    assert launch.resume_command(chain) == f"torchrun --nproc-per-node 2 -m bdlkit fit " \
                                           f"--resume {out}"


NAME_BY_HAND = re.compile(r"(^|/)chain-(\d|\*|$)")


def _chain_names_by_hand(path: Path) -> list[tuple[int, str]]:
    """String constants (not docstrings) that spell a chain folder's name ("chain-0",
    "chain-*") or an f-string that builds one ("chain-{g}")."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                       ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docstrings and NAME_BY_HAND.search(node.value)):
            found.append((node.lineno, node.value))
        if isinstance(node, ast.JoinedStr):
            found += [(node.lineno, a.value) for a, b in zip(node.values, node.values[1:])
                      if isinstance(a, ast.Constant) and a.value.endswith("chain-")
                      and isinstance(b, ast.FormattedValue)]
    return found


def test_mend6_the_chain_folder_name_is_stated_once():
    """ranks, cli_stops, reference, compare and the CLI each built "chain-{g}" by hand and
    core.lock matched it with a regex of its own; now core.lock states it."""
    src = Path(bdlkit.__file__).parent
    by_hand = {str(p.relative_to(src)): found for p in sorted(src.rglob("*.py"))
               if p.relative_to(src).as_posix() != "core/lock.py"
               and (found := _chain_names_by_hand(p))}
    assert by_hand == {}
