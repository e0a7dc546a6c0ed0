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
    """Reads ``squeue --json``, ``sinfo --json``, ``scontrol show partition`` and
    ``scontrol show topology``: four calls, whatever the number of jobs and nodes.

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

    def snapshot(self) -> ClusterSnapshot:
        taken = time.time()
        parts, switches, leaf_of = self._static_parts()
        problems = list(getattr(self, "_static_problems", []))
        nodes, probs = P.nodes_from_sinfo(self.runner.run_json(["sinfo", "--json"]), leaf_of)
        problems += probs
        last = self._last_nodes
        nodes = [old if (old := last.get(n.name)) == n else n for n in nodes]
        self._last_nodes = {n.name: n for n in nodes}
        jobs, probs = P.jobs_from_squeue(self.runner.run_json(["squeue", "--json"]))
        problems += probs
        for p in problems:
            log.warning("snapshot: %s", p)
        self.last_problems = problems
        return ClusterSnapshot(time_s=taken, nodes=tuple(nodes), jobs=tuple(jobs),
                               partitions=tuple(parts), switches=tuple(switches))
