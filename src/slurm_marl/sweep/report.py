"""A sweep's results as one table and one plot.

Table: one row per window x interference strength, one column per profile (and prediction
error, where the sweep has several); each cell the average JCT (mean over seeds) and its
ratio to the baseline profile (mean over seeds of the paired ratio: same window, strength,
seed and prediction error). Below it, per job against the baseline (``sim/perjob.py``,
each row's ``per_job``, paired the same way): the share of jobs more than 1.1x and 2x slower
(mean over seeds) and the worst ratio (over seeds). Plot: the average-JCT ratio per profile
per strength (mean over windows too), as grouped bars, written with matplotlib's Agg backend.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from statistics import mean

from slurm_marl.sim.perjob import per_job_comparison
from slurm_marl.sweep.run import JOB_TIMES

RESULTS, TABLE, PLOT = "results.json", "table.md", "ratios.png"


def _label(profile: str) -> str:
    return Path(profile).stem if profile.endswith(".toml") else profile


def _column(row: dict, several_errors: bool) -> str:
    label = _label(row["profile"])
    return f"{label} ({row['prediction_error']})" if several_errors else label


def _ordered(values) -> list:
    return list(dict.fromkeys(values))


def _pair(row: dict) -> tuple:
    return row["window"], row["interference"], row["seed"], row.get("prediction_error")


def attach_per_job(rows: Sequence[dict], baseline: str) -> None:
    """In place: every row gets ``per_job``, its jobs against the baseline profile's row of
    the same window, strength, seed and prediction error (None for the baseline's own rows,
    failed rows and rows whose baseline failed), and loses ``job_times``. Rows without
    ``job_times`` (already attached, or read back from results.json) are left alone."""
    if not any(JOB_TIMES in r for r in rows):
        return
    base = {_pair(r): r[JOB_TIMES] for r in rows
            if r["profile"] == baseline and not r.get("error") and JOB_TIMES in r}
    for r in rows:
        times = r.get(JOB_TIMES)
        theirs = base.get(_pair(r))
        r["per_job"] = None if (r["profile"] == baseline or r.get("error") or times is None
                                or theirs is None) else \
            per_job_comparison(times, theirs, baseline=_label(baseline))
    for r in rows:
        r.pop(JOB_TIMES, None)


def _ratio(row: dict, base: dict | None) -> float | None:
    if row.get("error") or not base or base.get("error"):
        return None
    jct, base_jct = row.get("avg_jct_s"), base.get("avg_jct_s")
    return jct / base_jct if jct is not None and base_jct else None


def summary_table(rows: Sequence[dict], baseline: str) -> dict:
    """``{"columns": [...], "rows": [{"window", "interference", "cells": {column: {...}}}]}``;
    each cell has ``avg_jct_s`` and ``ratio`` (None where no seed gave one), ``errors``,
    and from the rows' ``per_job`` (``attach_per_job``) ``share_slower_1_1x`` and
    ``share_slower_2x`` (means over seeds) and ``worst_ratio`` (the worst over seeds), None
    where no seed has one (the baseline's own column)."""
    several = len({r.get("prediction_error") for r in rows}) > 1
    base = {(r["window"], r["interference"], r["seed"], r.get("prediction_error")): r
            for r in rows if r["profile"] == baseline}
    columns = _ordered(_column(r, several) for r in rows)
    out = []
    for window, strength in _ordered((r["window"], r["interference"]) for r in rows):
        cells = {}
        for column in columns:
            group = [r for r in rows if (r["window"], r["interference"]) == (window, strength)
                     and _column(r, several) == column]
            cells[column] = _cell(group, base)
        out.append({"window": window, "interference": strength, "cells": cells})
    return {"baseline": _label(baseline), "columns": columns, "rows": out}


def _cell(group: list[dict], base: dict) -> dict:
    ok = [r for r in group if not r.get("error") and r.get("avg_jct_s") is not None]
    ratios = [x for r in ok if (x := _ratio(r, base.get(
        (r["window"], r["interference"], r["seed"], r.get("prediction_error"))))) is not None]
    per_job = [r["per_job"] for r in ok if r.get("per_job")
               and r["per_job"]["compared_jobs"]]
    return {"avg_jct_s": round(mean(r["avg_jct_s"] for r in ok), 2) if ok else None,
            "ratio": round(mean(ratios), 4) if ratios else None,
            "errors": sum(1 for r in group if r.get("error")),
            "share_slower_1_1x": round(mean(p["share_slower_1_1x"] for p in per_job), 4)
            if per_job else None,
            "share_slower_2x": round(mean(p["share_slower_2x"] for p in per_job), 4)
            if per_job else None,
            "worst_ratio": max(p["worst_ratio"] for p in per_job) if per_job else None}


def markdown(table: dict) -> str:
    """The table as Markdown: ``JCT (ratio)`` per cell, ``n failed`` where cells failed."""
    head = ["window", "strength", *table["columns"]]
    lines = [f"Average JCT (s), mean over seeds; in brackets the ratio to "
             f"{table['baseline']}.", "", "| " + " | ".join(head) + " |",
             "|---|---|" + "---:|" * len(table["columns"])]
    for row in table["rows"]:
        cells = [_text(row["cells"][c]) for c in table["columns"]]
        lines.append(f"| {row['window'] or 'all'} | {row['interference']} | "
                     + " | ".join(cells) + " |")
    if any(cell.get("worst_ratio") is not None for row in table["rows"]
           for cell in row["cells"].values()):
        lines += ["", f"Per job against {table['baseline']} (JCT / max(JCT under "
                      f"{table['baseline']}, 600 s), jobs finished in both): share of jobs "
                      f"more than 1.1x / more than 2x slower, mean over seeds; worst ratio "
                      f"over seeds.", "", "| " + " | ".join(head) + " |",
                  "|---|---|" + "---:|" * len(table["columns"])]
        for row in table["rows"]:
            cells = [_per_job_text(row["cells"][c]) for c in table["columns"]]
            lines.append(f"| {row['window'] or 'all'} | {row['interference']} | "
                         + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _per_job_text(cell: dict) -> str:
    if cell.get("worst_ratio") is None:
        return "-"
    return (f"{cell['share_slower_1_1x']:.1%} / {cell['share_slower_2x']:.1%}, "
            f"worst {cell['worst_ratio']:.2f}")


def _text(cell: dict) -> str:
    text = "-" if cell["avg_jct_s"] is None else f"{cell['avg_jct_s']:,.0f}"
    if cell["ratio"] is not None:
        text += f" ({cell['ratio']:.3f})"
    if cell["errors"]:
        text += f", {cell['errors']} failed"
    return text


def plot_ratios(table: dict, path: Path) -> None:
    """Grouped bars: x = interference strength, one bar per column (profile)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    strengths = _ordered(r["interference"] for r in table["rows"])
    columns = table["columns"]
    width = 0.8 / max(1, len(columns))
    fig, ax = plt.subplots(figsize=(2 + 1.6 * len(strengths), 4))
    for k, column in enumerate(columns):
        heights = []
        for strength in strengths:
            ratios = [r["cells"][column]["ratio"] for r in table["rows"]
                      if r["interference"] == strength
                      and r["cells"][column]["ratio"] is not None]
            heights.append(mean(ratios) if ratios else 0.0)
        ax.bar([i + k * width for i in range(len(strengths))], heights, width, label=column)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks([i + width * (len(columns) - 1) / 2 for i in range(len(strengths))])
    ax.set_xticklabels(strengths)
    ax.set_xlabel("interference strength")
    ax.set_ylabel(f"avg JCT / {table['baseline']}")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(rows: Sequence[dict], baseline: str, out: Path) -> dict:
    """Write results.json, table.md and ratios.png under ``out``; returns the table. The
    rows get ``per_job`` in place (``attach_per_job``)."""
    attach_per_job(rows, baseline)
    out.mkdir(parents=True, exist_ok=True)
    (out / RESULTS).write_text(json.dumps(list(rows), indent=2) + "\n")
    table = summary_table(rows, baseline)
    (out / TABLE).write_text(markdown(table))
    plot_ratios(table, out / PLOT)
    return table
