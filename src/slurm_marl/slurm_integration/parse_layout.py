"""Which Slurm printed a JSON answer, and the few value shapes that changed between versions.

Recorded (tests/data/slurm/v22.05, v24.11, v26.05):

- 22.05 names its layout ``meta.plugin.type = "openapi/v0.0.38"``; 24.11 and 26.05 name it
  ``meta.plugin.data_parser`` (``data_parser/v0.0.42``, ``data_parser/v0.0.45``), with the
  release under ``meta.slurm`` (22.05: ``meta.Slurm``).
- 22.05's ``sinfo --json`` has one record per node and partition; from 24.11 on it has only
  aggregated lines (``sinfo[]``) and per-node records come from ``scontrol show node --json``
  (an option 22.05's scontrol does not know).
- 22.05's ``squeue --json`` lists finished jobs (until MinJobAge); from 24.11 on they leave
  the list at once unless ``--states=all`` is given.
- Numbers became ``{"set", "infinite", "number"}`` objects; ``job_state`` and node ``state``
  became lists (base state and flags) where 22.05 printed one word.

A layout this module does not know is refused (``SlurmOutputError``): a reader guessing at
an unknown layout would hand the scheduler an empty or wrong cluster without a word.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from slurm_marl.slurm_integration.runner import SlurmOutputError
from slurm_marl.slurm_integration.text import version_of_answer


@dataclass(frozen=True)
class Layout:
    """How to read one Slurm version's JSON: ``parser`` as its ``meta`` names it."""

    parser: str
    release: str
    # sinfo --json has per-node records (22.05); else use scontrol show node --json.
    nodes_from_sinfo: bool
    # squeue --json lists finished jobs by itself (22.05); else add --states=all.
    squeue_lists_finished: bool
    # squeue --json honours --jobs and scontrol show node --json takes node names (24.11
    # on), so changed records can be read alone; 22.05's squeue --json ignores every filter.
    reads_by_id: bool = False
    # Changed jobs can be read one by one as ``scontrol show job -d -o N`` text
    # (``parse_job_text``): 22.05, where JSON cannot be read by id.
    reads_jobs_by_text: bool = False


# data parser named in ``meta`` -> (Slurm series, per-node sinfo, finished jobs in squeue,
# records read by id, changed jobs read as text)
KNOWN_PARSERS = {
    "openapi/v0.0.38": ("22.05", True, True, False, True),
    "data_parser/v0.0.42": ("24.11", False, False, True, False),
    "data_parser/v0.0.45": ("26.05", False, False, True, False),
}
# What an answer without any ``meta`` is read as: the 22.05 layout (22.05 itself always
# prints meta; the guards against empty readings still apply).
ASSUMED = Layout("openapi/v0.0.38", "unknown (no meta)", True, True)


def layout_of(data: dict, what: str) -> Layout:
    """The layout of the JSON answer ``data`` of command ``what``, from its ``meta``;
    SlurmOutputError for a layout this reader does not know."""
    meta = data.get("meta")
    if meta is None:
        return ASSUMED
    if not isinstance(meta, dict):
        raise SlurmOutputError(what.split(), 0, f"'meta' is a {type(meta).__name__}, "
                               "not an object: unknown Slurm JSON layout")
    plugin = meta.get("plugin") if isinstance(meta.get("plugin"), dict) else {}
    parser = str(plugin.get("data_parser") or plugin.get("type") or "")
    slurm = meta.get("slurm") or meta.get("Slurm") or {}
    release = str(slurm.get("release") or "?") if isinstance(slurm, dict) else "?"
    known = KNOWN_PARSERS.get(parser)
    if known is None:
        raise SlurmOutputError(what.split(), 0, (
            f"Slurm {release} printed JSON layout {parser or '(none named)'!r}, which this "
            f"reader does not know (known: {', '.join(sorted(KNOWN_PARSERS))}); refusing "
            "to guess"))
    return Layout(parser, release, *known[1:])


