"""The report of ``slurm-marl report`` as one self-contained HTML file.

``render(doc)`` takes the very dict the command prints with ``--json`` (``report_cli``;
the keys are in docs/operations.md), so the HTML and the JSON cannot disagree: every number
and every plot is drawn from it. The page makes no request of its own: no script, no web
font, no stylesheet or image from elsewhere; the plots are PNGs (matplotlib's Agg backend,
``metrics.pyplot``) embedded as ``data:`` URIs, each ``metrics.figure_px()`` pixels, the
size its ``<img>`` states. Every string that comes from the history or the site's files
(user, account, partition and job names, paths) is HTML-escaped.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Sequence
from html import escape

from slurm_marl.sim.metrics import DPI, FIGSIZE_IN, figure_px, plot_ratio_cdf, pyplot
from slurm_marl.sim.perjob_tables import pct, ratio, seconds, worst_job

STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; margin-top: 2em; }
h3 { font-size: 1.05em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.8em; }
th, td { border: 1px solid #bbb; padding: 2px 5px; white-space: nowrap; }
td.row-note { white-space: normal; font-style: italic; color: #6a5200; }
div.wide { overflow-x: auto; }
th { background: #eee; } td.n { text-align: right; }
.note { color: #555; font-size: 0.9em; }
.assume { background: #fff6d5; border-left: 4px solid #e0b400; padding: 0.4em 0.8em; }
img { display: block; margin: 0.8em 0; border: 1px solid #ddd; }
"""


def _e(value: object) -> str:
    """Any value as HTML text, escaped (quotes too)."""
    return escape(str(value), quote=True)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _table(head: Sequence[str], rows: Sequence[Sequence[object] | str],
           numeric_from: int = 1) -> str:
    """A table; the cells from column ``numeric_from`` on are right-aligned; a row given
    as one string is a note across the whole table. Every header and cell is escaped."""
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        if isinstance(row, str):
            out.append(f'<tr><td class="row-note" colspan="{len(head)}">{_e(row)}</td></tr>')
            continue
        out.append("<tr>" + "".join(
            f'<td class="n">{_e(c)}</td>' if k >= numeric_from else f"<td>{_e(c)}</td>"
            for k, c in enumerate(row)) + "</tr>")
    return '<div class="wide">' + "\n".join(out) + "</table></div>"


def _png(draw: Callable) -> str:
    """``<img>`` of a figure ``draw(ax)`` fills, as a base64 PNG ``data:`` URI."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=FIGSIZE_IN, dpi=DPI)
    draw(ax)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return _img(buf.getvalue(), ax.get_title() or "plot")


def _img(png: bytes, alt: str) -> str:
    width, height = figure_px()
    data = base64.b64encode(png).decode("ascii")
    return (f'<img src="data:image/png;base64,{data}" width="{width}" height="{height}" '
            f'alt="{_e(alt)}">')


# ---------------------------------------------------------------------------------------
# plots


def _cdf_step(ax, values: Sequence[float], label: str) -> None:
    """The CDF of percentiles 0..100 (``report.percentiles``) as a step line."""
    ax.step(values, [q / 100 for q in range(len(values))], where="post", label=label)


def calibration_plot(cal: dict) -> str:
    """CDFs of the recorded and simulated waits and of the start errors, symlog x."""
    pcts = cal["percentiles"]

    def draw(ax):
        for key, label in (("recorded_wait_s", "wait recorded by sacct"),
                           ("simulated_wait_s", "wait simulated (Slurm alone)"),
                           ("start_error_s", "|simulated start - recorded start|")):
            if pcts[key] is not None:
                _cdf_step(ax, pcts[key], label)
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlim(left=0)
        ax.set_xlabel("seconds (linear below 1 s, log above)")
        ax.set_ylabel("fraction of jobs")
        ax.set_title(f"calibration: {cal['compared_jobs']} jobs, recorded against "
                     f"simulated", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    return _png(draw)


def busy_plot(busy: dict) -> str:
    """GPUs held over time, recorded and simulated, against the cluster's GPUs."""
    def draw(ax):
        hours = [(k + 0.5) * busy["bin_s"] / 3600 for k in range(len(busy["recorded"]))]
        ax.plot(hours, busy["recorded"], label="recorded by sacct")
        if busy["simulated"] is not None:
            ax.plot(hours, busy["simulated"], label="simulated (Slurm alone)")
        ax.axhline(busy["gpus"], color="grey", linestyle="--", linewidth=0.8,
                   label=f"GPUs of the cluster ({busy['gpus']})")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("hours since the first submission")
        ax.set_ylabel(f"GPUs held (mean over {busy['bin_s'] / 60:.1f} min)")
        ax.set_title("GPUs held by the simulated jobs over time", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
    return _png(draw)


def ratio_plot(results: Sequence[dict], strength: str, baseline: str) -> str:
    """The per-job JCT-ratio CDF of each profile at ``strength`` (``metrics``' plot)."""
    series = {r["profile"]: r["ratio_percentiles"] for r in results
              if r["interference"] == strength and r["ratio_percentiles"] is not None}
    buf = io.BytesIO()
    title = f"per job against {baseline}, {strength} interference"
    plot_ratio_cdf(buf, series, title, f"JCT / max(JCT under {baseline}, floor)")
    return _img(buf.getvalue(), title)


# ---------------------------------------------------------------------------------------
# the page


def render(doc: dict) -> str:
    """The report document (the JSON of ``slurm-marl report``) as an HTML page."""
    parts = [_head(doc), _cluster(doc), _calibration(doc), _what_if(doc), _tuning(doc),
             _waits(doc), _left_out_of_the_report()]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>slurm-marl report: {_e(doc['history'])}</title>"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(parts)
            + "\n</body></html>\n")


