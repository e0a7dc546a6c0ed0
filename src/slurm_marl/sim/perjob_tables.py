"""The per-job comparison (``sim/perjob.py``) as tables for people: one printer shared by
``simulate``/``compare`` (rows named by profile and strength) and ``replay``/``demo`` (rows
named by run)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from slurm_marl.console import output_console


def pct(count: int, share: float | None) -> str:
    """``3 (3.8%)``; ``-`` where nothing was compared."""
    return "-" if share is None else f"{count} ({share:.1%})"


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def worst_job(w: dict | None) -> str:
    """``#12: 4 GPUs, 1,200 -> 4,000 s`` (baseline JCT -> JCT)."""
    if w is None:
        return "-"
    return (f"#{w['job_id']}: {w['num_gpus']} GPU{'s' if w['num_gpus'] != 1 else ''}, "
            f"{w['baseline_jct_s']:,.0f} -> {w['jct_s']:,.0f} s")


def print_per_job(rows: Sequence[tuple[tuple[str, ...], dict]], baseline: str, *,
                  columns: Sequence[str] = ("profile", "strength"),
                  console: Console | None = None, users: bool = True,
                  note: str = "") -> None:
    """Tables of per-job comparisons: ``rows`` of (names, per_job), ``names`` one cell per
    of ``columns``; then by GPUs per job and, if ``users`` and any row has ``by_user``, the
    worst users. ``note`` ends the first table's title (e.g. the unit of its seconds)."""
    console = console or output_console()
    floor = rows[0][1]["floor_s"] if rows else 0.0
    table = Table(title=f"per job against {escape(baseline)}: JCT / max(JCT under "
                        f"{escape(baseline)}, {floor:g} s), jobs finished in both runs"
                        + (f"; {escape(note)}" if note else ""))
    for title in (*columns, "jobs", "avg JCT", "baseline avg", ">1.1x", ">2x", "p99",
                  "worst", "worst job"):
        table.add_column(title, justify="left" if title in columns else "right")
    for names, p in rows:
        table.add_row(*map(escape, names), str(p["compared_jobs"]), seconds(p["avg_jct_s"]),
                      seconds(p["baseline_avg_jct_s"]),
                      pct(p["jobs_slower_1_1x"], p["share_slower_1_1x"]),
                      pct(p["jobs_slower_2x"], p["share_slower_2x"]),
                      ratio(p["p99_ratio"]), ratio(p["worst_ratio"]), worst_job(p["worst_job"]))
    console.print(table)
    by_gpus = Table(title="per job by GPUs per job")
    for title in (*columns, "GPUs", "jobs", ">1.1x", ">2x", "p99", "worst"):
        by_gpus.add_column(title, justify="left" if title in columns else "right")
    for names, p in rows:
        for label, g in p["by_gpus"].items():
            if g["jobs"]:
                by_gpus.add_row(*map(escape, names), label, str(g["jobs"]),
                                pct(g["jobs_slower_1_1x"], g["share_slower_1_1x"]),
                                pct(g["jobs_slower_2x"], g["share_slower_2x"]),
                                ratio(g["p99_ratio"]), ratio(g["worst_ratio"]))
    console.print(by_gpus)
    if not users or not any(p["by_user"] for _, p in rows):
        return
    table = Table(title="per job: the worst users")
    for title in (*columns, "user", "jobs", ">1.1x", ">2x", "worst"):
        table.add_column(title, justify="left" if title in (*columns, "user") else "right")
    for names, p in rows:
        for g in (p["by_user"] or {}).get("worst", []):
            table.add_row(*map(escape, names), escape(g["user"] or "(none)"), str(g["jobs"]),
                          pct(g["jobs_slower_1_1x"], g["share_slower_1_1x"]),
                          pct(g["jobs_slower_2x"], g["share_slower_2x"]),
                          ratio(g["worst_ratio"]))
    console.print(table)