def layout_of_version(text: str) -> Layout | None:
    """The layout a Slurm of ``scontrol --version``'s answer ("slurm 24.11.5", "slurm-wlm
    24.11.5") prints, for a release series this reader knows; None otherwise (then the
    first JSON answer tells). Only a first guess: every JSON answer is still checked."""
    version = version_of_answer(text)
    for parser, (release, *flags) in KNOWN_PARSERS.items():
        if version is not None and release == version.series:
            return Layout(parser, version.release, *flags)
    return None


def num(value: Any, default: float | None = None) -> float | None:
    """A number from 22.05 JSON; later openapi versions wrap it as {set, infinite, number}."""
    if isinstance(value, dict):
        if value.get("infinite"):
            return default
        if not value.get("set", True):
            return default
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return default
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


# ---------------------------------------------------------------------------------------
# job states

JOB_BASE_STATES = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED",
                   "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
                   "OUT_OF_MEMORY")
# The flags 22.05's job_state_string() prints *instead of* the base state, in its order:
# a requeued job still cleaning up is "COMPLETING" there, ["PENDING", "COMPLETING"] later.
JOB_FLAGS_22_05 = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED",
                   "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED", "REVOKED",
                   "RESV_DEL_HOLD", "SIGNALING")
# Flags later versions list that 22.05 never printed as the state.
JOB_FLAGS_LATER = ("LAUNCH_FAILED", "UPDATE_DB", "RECONFIG_FAIL", "POWER_UP_NODE",
                   "REQUEUE_CRON", "EXPEDITING")
JOB_STATE_WORDS = frozenset(JOB_BASE_STATES + JOB_FLAGS_22_05 + JOB_FLAGS_LATER)


def job_state_text(value: Any) -> str | None:
    """The state word 22.05 would have printed for ``job_state`` (a word on 22.05, a list
    of base state and flags later): the first flag 22.05 shows instead of the base state,
    else the first base state. None when ``value`` holds no Slurm job state word at all."""
    if isinstance(value, str):
        words = [w for w in value.upper().replace("+", " ").split() if w]
        return value if any(w in JOB_STATE_WORDS for w in words) else None
    if not isinstance(value, list) or not all(isinstance(w, str) for w in value):
        return None
    words = [w.strip().upper() for w in value]
    for flag in JOB_FLAGS_22_05:
        if flag in words:
            return flag
    for word in words:
        if word in JOB_BASE_STATES:
            return word
    return "+".join(words) if any(w in JOB_STATE_WORDS for w in words) else None


# ---------------------------------------------------------------------------------------
# node states

def node_state_text(state: Any, flags: Any = None) -> str | None:
    """``IDLE+DRAIN`` from 22.05's ``state`` word (``idle``) plus ``state_flags`` list, or
    from the later ``state`` list, which Slurm prints base state first, then the flags
    (``["IDLE", "DRAIN"]``); None when unreadable."""
    if isinstance(state, str):
        words = [state.upper()]
    elif isinstance(state, list) and state and all(isinstance(w, str) for w in state):
        words = [w.upper() for w in state]
    else:
        return None
    if isinstance(flags, list):
        words += [str(f).upper() for f in flags]
    return "+".join(words)


def text_list(value: Any) -> tuple[str, ...]:
    """``"a,b"`` (22.05) or ``["a", "b"]`` (later) -> ("a", "b")."""
    if isinstance(value, list):
        return tuple(str(v).strip() for v in value if str(v).strip())
    return tuple(f for f in str(value or "").split(",") if f)


def read_record(raw: object, kind: str, id_key: str,
                convert: Callable[[dict], tuple[Any, list[str]]], problems: list[str]) -> Any:
    """One record of a JSON list converted, or None with the reason added to ``problems``:
    not an object, or ``convert`` failing (one strange job or node never spoils a snapshot)."""
    if not isinstance(raw, dict):
        problems.append(f"unexpected {kind} entry {raw!r:.80}")
        return None
    try:
        value, probs = convert(raw)
    except Exception as exc:
        problems.append(f"{kind} {raw.get(id_key)!r}: unreadable ({exc!r})")
        return None
    problems.extend(probs)
    return value
