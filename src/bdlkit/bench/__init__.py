"""Benchmark suites: ``bdlkit bench SUITE [--quick] --out DIR``.

A suite runs several methods side by side in one process and writes
``DIR/results.json`` and ``DIR/results.md`` (a table, the command that produced it
and the machine), plus one run directory per method under ``DIR/runs/``. Later
capabilities register their suites in :data:`SUITES`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bdlkit import algorithms
from bdlkit.bench import (
    bnn_lowdata,
    defaults,
    diagnostics_speed,
    digits,
    efficiency,
    flow_stability,
    hmc_agreement,
    l2e,
    l2e_precision,
    l2e_sampling,
    posteriordb,
    runner_overhead,
    score_vi_study,
    startup,
    synthetic,
    timeseries,
    uci,
    vision,
)

Suite = Callable[..., list[dict[str, Any]]]

SUITES: dict[str, Suite] = {
    "digits": digits.run,
    "runner": runner_overhead.run,
    "startup": startup.run,
    "diagnostics": diagnostics_speed.run,
    "score-vi-study": score_vi_study.run,
    "efficiency": efficiency.run,
    "synthetic": synthetic.run,
    "posteriordb": posteriordb.run,
    "hmc-agreement": hmc_agreement.run,
    "l2e": l2e.run,
    "l2e-precision": l2e_precision.run,
    "l2e-sampling": l2e_sampling.run,
    "bnn-lowdata": bnn_lowdata.run,
    "flow-stability": flow_stability.run,
    "timeseries": timeseries.run,
    "defaults": defaults.run,
    "vision": vision.run,
    "uci": uci.run,
    "uci-gal-budget": uci.run_gal_budget,
}
DESCRIPTIONS: dict[str, str] = {
    "digits": digits.DESCRIPTION,
    "runner": runner_overhead.DESCRIPTION,
    "startup": startup.DESCRIPTION,
    "diagnostics": diagnostics_speed.DESCRIPTION,
    "score-vi-study": score_vi_study.DESCRIPTION,
    "efficiency": efficiency.DESCRIPTION,
    "synthetic": synthetic.DESCRIPTION,
    "posteriordb": posteriordb.DESCRIPTION,
    "hmc-agreement": hmc_agreement.DESCRIPTION,
    "l2e": l2e.DESCRIPTION,
    "l2e-precision": l2e_precision.DESCRIPTION,
    "l2e-sampling": l2e_sampling.DESCRIPTION,
    "bnn-lowdata": bnn_lowdata.DESCRIPTION,
    "flow-stability": flow_stability.DESCRIPTION,
    "timeseries": timeseries.DESCRIPTION,
    "defaults": defaults.DESCRIPTION,
    "vision": vision.DESCRIPTION,
    "uci": uci.DESCRIPTION,
    "uci-gal-budget": "uci's control: mc_dropout at Gal's 4 000 epochs on yacht and boston",
}


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise ValueError(f"unknown benchmark suite {name!r}; valid suites: {', '.join(SUITES)}")
    return SUITES[name]


#: Suites that can run a subset of their rows and reuse the others from an earlier run.
ROW_SUITES = ("synthetic",)
#: Suites that can run a subset of their settings (``--settings``), their other cells reused
#: from the same folder (``cells/``) when a run without it writes the whole table.
SETTINGS_SUITES = ("bnn-lowdata", "uci", "uci-gal-budget")
#: Suites that can run a subset of their rows (``--rows``), side by side, into a new folder.
METHOD_SUITES = {"posteriordb": tuple(posteriordb.vi_methods.SPECS),
                 "timeseries": tuple(timeseries.ROWS),
                 "defaults": tuple(sorted(algorithms.METHODS))}


def run_suite(name: str, out: str | os.PathLike, *, quick: bool = False, seed: int = 0,
              command: str | None = None, echo: bool = True, rows: tuple[str, ...] = (),
              reuse: str | os.PathLike | None = None, settings: tuple[str, ...] = (),
              meta_params: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Run suite ``name`` into ``out``; returns its rows (also written as JSON and Markdown).

    ``rows``/``settings``/``reuse`` (suites in :data:`ROW_SUITES`): run only these rows on
    these settings and take every other record from the results in ``reuse``; ``rows``
    alone (suites in :data:`METHOD_SUITES`): run only these rows; ``settings`` alone
    (suites in :data:`SETTINGS_SUITES`): run only these settings. ``meta_params``
    (``l2e-sampling`` only): L2E meta-parameter files to measure beside the shipped set."""
    suite = get_suite(name)
    if meta_params:
        if name != "l2e-sampling" or rows or reuse or settings:
            raise ValueError("--meta-params is an option of the l2e-sampling suite alone")
        missing = [m for m in meta_params if not Path(m).is_file()]
        if missing:
            raise ValueError(f"--meta-params: no such file {', '.join(missing)}; give files "
                             "written by `bdlkit meta-train l2e` (DIR/meta_params.safetensors)")
        return suite(Path(out), quick=quick, seed=seed, command=command, echo=echo,
                     meta_params=tuple(meta_params))
    if not (rows or reuse or settings):
        return suite(Path(out), quick=quick, seed=seed, command=command, echo=echo)
    if name in METHOD_SUITES and rows and not (reuse or settings):
        bad = [r for r in rows if r not in METHOD_SUITES[name]]
        if bad:
            raise ValueError(f"unknown rows {bad} of suite {name!r}; valid: "
                             f"{', '.join(METHOD_SUITES[name])}")
        return suite(Path(out), quick=quick, seed=seed, command=command, echo=echo,
                     methods=tuple(rows))
    if name in SETTINGS_SUITES and settings and not (rows or reuse):
        return suite(Path(out), quick=quick, seed=seed, command=command, echo=echo,
                     only_settings=tuple(settings))
    if name not in ROW_SUITES:
        raise ValueError(f"--settings/--reuse are options of the {', '.join(ROW_SUITES)} "
                         f"suite (--settings also of {', '.join(SETTINGS_SUITES)}) and --rows of {', '.join((*ROW_SUITES, *METHOD_SUITES))}, "
                         f"not of {name!r}")
    known = synthetic.ALL_ROWS
    bad = [r for r in rows if r not in known]
    if bad:
        raise ValueError(f"unknown rows {bad} of suite {name!r}; valid: {', '.join(known)}")
    return suite(Path(out), quick=quick, seed=seed, command=command, echo=echo,
                 rows=tuple(rows) or known, reuse=Path(reuse) if reuse else None,
                 only_settings=tuple(settings))