def _head(doc: dict) -> str:
    jobs, period = doc["jobs"], doc["period"]
    left = [(why, n) for why, n in jobs["left_out"].items()]
    return (
        f"<h1>What the agent's profiles would have done: {_e(doc['history'])}</h1>"
        f"<p>{jobs['in_period']} of the history's {jobs['in_history']} jobs were submitted "
        f"in the period ({_e(period['from'] or 'the first')} to "
        f"{_e(period['to'] or 'the last')}: first {_e(period['first_submit'])}, last "
        f"{_e(period['last_submit'])}); <b>{jobs['simulated']} simulated</b>. Seed "
        f"{doc['seed']}, {doc['restart_delay_s']:g} s of work lost per preemption."
        + (f" {doc['bad_rows']} row(s) of the history could not be read." if doc["bad_rows"]
           else "") + "</p>"
        + (_table(["left out", "jobs"], left) if left else "<p>No job was left out.</p>"))


def _cluster(doc: dict) -> str:
    c = doc["cluster"]
    rows = [(p["name"], p["nodes"], p["gpus"], p["sockets"], p["gpus_per_socket"])
            for p in c["partitions"]]
    notes = "".join(f"<li>{_e(s)}</li>" for s in c["not_modelled"])
    sim = "".join(f"<li>{_e(s)}</li>" for s in doc["simulator_not_modelled"])
    return (f"<h2>The cluster as simulated</h2><p>From {_e(c['slurm_conf'])}: "
            f"{c['gpus']} GPUs.</p>"
            + _table(["partition", "nodes", "GPUs", "sockets per node", "GPUs per socket"],
                     rows)
            + "<h3>Not modelled</h3><p>From the site's files:</p>"
            + (f"<ul>{notes}</ul>" if notes else "<p class=\"note\">nothing</p>")
            + f"<p>Whatever the files say:</p><ul>{sim}</ul>")


def _calibration(doc: dict) -> str:
    cal = doc["calibration"]
    groups = [("all", cal["all"])] + (list(cal["by_partition"].items())
                                      if len(cal["by_partition"]) > 1 else [])
    rows = [(name, g["jobs"], seconds(g["recorded_mean_wait_s"]),
             seconds(g["simulated_mean_wait_s"]), ratio(g["wait_ratio"]),
             seconds(g["median_start_error_s"]), seconds(g["p90_start_error_s"]),
             _share(g["share_within_tolerance"])) for name, g in groups]
    worst = [(w["job_id"], w["partition"], w["gpus"], w["user"],
              seconds(w["recorded_wait_s"]), seconds(w["simulated_wait_s"]),
              seconds(w["start_error_s"])) for w in cal["worst_jobs"]]
    busy = cal["gpus_busy"]
    return (
        "<h2>Calibration: how far to trust the simulator here</h2>"
        f"<p class=\"assume\">Assumed: {_e(cal['profile'])} stands in for Slurm alone, at "
        f"<b>{_e(cal['interference'])}</b> simulated interference (the recorded run times "
        f"already hold whatever slowed the jobs). A simulated start is within tolerance "
        f"when it is at most {_e(cal['tolerance'])} from the recorded one. "
        f"{cal['compared_jobs']} jobs compared, {cal['not_compared']} not (never started "
        f"in the simulation, or larger than their partition).</p>"
        + _table(["partition", "jobs", "recorded mean wait (s)", "simulated mean wait (s)",
                  "ratio", "median start error (s)", "p90 start error (s)",
                  "within tolerance"], rows)
        + (calibration_plot(cal) if cal["compared_jobs"] else "")
        + (busy_plot(busy) if busy is not None else "")
        + ("" if busy is None or busy["simulated"] is not None else
           "<p class=\"note\">The simulated GPUs held over time are left out: a job was "
           "preempted, and the simulator keeps only its first start and finish.</p>")
        + "<h3>The largest start errors</h3>"
        + _table(["job", "partition", "GPUs", "user", "recorded wait (s)",
                  "simulated wait (s)", "start error (s)"], worst, numeric_from=2))


