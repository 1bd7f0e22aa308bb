"""The multimodal part's tables and its verdict on "score-based VI avoids the ELBO's mode
collapse" (:mod:`bdlkit.bench.synthetic_modes`): ``modes.json`` and ``modes.md``.

The verdict compares, on every mixture setting, the median over seeds of the modes found
by score_vi with a flow against advi with the same flow (the full ELBO estimator; the
sticking-the-landing one is reported beside it), each at its selected grid point:

* **supported**: score_vi keeps more modes on at least half of the mixture settings and
  fewer on none;
* **not supported**: it keeps more on none;
* **inconclusive**: otherwise, and whenever a setting lacks either number (a row failed
  on every seed there).

The row ``start`` (q₀ itself) is the control: if it "found" modes the criterion would be
too lax, and the text says how many it finds.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from bdlkit.core.serialization import atomic_write_bytes, save_json
from bdlkit.runs import figures

CLAIM = "score-based VI avoids the ELBO's mode collapse"
ELBO_ROWS = ("advi_flow", "advi_flow_stl")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting × method: its selected grid point's medians over seeds."""
    out = []
    for setting in dict.fromkeys(r["setting"] for r in records):
        for row in dict.fromkeys(r["row"] for r in records if r["setting"] == setting):
            runs = [r for r in records if r["setting"] == setting and r["row"] == row
                    and r.get("selected")]
            ok = [r for r in runs if r["status"] == "ok"]
            entry: dict[str, Any] = {
                "setting": setting, "row": row, "hyper": runs[0]["hyper"] if runs else "-",
                "reverse_kl": _median([r["final"]["reverse_kl"] for r in ok]),
                "forward_kl": _median([r["final"]["forward_kl"] for r in ok]),
                "status": ", ".join(sorted({r["status"] for r in runs})) or "failed",
                "seconds": _median([r["seconds"] for r in runs])}
            if ok and "modes_found" in ok[0]["final"]:
                entry["modes_found"] = _median([r["final"]["modes_found"] for r in ok])
                entry["per_seed"] = "/".join(str(r["final"]["modes_found"]) for r in ok)
                entry["mode_mass"] = " ".join(f"{m:.2f}" for m in ok[0]["final"]["mode_mass"])
                entry["outside"] = _median([r["final"]["outside"] for r in ok])
            out.append(entry)
    return out


def verdict(summary: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """The comparison table (mixture settings) and the verdict sentence."""
    def found(setting: str, row: str) -> float:
        hit = [r for r in summary if r["setting"] == setting and r["row"] == row]
        return hit[0].get("modes_found", float("nan")) if hit else float("nan")

    table, more, fewer, missing = [], 0, 0, 0
    mixtures = [s for s in dict.fromkeys(r["setting"] for r in summary)
                if s.startswith("modes")]
    for setting in mixtures:
        svi, full, stl, start = (found(setting, r) for r in
                                 ("score_vi_flow", *ELBO_ROWS, "start"))
        table.append({"setting": setting, "modes": int(setting.split("-")[0][5:]),
                      "score_vi_flow": svi, "advi_flow": full, "advi_flow_stl": stl,
                      "start": start})
        if math.isnan(svi) or math.isnan(full):
            missing += 1
        more += svi > full
        fewer += svi < full
    if not mixtures:
        return table, "no mixture settings were run"
    if missing:
        word = "inconclusive"
    elif more == 0:
        word = "not supported"
    elif 2 * more >= len(mixtures) and fewer == 0:
        word = "supported"
    else:
        word = "inconclusive"
    stl_more = sum(r["score_vi_flow"] > r["advi_flow_stl"] for r in table)
    started = sum(r["start"] for r in table if not math.isnan(r["start"]))
    text = (f"**{word}**: score_vi with a flow keeps more modes than advi with the same flow "
            f"(full ELBO estimator) on {more} of {len(mixtures)} mixture settings and fewer "
            f"on {fewer}" + (f"; {missing} settings lack a number" if missing else "")
            + f"; against advi with the sticking-the-landing estimator it keeps more on "
            f"{stl_more}. The control q₀ finds {started:g} modes in all.")
    return table, text


DOC = """Every row starts from q₀ = N(0, I) with the same budget of score evaluations
(`score_evals`); `hyper` is its selected grid point (lowest reverse KL on the first seed),
repeated on the other seeds; values are medians over seeds. Reverse KL = E_q[log q − log p],
forward KL = E_p[log p − log q] (Monte Carlo, 4 000 draws each, normalised targets).
`modes_found`: modes where q puts at least half the target's mass inside the mode's
90 % ball (disjoint balls; `per_seed`: each seed's count); `mode_mass`: q's mass in each
ball on the first seed; `outside`: q's mass in no ball. `start` is q₀ = N(0, I) itself,
the control. Settings, rows and grids: `bdlkit.bench.synthetic_modes`.
"""


def write(out: Path, data: dict[str, Any], command: str) -> str:
    """Write ``modes.json`` and ``modes.md``; return the Markdown section for report.md."""
    summary = summarize(data["records"])
    table, text = verdict(summary)
    save_json(out / "modes.json", {**data, "command": command, "summary": summary,
                                   "claim": {"name": CLAIM, "table": table, "verdict": text}})
    head = (f"## Multimodal targets: does score-based VI avoid the ELBO's mode collapse?\n\n"
            f"Command: `{command}`  \n"
            f"Budget {data['budget']} score evaluations per run, seeds {data['seeds']}; "
            f"wall time {data['wall_seconds']:.0f} s\n")
    cols = ["row", "hyper", "reverse_kl", "forward_kl", "modes_found", "per_seed",
            "mode_mass", "outside", "seconds", "status"]
    parts = [head, DOC, f"### Verdict\n\n{text}\n", figures.markdown_table(table, floatfmt="g")]
    for setting in data["settings"]:
        rows = [r for r in summary if r["setting"] == setting]
        if rows:
            parts += [f"### {setting}\n", figures.markdown_table(rows, cols, floatfmt=".3g")]
    failed = [r for r in data["records"] if r["status"] != "ok"]
    if failed:
        parts += ["### Failed runs\n", figures.markdown_table(
            [{k: r.get(k, "") for k in ("setting", "row", "hyper", "seed", "status", "message")}
             for r in failed])]
    section = "\n".join(parts)
    atomic_write_bytes(out / "modes.md", section.encode())
    return section


__all__ = ["CLAIM", "summarize", "verdict", "write"]
