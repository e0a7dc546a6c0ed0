"""What is known of a job when it is submitted: the predictor's features.

Two kinds of facts: the job's own request (user, account, partition, QOS, the stem of its
name, GPUs, nodes, time limit, submit hour and weekday) and what the site's history said
*before* the job arrived: for the same user and name stem, the same user with the same
GPU count, the same user, the same account with the same GPU count, the same account and
the whole site, how many jobs of
that kind ended, the median and the last of their log GPU-times. ``FeatureState`` holds
that history as it grows; it learns of a job only through ``ended`` (at the job's end),
and ``features`` reads nothing else, so no job's own or later outcome can leak into what
is known at its submission (``tests/history/test_history_predictor.py`` checks this).
"""

from __future__ import annotations

import bisect
import math
import re
import statistics
from collections import defaultdict, deque
from dataclasses import dataclass

RECENT = 10                      # ended jobs kept per key for the medians
_STEM = re.compile(r"[A-Za-z]+")
CATEGORIES = ("user", "account", "partition", "qos", "stem")
KEYS = ("user_stem", "user_gpus", "user", "account_gpus", "account", "site")
NUMBERS = ("log_gpus", "nodes", "log_limit_s", "hour", "weekday", "recent_same_submits")
FEATURES = CATEGORIES + NUMBERS + tuple(
    f"{k}_{s}" for k in KEYS for s in ("n", "median", "last"))


@dataclass(frozen=True)
class Submission:
    """A job as known when it is submitted (nothing of how it will run)."""

    user: str
    account: str
    partition: str
    qos: str
    name: str
    gpus: int
    nodes: int
    time_limit_s: float | None
    submit_s: float

    @classmethod
    def of(cls, job) -> "Submission":
        """From a ``HistoryJob`` (or anything with the same submission fields)."""
        return cls(user=job.user, account=job.account, partition=job.partition, qos=job.qos,
                   name=job.name, gpus=job.gpus, nodes=job.nodes,
                   time_limit_s=job.time_limit_s, submit_s=job.submit_s)


def name_stem(name: str) -> str:
    """The first word of a job name without numbers: ``resnet50-lr0.1`` -> ``resnet``,
    ``train_bert_3`` -> ``train``; runs of a sweep share it."""
    m = _STEM.search(name or "")
    return m.group(0).lower() if m else ""


# The keys the features group ended jobs by, each with the request fields it is made of
# ("stem": ``name_stem`` of the name); ``key_values`` gives their values (a user key needs a
# user, a stem key a stem). The daemon's store prunes its history rows by the same keys.
KEY_FIELDS: dict[str, tuple[str, ...]] = {
    "user_stem": ("user", "stem"), "user_gpus": ("user", "gpus"), "user": ("user",),
    "account_gpus": ("account", "gpus"), "account": ("account",), "site": ()}


def key_values(s: Submission, stem: str | None = None) -> dict[str, tuple]:
    """Each key of ``KEY_FIELDS`` with its values for ``s`` (None: not a key of ``s``),
    spelled out: it runs for every job predicted."""
    stem = name_stem(s.name) if stem is None else stem
    return {"user_stem": (s.user, stem) if s.user and stem else None,
            "user_gpus": (s.user, s.gpus) if s.user else None,
            "user": (s.user,) if s.user else None,
            "account_gpus": (s.account, s.gpus),
            "account": (s.account,),
            "site": ()}


class FeatureState:
    """The site's history as known at some moment; grows only through ``ended``."""

    def __init__(self) -> None:
        self._recent: dict[tuple, deque] = defaultdict(lambda: deque(maxlen=RECENT))
        self._count: dict[tuple, int] = defaultdict(int)
        # (n, median, last) per key, dropped when the key learns of another ended job
        self._stats: dict[tuple, tuple[float, float, float]] = {}
        # submit times per (account, GPUs), sorted; the last day of them is kept
        self._submits: dict[tuple, list[float]] = defaultdict(list)

    def ended(self, s: Submission, gpu_time_s: float) -> None:
        """A job of submission ``s`` ended having received ``gpu_time_s`` GPU-seconds."""
        value = math.log1p(max(0.0, gpu_time_s))
        for name, key in key_values(s).items():
            if key is None:
                continue
            self._recent[(name, *key)].append(value)
            self._count[(name, *key)] += 1
            self._stats.pop((name, *key), None)

    def submitted(self, s: Submission) -> None:
        """A job was submitted (its request is public at once; its outcome is not)."""
        q = self._submits[(s.account, s.gpus)]
        bisect.insort(q, s.submit_s)
        if q[0] < q[-1] - 2 * 86400:       # keep a day more than any hour looked at
            del q[:bisect.bisect_left(q, q[-1] - 86400)]

    def features(self, s: Submission) -> dict[str, object]:
        """The feature values of ``s`` from its request and the history known now."""
        t = s.submit_s
        stem = name_stem(s.name)
        row: dict[str, object] = {"user": s.user, "account": s.account,
                                  "partition": s.partition, "qos": s.qos, "stem": stem}
        day = (t // 86400 + 3) % 7          # 1970-01-01 was a Thursday: Monday = 0
        row.update(log_gpus=math.log2(max(1, s.gpus)), nodes=float(s.nodes),
                   log_limit_s=(math.nan if s.time_limit_s is None
                                else math.log1p(s.time_limit_s)),
                   hour=float((t % 86400) // 3600), weekday=float(day))
        q = self._submits.get((s.account, s.gpus), ())
        row["recent_same_submits"] = float(bisect.bisect_right(q, t)
                                           - bisect.bisect_left(q, t - 3600))
        for name, key in key_values(s, stem).items():
            n_col, median_col, last_col = _COLUMNS[name]
            row[n_col], row[median_col], row[last_col] = \
                self._key_stats((name, *key)) if key is not None else _NONE
        return row

    def _key_stats(self, full_key: tuple) -> tuple[float, float, float]:
        got = self._stats.get(full_key)
        if got is None:
            recent = self._recent.get(full_key)
            if not recent:
                return _NONE
            # how much history there is, capped: a count that only grows with time would
            # let the model learn the calendar instead of the jobs
            got = (float(min(self._count[full_key], RECENT)), statistics.median(recent),
                   recent[-1])
            self._stats[full_key] = got
        return got


_NONE = (0.0, math.nan, math.nan)
_COLUMNS = {k: (f"{k}_n", f"{k}_median", f"{k}_last") for k in KEYS}


def history_median(row: dict[str, object]) -> float:
    """The baseline: the median log GPU-time of the most specific key with history
    (user + name stem, user + GPUs, user, account + GPUs, account, site); NaN with no
    history."""
    for name in KEYS:
        v = row.get(f"{name}_median")
        if isinstance(v, float) and not math.isnan(v):
            return v
    return math.nan