def _what_if(doc: dict) -> str:
    w = doc["what_if"]
    base = w["baseline"]
    rows: list[Sequence[object] | str] = []
    for r in w["results"]:
        parts = list(r["by_partition"].items()) if len(r["by_partition"]) > 1 else []
        for name, g in [("all", {**r["all"], "per_job": r["per_job"]}), *parts]:
            p = g["per_job"]
            rows.append((r["profile"], r["interference"], name, g["jobs"],
                         seconds(g["avg_jct_s"]), seconds(g["p95_jct_s"]),
                         seconds(g["avg_wait_s"]), seconds(g["p95_wait_s"]),
                         _share(g.get("gpu_utilisation")) if name == "all" else "",
                         "-" if p is None else pct(p["jobs_slower_1_1x"],
                                                   p["share_slower_1_1x"]),
                         "-" if p is None else pct(p["jobs_slower_2x"], p["share_slower_2x"]),
                         "-" if p is None else ratio(p["p99_ratio"]),
                         "-" if p is None else ratio(p["worst_ratio"]),
                         "-" if p is None else worst_job(p["worst_job"])))
        said = _assumptions(r, doc["prior_history"])
        if said:
            rows.append(f"{r['profile']} at {r['interference']} interference: {said}")
    floor = next((r["per_job"]["floor_s"] for r in w["results"] if r["per_job"]), None)
    floor_s = "-" if floor is None else f"{floor:g}"
    plots = "".join(ratio_plot(w["results"], s, base) for s in w["strengths"]
                    if any(r["interference"] == s and r["ratio_percentiles"]
                           for r in w["results"]))
    return (
        "<h2>What-if: each profile on the same jobs</h2>"
        f"<p class=\"assume\">Seconds; GPU use is the GPU-seconds held over the GPUs x the "
        f"time from the first submission to the last finish. Each job's JCT is compared "
        f"with its JCT under <b>{_e(base)}</b> (Slurm alone) at the same interference "
        f"strength: ratio = JCT / max(JCT under {_e(base)}, {floor_s} s). The interference "
        f"strength is in each row; where a profile reads GPU-time predictions or fits an "
        f"interference estimator, how is said in the line under its rows: their numbers "
        f"depend on it.</p>"
        + _table(["profile", "strength", "partition", "jobs", "avg JCT", "p95 JCT",
                  "avg wait", "p95 wait", "GPU use", ">1.1x slower", ">2x slower",
                  "p99 ratio", "worst ratio", "worst job (sacct id)"], rows,
                 numeric_from=3)
        + plots)


def prior_sentence(prior: dict) -> str:
    """What learned predictions knew before the period (the report's ``prior_history``)."""
    if prior["ended_before"] is None:
        return ("learned predictions start from no history: without --from the period "
                "starts at the history's first job")
    return (f"learned predictions start from the {prior['jobs']} job(s) of the history "
            f"that ran and ended before {prior['ended_before']} (--from); nothing of the "
            f"period is known before it ends")


def _assumptions(r: dict, prior: dict) -> str:
    """How a what-if row's predictions and interference estimator were made ("": none)."""
    out = []
    if r["predictions"]:
        out.append(f"predictions {r['predictions']}")
    if r.get("prediction_prior_jobs") is not None:
        out.append(prior_sentence(prior))
    if r["interference_estimator_samples"]:
        out.append(f"interference estimator fit on {r['interference_estimator_samples']} "
                   f"samples of a pilot run")
    return "; ".join(out)


