"""Start the ranks of a multi-process test as ``torchrun`` would: one process per rank
with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (gloo on the CPU)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

WORKER = Path(__file__).with_name("dist_worker.py")
TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(world: int, args: list[str], script: Path | None = None,
          module: str | None = None) -> list[subprocess.Popen]:
    """``world`` processes of ``python dist_worker.py *args`` (or ``python -m module *args``)."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank),
               "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "OMP_NUM_THREADS": "1"}
        command = ([sys.executable, "-m", module] if module
                   else [sys.executable, str(script or WORKER)])
        procs.append(subprocess.Popen(command + args, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    return procs


def wait(procs: list[subprocess.Popen], timeout: float = TIMEOUT_S) -> list[str]:
    """Each process's output; fails with all outputs when one exits non-zero."""
    outputs, codes = [], []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
        outputs.append(out)
        codes.append(p.returncode)
    if any(codes):
        raise AssertionError("ranks exited with " + str(codes) + "\n"
                             + "\n---\n".join(o[-3000:] for o in outputs))
    return outputs


def run(world: int, args: list[str], **kwargs) -> list[str]:
    if world == 1:  # alone: no launcher environment at all
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
        done = subprocess.run([sys.executable, str(WORKER), *args], env=env, text=True, check=False,
                              capture_output=True, timeout=TIMEOUT_S)
        if done.returncode:
            raise AssertionError(done.stdout[-3000:] + done.stderr[-3000:])
        return [done.stdout]
    return wait(start(world, args, **kwargs))
