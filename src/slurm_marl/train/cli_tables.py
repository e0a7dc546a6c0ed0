"""The tables `slurm-marl train ...` and `slurm-marl evaluate` print, and the
evaluation's comparison against the best heuristic that its table and JSON share."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from slurm_marl.console import output_console


def print_metrics(title: str, doc: dict, keys: tuple[str, ...]) -> None:
    """A training run's summary: one row per metric of ``doc``."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in keys:
        table.add_row(key, str(doc[key]))
    output_console().print(table)


def mark_vs_best_heuristic(results: list[dict], strengths: list[str],
                           learned_names: list[str]) -> None:
    """Add ``vs_best_heuristic`` to each result row: its average JCT relative to the best
    heuristic's at the same interference strength (None where either did not finish)."""
    for s in strengths:
        base = [r["avg_jct_s"] for r in results if r["interference"] == s
                and r["profile"] not in learned_names and r["avg_jct_s"] is not None]
        best = min(base) if base else None
        for r in results:
            if r["interference"] == s:
                r["vs_best_heuristic"] = (round(r["avg_jct_s"] / best - 1, 4)
                                          if best and r["avg_jct_s"] is not None else None)


def _jct_cells(r: dict) -> list[str]:
    return [f"{r['avg_jct_s']:,.0f}" if r["avg_jct_s"] is not None else "-",
            f"{r['vs_best_heuristic']:+.1%}" if r["vs_best_heuristic"] is not None else "-"]


def print_evaluation(title: str, profiles: list, strengths: list[str],
                     results: list[dict]) -> None:
    """One row per profile; per strength its average JCT and how it compares."""
    table = Table(title=title)
    table.add_column("profile")
    for s in strengths:
        table.add_column(s, justify="right")
        table.add_column("vs best heuristic", justify="right")
    for prof in profiles:
        row = [escape(prof.name)]   # "las-learned[run/best]" is not rich markup
        for s in strengths:
            row += _jct_cells(next(x for x in results if x["profile"] == prof.name
                                   and x["interference"] == s))
        table.add_row(*row)
    output_console().print(table)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def print_thresholds(vc, before_row, windows, result, verdict, min_gain) -> None:
    """Start and best on each training window, and on each validation window when the
    guard simulated them: average JCT and the per-job numbers against fifo-backfill."""
    table = Table(title=f"2D-LAS knobs learned on {vc}'s rows before {before_row} "
                        f"({'subject to' if result.bound else 'without'} the per-job bound)")
    for title in ("policy", "window", "avg JCT", ">1.1x", ">2x", "p99", "bound"):
        table.add_column(title, justify="left" if title in ("policy", "window") else "right")
    rows = [(label, "train", w.window, s)
            for label, c in (("fixed (start)", result.start), ("learned", result.best))
            for w, s in zip(windows, c.scores)]
    if verdict is not None:
        for label, scores in (("fixed (start)", verdict.start_scores),
                              ("learned", verdict.learned_scores)):
            rows += [(label, "validation", w, s) for w, s in zip(verdict.windows, scores)]
    holds = {True: "holds", False: "broken", None: "-"}
    for label, kind, window, s in rows:
        table.add_row(escape(label), f"{kind} {window}",
                      "unfinished" if s.avg_jct_s is None else f"{s.avg_jct_s:,.0f}",
                      _pct(s.share_slower_1_1x), _pct(s.share_slower_2x),
                      "-" if s.p99_ratio is None else f"{s.p99_ratio:.2f}",
                      holds[s.bound_holds()])
    output_console().print(table)
    output_console().print(f"fixed (start): {escape(result.start.knobs.describe())}\n"
                           f"learned: {escape(result.best.knobs.describe())}")
    if verdict is None:
        return
    if not verdict.learned_scores:
        output_console().print(f"validation on {', '.join(verdict.windows)}: the search's "
                               "best is the start; fixed knobs kept")
        return
    ratio = "unfinished jobs" if verdict.ratio is None else f"{verdict.ratio:.3f}"
    bound = (f"; violation of the bound learned {verdict.learned_violation:.3g}, fixed "
             f"{verdict.start_violation:.3g}" if verdict.bound else "")
    output_console().print(
        f"validation on {', '.join(verdict.windows)}: learned / fixed JCT {ratio}{bound}; "
        + ("learned knobs kept" if verdict.learned_kept else "fixed knobs kept")
        + f" ({verdict.reason}; --min-gain {min_gain:.0%})")
