"""The peak memory of one ``bench efficiency`` row: CUDA's counter, or a fresh process's RSS.

``peak_mem_mb`` is the peak memory *growth* over the built model and batch while the
algorithm is initialised and runs ``mem_steps`` steps (the method's state plus the
transient memory of a step):

* CUDA: ``torch.cuda.max_memory_allocated`` minus the allocated memory before ``init``.
* CPU: :func:`subprocess_memory` runs :func:`probe` in a fresh interpreter: it builds the
  model and batch, runs one discarded step of the same method (one-off allocations), resets
  the kernel's peak-RSS mark (``/proc/self/clear_refs``) and reads ``VmRSS``, then runs a
  fresh ``init`` and the steps and reads ``VmHWM`` (where ``clear_refs`` is unavailable,
  ``ru_maxrss``: then a lower bound). glibc serves every allocation above 64 KiB by
  ``mmap`` (:data:`MMAP_THRESHOLD`), so RSS follows live tensor memory.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from bdlkit.bench.efficiency_report import failure
from bdlkit.bench.efficiency_setup import problem_for, run_steps
from bdlkit.problems import BayesianModel

MMAP_THRESHOLD = 65536


def peak_memory(model_name: str, method: str, seed: int, dev: torch.device, mem_steps: int,
           problem: BayesianModel, batch: Any) -> tuple[float | None, str, str | None]:
    """(peak growth in MB, how it was measured, error or None) of row ``method``."""
    if dev.type == "cuda":
        return cuda_memory(method, problem, batch, seed, dev, mem_steps)
    return subprocess_memory(model_name, method, seed, mem_steps)


def release(dev: torch.device) -> None:
    """Free what the last row left (and CUDA's cache)."""
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def cuda_memory(method: str, problem: BayesianModel, batch: Any, seed: int,
                dev: torch.device, mem_steps: int) -> tuple[float | None, str, str | None]:
    """The growth of ``torch.cuda.max_memory_allocated`` over ``init`` and the steps."""
    how = "cuda max_memory_allocated growth"
    release(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    base = torch.cuda.memory_allocated(dev)
    try:
        run_steps(method, problem, batch, seed, mem_steps)
        torch.cuda.synchronize(dev)
        peak = torch.cuda.max_memory_allocated(dev) - base
    except Exception as err:  # recorded, never fatal
        return None, how, "memory " + failure(err)
    finally:
        release(dev)
    return peak / 2**20, how, None


def subprocess_memory(model_name: str, method: str, seed: int, mem_steps: int,
                      timeout_s: float = 900.0) -> tuple[float | None, str, str | None]:
    """Run :func:`probe` in a fresh interpreter and read its JSON answer."""
    import bdlkit

    spec = {"model": model_name, "method": method, "seed": seed, "steps": mem_steps,
            "threads": torch.get_num_threads()}
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD))
    src = str(Path(bdlkit.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    code = "import sys; from bdlkit.bench.efficiency_memory import probe; probe(sys.argv[1])"
    try:
        proc = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], check=False,
                              env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, "rss", f"memory probe timed out after {timeout_s:.0f} s"
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        why = (f"killed by signal {-proc.returncode} (out of memory?)" if proc.returncode < 0
               else " ".join(proc.stderr.strip().splitlines()[-1:])[:160])
        return None, "rss", f"memory probe failed: {why}"
    answer = json.loads(lines[-1])
    return answer.get("peak_mem_mb"), answer["how"], answer.get("error")


def probe(spec_json: str) -> None:
    """Subprocess entry: build, one discarded step, reset the RSS peak mark, then a fresh
    ``init`` + ``steps`` steps; print ``{"peak_mem_mb", "how", "error"}`` as JSON."""
    spec = json.loads(spec_json)
    torch.set_num_threads(int(spec["threads"]))
    problem, batch = problem_for(spec["model"], int(spec["seed"]), torch.device("cpu"))
    answer: dict[str, Any] = {"how": "rss", "peak_mem_mb": None, "error": None}
    try:  # one discarded step of the same method: one-off allocations (imports, kernels)
        run_steps(spec["method"], problem, batch, int(spec["seed"]), 1)
    except Exception as err:  # recorded, never fatal
        answer["error"] = "memory " + failure(err)
        print(json.dumps(answer), flush=True)
        return
    gc.collect()
    exact = reset_peak_rss()
    base_kb = status_kb("VmRSS") if exact else maxrss_kb()
    answer["how"] = ("rss growth (VmHWM after clear_refs)" if exact
                     else "rss growth (ru_maxrss, lower bound)")
    try:
        run_steps(spec["method"], problem, batch, int(spec["seed"]), int(spec["steps"]))
    except Exception as err:  # recorded, never fatal
        answer["error"] = "memory " + failure(err)
    peak_kb = status_kb("VmHWM") if exact else maxrss_kb()
    if answer["error"] is None and base_kb is not None and peak_kb is not None:
        answer["peak_mem_mb"] = max(0.0, peak_kb - base_kb) / 1024
    print(json.dumps(answer), flush=True)


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (Linux >= 4.0); False where that is unavailable."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return status_kb("VmHWM") is not None
    except OSError:
        return False


def status_kb(field: str) -> float | None:
    """A ``/proc/self/status`` field in kB (None where there is none)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return float(line.split()[1])
    except OSError:
        pass
    return None


def maxrss_kb() -> float:
    """This process's peak RSS in kB by ``getrusage``."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform == "darwin" else float(peak)  # bytes on macOS


__all__ = ["MMAP_THRESHOLD", "peak_memory", "probe", "release", "reset_peak_rss",
           "subprocess_memory"]