def _tuning(doc: dict) -> str:
    """The "Tuned profiles" section (``--tune``; none without it)."""
    t = doc.get("tuning")
    if t is None:
        return ""
    start = t["start"]
    rows = []
    for p in t["partitions"]:
        jct = p["evaluate_avg_jct_s"] or {}
        bound = (p["evaluate_per_job"] or {}).get("learned", {}).get("bound_holds")
        rows.append((p["partition"],
                     "-" if p["learned"] is None else p["learned"]["description"],
                     p["profile_file"] or "none written: agent.profile", p["reason"],
                     p["learn_jobs"], p["evaluate_jobs"], seconds(jct.get("learned")),
                     seconds(jct.get(start)), seconds(jct.get("fifo-backfill")),
                     {True: "holds", False: "broken", None: "-"}[bound]))
    lines = "\n".join(_e(line) for line in t["config_lines"])
    return (
        "<h2>Tuned profiles</h2>"
        f"<p class=\"assume\">Each partition's 2D-LAS knobs (queues, thresholds, starve "
        f"limit, preemption) are learned by policy search on the jobs submitted "
        f"{_e(t['learn']['from'])} to {_e(t['learn']['to'])} ({t['learn']['jobs']} jobs) and "
        f"kept only where, on the jobs submitted {_e(t['evaluate']['from'])} to "
        f"{_e(t['evaluate']['to'])} ({t['evaluate']['jobs']} jobs), they beat {_e(start)} "
        f"by {t['min_gain']:.0%} average JCT, or cut its breaking of the per-job bound "
        f"against fifo-backfill (at most 2% of jobs &gt; 1.1x slower, none &gt; 2x, p99 "
        f"&lt;= 1.5), without breaking that bound more: {_e(t['split'])}. At "
        f"<b>{_e(t['interference'])}</b> simulated interference; a partition with fewer than "
        f"{t['min_jobs']} jobs in either part is not tuned. Search: population "
        f"{t['search']['population']}, {t['search']['iterations']} iterations, seed "
        f"{t['search']['seed']}.</p>"
        + _table(["partition", "learned knobs", "profile", "why", "jobs learned on",
                  "jobs evaluated on", "learned avg JCT (s)", f"{start} avg JCT (s)",
                  "fifo-backfill avg JCT (s)", "per-job bound (learned)"], rows,
                 numeric_from=4)
        + _recommended(t.get("recommended"))
        + ("<p>To use the kept profiles, in the daemon's config (the partitions must be in "
           f"<code>agent.managed_partitions</code>):</p><pre>{lines}</pre>"
           if t["config_lines"] else
           "<p>No learned knobs were kept: every partition keeps agent.profile.</p>"))


def _recommended(rec: dict | None) -> str:
    """What the report recommends per partition and what its what-if rows predict."""
    if not rec or not rec["profiles_by_partition"]:
        return ""
    parts = ", ".join(f"<b>{_e(k)}</b>: {_e(v)}" for k, v in
                      rec["profiles_by_partition"].items())
    rows = [(strength, seconds(p["avg_jct_s"]), seconds(p["fifo-backfill_avg_jct_s"]),
             ratio(p["avg_jct_ratio"]), seconds(p["p95_jct_s"]), seconds(p["avg_wait_s"]),
             _share(p["share_slower_1_1x"]), ratio(p["worst_ratio"]))
            for strength, p in rec["predicted"].items()]
    caveat = (" Optimistic: the knobs were learned on the period's first two thirds, part "
              "of the jobs these rows run." if rec.get("learned_in_period") else "")
    return (f"<p>Recommended, per partition: {parts}. The what-if's <i>recommended</i> rows "
            f"run each partition's jobs under its profile; they predict:{caveat}</p>"
            + _table(["strength", "avg JCT (s)", "fifo-backfill avg JCT (s)", "ratio",
                      "p95 JCT (s)", "avg wait (s)", ">1.1x slower", "worst ratio"], rows,
                     numeric_from=1))


def _waits(doc: dict) -> str:
    out = ["<h2>Waits by user and account</h2>"]
    for field, got in doc["waits_by"].items():
        if got is None:
            out.append(f"<p class=\"note\">No job of the history names its {_e(field)}.</p>")
            continue
        runs = [f"{r['profile']} ({r['interference']}) (s)" for r in got["runs"]]
        rows = [(g["name"], g["jobs"], seconds(g["recorded_mean_wait_s"]),
                 *map(seconds, g["mean_wait_s"])) for g in got["top"]]
        out.append(f"<h3>Mean wait by {_e(field)}: the {len(rows)} of {got['groups']} with "
                   f"the most jobs</h3>"
                   + _table([field, "jobs", "recorded (s)", *runs], rows))
    return "".join(out)


def _left_out_of_the_report() -> str:
    return ("<h2>Not in this report</h2><ul><li>GPUs held over time under the profiles "
            "that preempt: the simulator keeps each job's first start, finish and total "
            "run time, not its run segments; each profile's GPU utilisation over the whole "
            "period is in the what-if table.</li></ul>")
