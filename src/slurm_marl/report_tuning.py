"""`slurm-marl report --tune`: each partition's knobs learned on the site's history
(``train/site_tuning.py``) and the report's ``tuning`` part, with what the what-if predicts
for the recommended profiles. Apart from ``report_cli`` so the command only reads options
and joins the steps."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from slurm_marl.history.records import HistoryJob
from slurm_marl.policy.profile import Profile
from slurm_marl.sim import report as R


def day(ts: float) -> str:
    """A timestamp as the report writes it: local time to the second."""
    return datetime.fromtimestamp(ts).isoformat(timespec="seconds")


def tune(jobs: list[HistoryJob], cluster, period: tuple[float, float], from_given: bool,
          tune_from_s: float | None, seed: int, folder: Path, progress, mapper=None
          ) -> tuple[dict, dict[str, Profile]]:
    """``--tune``: each partition's knobs learned and guarded (``train/site_tuning.py``),
    the kept ones written to ``folder``; the report's ``tuning`` dict and the recommended
    profile of each partition (``site_tuning.recommended_profiles``)."""
    from slurm_marl.train import site_tuning as T
    from slurm_marl.train.thresholds import CemConfig

    split = T.tune_split(jobs, cluster, *period, from_given, tune_from_s)
    cfg = CemConfig(seed=seed)
    got = T.tune(split, cluster, cfg, progress=progress, mapper=mapper)
    files = T.write_profiles(got, folder)
    doc = _tuning_doc(split, cfg, got, files, folder)
    # the what-if's recommended rows run on the whole period: in-sample where it learned
    doc["learned_in_period"] = split.learn_to_s > period[0]
    return doc, T.recommended_profiles(got)


def _tuning_doc(split, cfg, got, files: dict, folder: Path) -> dict:
    from slurm_marl.train import site_tuning as T

    return {
        "split": split.how,
        "learn": {"from": day(split.learn_from_s), "to": day(split.learn_to_s),
                  "jobs": len(split.learn.trace)},
        "evaluate": {"from": day(split.evaluate_from_s), "to": day(split.evaluate_to_s),
                     "jobs": len(split.evaluate.trace)},
        "interference": T.INTERFERENCE, "start": T.START_PROFILE, "min_gain": T.MIN_GAIN,
        "min_jobs": T.MIN_TUNE_JOBS,
        "search": {"population": cfg.population, "iterations": cfg.iterations,
                   "seed": cfg.seed},
        "partitions": [{**t.as_dict(), "profile_file": str(files[t.partition])
                        if t.partition in files else None} for t in got],
        "profiles_out": str(folder),
        "config_lines": T.config_lines(files),
    }


def recommended_doc(results: list[dict]) -> dict:
    """The recommendation's profiles per partition and what the what-if predicts for it
    at each strength, against Slurm alone (its ``RECOMMENDED`` rows)."""
    mine = [r for r in results if r["profiles_by_partition"] is not None]
    base = {r["interference"]: r["all"]["avg_jct_s"] for r in results
            if r["profile"] == R.BASELINE}

    def versus(r: dict) -> float | None:
        b = base.get(r["interference"])
        return None if not b or r["all"]["avg_jct_s"] is None else \
            round(r["all"]["avg_jct_s"] / b, 4)

    return {"profiles_by_partition": mine[0]["profiles_by_partition"] if mine else None,
            "predicted": {r["interference"]: {
                "avg_jct_s": r["all"]["avg_jct_s"], "p95_jct_s": r["all"]["p95_jct_s"],
                "avg_wait_s": r["all"]["avg_wait_s"],
                f"{R.BASELINE}_avg_jct_s": base.get(r["interference"]),
                "avg_jct_ratio": versus(r),
                "share_slower_1_1x": (r["per_job"] or {}).get("share_slower_1_1x"),
                "worst_ratio": (r["per_job"] or {}).get("worst_ratio")} for r in mine}}
