"""`slurm-marl report`'s printed form: the report dict (``report_cli``) as tables and
sentences, kept apart from the command so that reading the options and running the
simulations is not mixed with the layout of what is shown."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from slurm_marl.console import output_console
from slurm_marl.sim import report as R
from slurm_marl.sim.perjob_tables import pct, print_per_job, ratio, seconds
from slurm_marl.sim.report_html import prior_sentence


def recommended_lines(rec: dict) -> list[str]:
    """The recommendation in words: its profile per partition, and its predicted average
    JCT at each strength against Slurm alone's."""
    if not rec["profiles_by_partition"]:
        return []
    parts = ", ".join(f"{k}: {v}" for k, v in rec["profiles_by_partition"].items())
    out = [f"recommended ({parts}); the what-if's '{R.RECOMMENDED}' rows predict:"]
    if rec.get("learned_in_period"):
        out.append("  (optimistic: the knobs were learned on the period's first two thirds, "
                   "part of the jobs these rows run)")
    for strength, p in rec["predicted"].items():
        slower = "-" if p["share_slower_1_1x"] is None else f"{p['share_slower_1_1x']:.1%}"
        out.append(f"  {strength} interference: avg JCT {seconds(p['avg_jct_s'])} s, "
                   f"{ratio(p['avg_jct_ratio'])}x {R.BASELINE}'s "
                   f"{seconds(p[R.BASELINE + '_avg_jct_s'])} s; {slower} of jobs > 1.1x "
                   f"slower, worst {ratio(p['worst_ratio'])}")
    return out


def print_report(doc: dict) -> None:
    """The report as tables and sentences on the output console (what the command prints
    without ``--json``)."""
    console = output_console()
    jobs, period = doc["jobs"], doc["period"]
    left = ", ".join(f"{n} {why}" for why, n in jobs["left_out"].items()) or "none"
    console.print(f"{escape(doc['history'])}: {jobs['in_period']} of {jobs['in_history']} "
                  f"jobs submitted {period['first_submit']} to {period['last_submit']}; "
                  f"{jobs['simulated']} simulated, left out: {escape(left)}"
                  + (f"; {doc['bad_rows']} bad row(s) not read" if doc["bad_rows"] else ""),
                  highlight=False)
    parts = ", ".join(f"{p['name']} ({p['nodes']} nodes, {p['gpus']} GPUs)"
                      for p in doc["cluster"]["partitions"])
    console.print(f"cluster of {escape(doc['cluster']['slurm_conf'])}: {escape(parts)}",
                  highlight=False)
    console.print("not modelled:", highlight=False)
    for note in doc["cluster"]["not_modelled"] + doc["simulator_not_modelled"]:
        console.print(f"  - {escape(note)}", highlight=False)
    cal = doc["calibration"]
    table = Table(title=f"calibration: {cal['profile']} (Slurm alone, {cal['interference']} "
                        f"interference) against sacct; start error = |simulated start - "
                        f"recorded start|, within {cal['tolerance']}")
    for title in ("partition", "jobs", "recorded mean wait", "simulated mean wait",
                  "ratio", "median start error", "p90 start error", "within tolerance"):
        table.add_column(title, justify="left" if title == "partition" else "right")
    parts = list(cal["by_partition"].items()) if len(cal["by_partition"]) > 1 else []
    for name, g in [("all", cal["all"]), *parts]:
        table.add_row(escape(name), str(g["jobs"]), seconds(g["recorded_mean_wait_s"]),
                      seconds(g["simulated_mean_wait_s"]), ratio(g["wait_ratio"]),
                      seconds(g["median_start_error_s"]), seconds(g["p90_start_error_s"]),
                      "-" if g["share_within_tolerance"] is None
                      else f"{g['share_within_tolerance']:.1%}")
    console.print(table)
    results = doc["what_if"]["results"]
    table = Table(title=f"what-if (seconds; wait = first start - submit), per job against "
                        f"{doc['what_if']['baseline']} at the same strength")
    for title in ("profile", "strength", "partition", "jobs", "avg JCT", "p95 JCT",
                  "avg wait", "p95 wait", ">1.1x", ">2x", "p99", "worst"):
        table.add_column(title, justify="left" if title in ("profile", "strength",
                                                            "partition") else "right")
    for r in results:
        parts = list(r["by_partition"].items()) if len(r["by_partition"]) > 1 else []
        for name, g in [("all", {**r["all"], "per_job": r["per_job"]}), *parts]:
            p = g["per_job"]
            table.add_row(escape(r["profile"]), r["interference"], escape(name),
                          str(g["jobs"]), seconds(g["avg_jct_s"]), seconds(g["p95_jct_s"]),
                          seconds(g["avg_wait_s"]), seconds(g["p95_wait_s"]),
                          "-" if p is None else pct(p["jobs_slower_1_1x"],
                                                    p["share_slower_1_1x"]),
                          "-" if p is None else pct(p["jobs_slower_2x"], p["share_slower_2x"]),
                          "-" if p is None else ratio(p["p99_ratio"]),
                          "-" if p is None else ratio(p["worst_ratio"]))
    console.print(table)
    for r in results:
        if r["predictions"]:
            console.print(f"{escape(r['profile'])} ({r['interference']}): predictions "
                          f"{escape(r['predictions'])}", highlight=False)
    if any(r["prediction_prior_jobs"] is not None for r in results):
        console.print(escape(prior_sentence(doc["prior_history"])), highlight=False)
    compared = [((r["profile"], r["interference"]), r["per_job"]) for r in results
                if r["per_job"] is not None]
    if compared:
        print_per_job(compared, doc["what_if"]["baseline"], console=console)
    if doc["tuning"] is not None:
        _print_tuning(doc["tuning"], console)


def _print_tuning(tuning: dict, console) -> None:
    table = Table(title=f"tuned profiles: 2D-LAS knobs learned {tuning['learn']['from']} to "
                        f"{tuning['learn']['to']}, kept only where they beat "
                        f"{tuning['start']} {tuning['evaluate']['from']} to "
                        f"{tuning['evaluate']['to']} ({tuning['split']}); avg JCT (s) on "
                        f"the evaluation part")
    for title in ("partition", "jobs learn/eval", "learned knobs", "learned",
                  tuning["start"], "fifo-backfill", "profile", "why"):
        table.add_column(title, justify="right" if title in (
            "jobs learn/eval", "learned", tuning["start"], "fifo-backfill") else "left")
    for t in tuning["partitions"]:
        jct = t["evaluate_avg_jct_s"] or {}
        table.add_row(escape(t["partition"]), f"{t['learn_jobs']}/{t['evaluate_jobs']}",
                      "-" if t["learned"] is None else escape(t["learned"]["description"]),
                      seconds(jct.get("learned")), seconds(jct.get(tuning["start"])),
                      seconds(jct.get("fifo-backfill")),
                      escape(t["profile_file"] or "none written: agent.profile"),
                      escape(t["reason"]))
    console.print(table)
    for line in recommended_lines(tuning["recommended"]):
        console.print(escape(line), highlight=False)
    if tuning["config_lines"]:
        console.print("paste into the daemon's config (the partitions must be in "
                      "agent.managed_partitions):", highlight=False)
        for line in tuning["config_lines"]:
            console.print(f"  {escape(line)}", highlight=False)
    else:
        console.print("no learned knobs kept: every partition keeps agent.profile",
                      highlight=False)
