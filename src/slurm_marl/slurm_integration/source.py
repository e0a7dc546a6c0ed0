"""ClusterSource over Slurm's own CLIs: a fixed number of client calls per snapshot."""

from __future__ import annotations

import logging
import time

from slurm_marl.domain import ClusterSnapshot
from slurm_marl.slurm_integration import parse as P
from slurm_marl.slurm_integration.ports import ClusterSource
from slurm_marl.slurm_integration.runner import SlurmRunner

log = logging.getLogger(__name__)


class CliClusterSource(ClusterSource):
    """Reads jobs, nodes, partitions and topology: four calls, whatever the number of jobs
    and nodes.

    Slurm 22.05: ``squeue --json``, ``sinfo --json``, ``scontrol show partition -o`` and
    ``scontrol show topology``. From 24.11 on ``sinfo --json`` has no per-node records and
    ``squeue --json`` omits finished jobs, so nodes come from ``scontrol show node --json``
    and jobs from ``squeue --json --states=all`` (22.05's view). The version is told by the
    ``meta`` of the first ``sinfo --json`` answer and kept; every answer's ``meta`` is checked
    again and a different known version (Slurm upgraded under the agent) followed; a failed
    ``scontrol show node --json`` (a downgrade to 22.05) makes the next snapshot tell the
    version anew. An unknown layout raises ``SlurmOutputError``.

    Partitions and topology change only on reconfiguration, so they are cached for
    ``static_ttl_s`` (0 = read every time). A node equal to the one of the previous snapshot
    is that same object: consumers that keep per-node work (the learned placement's
    featuriser) redo it only for nodes that changed.
    """

    def __init__(self, runner: SlurmRunner, static_ttl_s: float = 0.0) -> None:
        self.runner = runner
        self.static_ttl_s = static_ttl_s
        self._static: tuple[float, list, list, dict] | None = None
        self.last_problems: list[str] = []
        self._last_nodes: dict = {}
        self.layout: P.Layout | None = None

    def _static_parts(self):
        now = time.monotonic()
        if self._static is not None and now - self._static[0] < self.static_ttl_s:
            return self._static[1:]
        problems: list[str] = []
        parts, probs = P.partitions_from_scontrol(
            self.runner.run_checked(["scontrol", "show", "partition", "-o"]))
        problems += probs
        topo = self.runner.run(["scontrol", "show", "topology"])
        if topo.ok:
            switches, leaf_of, probs = P.switches_from_scontrol(topo.stdout)
            problems += probs
        else:  # topology/tree not configured: a flat cluster
            switches, leaf_of = [], {}
        self._static = (now, parts, switches, leaf_of)
        self._static_problems = problems
        return parts, switches, leaf_of

    def _nodes(self, leaf_of: dict[str, str]) -> tuple[list, list[str]]:
        """Per-node records: from ``sinfo --json`` on 22.05 (one call, as always), from
        ``scontrol show node --json`` on later versions; the first call tells which. Both
        answers are streamed, record by record (``run_json_streamed``)."""
        if self.layout is None or self.layout.nodes_from_sinfo:
            reader = P.NodesReader(P.SINFO, leaf_of)
            # later versions' "sinfo" array (per partition and state) is not needed: dropped
            rest, counts = self.runner.run_json_streamed(
                ["sinfo", "--json"], {"nodes": reader.add, "sinfo": None})
            layout = P.layout_of(rest, "sinfo --json")
            if layout != self.layout:
                log.info("Slurm %s (%s): nodes from %s", layout.release, layout.parser,
                         "sinfo --json" if layout.nodes_from_sinfo
                         else "scontrol show node --json")
                self.layout = layout
            if layout.nodes_from_sinfo:
                return reader.finish(rest, "nodes" in counts)
        reader = P.NodesReader(P.SCONTROL_NODES, leaf_of)
        try:
            rest, counts = self.runner.run_json_streamed(
                ["scontrol", "show", "node", "--json"], {"nodes": reader.add})
        except Exception:
            self.layout = None  # e.g. Slurm downgraded: tell the version again next time
            raise
        self._check_layout(rest, "scontrol show node --json")
        return reader.finish(rest, "nodes" in counts)

    def _check_layout(self, data: dict, what: str) -> None:
        """Follow an answer that names another known layout than the one kept (Slurm
        upgraded under the agent); an unknown one raises SlurmOutputError."""
        layout = P.layout_of(data, what)
        if self.layout is not None and layout.parser != self.layout.parser:
            log.warning("%s: Slurm %s (%s) answered where %s (%s) was known; reading it as "
                        "such from now on", what, layout.release, layout.parser,
                        self.layout.release, self.layout.parser)
            self.layout = layout

    def _squeue_args(self) -> list[str]:
        if self.layout is None or self.layout.squeue_lists_finished:
            return ["squeue", "--json"]
        return ["squeue", "--json", "--states=all"]

    def snapshot(self) -> ClusterSnapshot:
        taken = time.time()
        parts, switches, leaf_of = self._static_parts()
        problems = list(getattr(self, "_static_problems", []))
        nodes, probs = self._nodes(leaf_of)
        problems += probs
        last = self._last_nodes
        nodes = [old if (old := last.get(n.name)) == n else n for n in nodes]
        self._last_nodes = {n.name: n for n in nodes}
        args = self._squeue_args()
        reader = P.JobsReader()     # the answer is streamed: no copy of every job record
        rest, _ = self.runner.run_json_streamed(args, {"jobs": reader.add})
        self._check_layout(rest, " ".join(args))
        jobs, probs = reader.finish(rest)
        problems += probs
        for p in problems:
            log.warning("snapshot: %s", p)
        self.last_problems = problems
        return ClusterSnapshot(time_s=taken, nodes=tuple(nodes), jobs=tuple(jobs),
                               partitions=tuple(parts), switches=tuple(switches))
