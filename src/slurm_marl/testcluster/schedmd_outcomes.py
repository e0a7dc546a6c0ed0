"""The outcomes of a testsuite run, read from pytest's JUnit XML, the differences between
the run with Slurm alone and the one with the agent, and the table that shows them.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

# the two runs compared: Slurm alone, then with the gate and the agent
RUNS = ("slurm", "agent")


@dataclass(frozen=True)
class Outcome:
    outcome: str          # passed | failed | error | skipped
    message: str = ""     # the skip reason, or the failure's first line


def read_junit(path: Path) -> dict[str, Outcome]:
    """Per test (``tests/x/test_y.py::test_z``-like id from the JUnit classname) its outcome;
    an error in setup or teardown counts over a pass, a failure over both."""
    rank = {"passed": 0, "skipped": 1, "error": 2, "failed": 3}
    tags = {"failure": "failed", "error": "error", "skipped": "skipped"}
    found: dict[str, Outcome] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        result = Outcome("passed")
        for child in case:
            if child.tag in tags:
                msg = (child.get("message") or child.text or "").strip().splitlines()
                cand = Outcome(tags[child.tag], msg[0][:300] if msg else "")
                if rank[cand.outcome] > rank[result.outcome]:
                    result = cand
        old = found.get(test_id)
        if old is None or rank[result.outcome] > rank[old.outcome]:
            found[test_id] = result
    return found


def counts(outcomes: dict[str, Outcome]) -> dict[str, int]:
    out = {k: 0 for k in ("passed", "failed", "error", "skipped")}
    for o in outcomes.values():
        out[o.outcome] += 1
    return out


def differences(a: dict[str, Outcome], b: dict[str, Outcome]) -> list[dict]:
    """Tests whose outcome (passed / failed / error / skipped) differs, or that ran in only
    one run. Skip reasons and failure messages may differ (job ids, times)."""
    diffs = []
    for test in sorted(set(a) | set(b)):
        oa, ob = a.get(test), b.get(test)
        if oa is None or ob is None or oa.outcome != ob.outcome:
            diffs.append({"test": test,
                          RUNS[0]: asdict(oa) if oa else None,
                          RUNS[1]: asdict(ob) if ob else None})
    return diffs



def table(result: dict) -> str:
    src = result["source"]
    lines = [f"SchedMD testsuite/python of {src['package']} {src['version']} "
             f"({src['upstream_tree']}), {len(result['modules'])} module paths",
             f"{'run':<8}{'passed':>8}{'failed':>8}{'error':>7}{'skipped':>9}"]
    for name in RUNS:
        c = result["counts"][name]
        lines.append(f"{name:<8}{c['passed']:>8}{c['failed']:>8}{c['error']:>7}"
                     f"{c['skipped']:>9}")
    lines.append(f"passed in both runs: {result['passed_in_both']}; same outcome per test: "
                 f"{'yes' if result['same_per_test'] else 'NO'}")
    for d in result["differences"]:
        a, b = d[RUNS[0]], d[RUNS[1]]
        lines.append(f"  DIFFERS {d['test']}: slurm={a['outcome'] if a else 'absent'} "
                     f"agent={b['outcome'] if b else 'absent'} "
                     f"({(b or a or {}).get('message', '')[:120]})")
    bad = {t: o for t, o in result["runs"][RUNS[0]]["outcomes"].items()
           if o["outcome"] in ("failed", "error")}
    if bad:
        lines.append("failed with Slurm alone too:")
        lines += [f"  {t}: {o['message'][:140]}" for t, o in bad.items()]
    reasons: dict[str, int] = {}
    for o in result["runs"][RUNS[0]]["outcomes"].values():
        if o["outcome"] == "skipped":
            reasons[o["message"]] = reasons.get(o["message"], 0) + 1
    if reasons:
        lines.append("skipped (Slurm alone), by reason:")
        lines += [f"  {n:>3} {r[:140]}" for r, n in sorted(reasons.items(), key=lambda x: -x[1])]
    return "\n".join(lines) + "\n"
