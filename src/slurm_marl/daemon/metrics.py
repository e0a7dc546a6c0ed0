"""Prometheus metrics of the agent, served on localhost unless configured otherwise."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)

# A failed cycle's error starts with its cause (daemon/service.py): "slurm: ...", ...
ERROR_CAUSES = ("slurm", "store", "config", "internal")


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.cycle_seconds = Histogram("slurm_marl_cycle_seconds", "Duration of one cycle",
                                       buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
                                       registry=r)
        self.cycles = Counter("slurm_marl_cycles_total", "Cycles run, by outcome",
                              ["outcome"], registry=r)
        self.decisions = Counter("slurm_marl_decisions_total", "Decisions made, by kind",
                                 ["kind"], registry=r)
        self.writes = Counter("slurm_marl_writes_total", "Writes to Slurm, by status",
                              ["status"], registry=r)
        self.pending = Gauge("slurm_marl_pending_jobs", "Pending jobs the agent decides for",
                             registry=r)
        self.running = Gauge("slurm_marl_running_jobs", "Running jobs in managed partitions",
                             registry=r)
        self.queue_length = Gauge("slurm_marl_queue_jobs", "Pending jobs per 2D-LAS queue",
                                  ["queue"], registry=r)
        self.last_cycle = Gauge("slurm_marl_last_cycle_timestamp_seconds",
                                "Unix time of the last finished cycle", registry=r)
        self.protected = Gauge("slurm_marl_guard_protected_jobs",
                               "Jobs the Slurm-alone guard protects: waiting past the start "
                               "Slurm's own order would have given them, or running after "
                               "it (0 without a guard)", registry=r)

        # health (daemon/health.py): what `slurm-marl status` says, without reading a file
        self.healthy = Gauge("slurm_marl_healthy",
                             "1 if the last cycle succeeded and was recorded, else 0",
                             registry=r)
        self.cycle_errors = Counter("slurm_marl_cycle_errors_total",
                                    "Failed cycles, by cause: slurm (no answer), store (the "
                                    "state store cannot be written), config (no managed "
                                    "partition in Slurm), internal", ["cause"], registry=r)
        self.unknown_partitions = Gauge("slurm_marl_unknown_partitions",
                                        "Managed partitions Slurm does not list", registry=r)
        for cause in ERROR_CAUSES:
            self.cycle_errors.labels(cause)

    def observe(self, report) -> None:
        self.cycle_seconds.observe(report.duration_s)
        self.cycles.labels("error" if report.error else "ok").inc()
        self.healthy.set(0 if report.error else 1)
        if report.error:
            cause = report.error.split(":", 1)[0]
            self.cycle_errors.labels(cause if cause in ERROR_CAUSES else "internal").inc()
        self.unknown_partitions.set(len(getattr(report, "unknown_partitions", ()) or ()))
        self.pending.set(report.pending)
        self.running.set(report.running)
        queues: dict[int, int] = {}
        for d in report.decisions:
            self.decisions.labels(type(d).__name__).inc()
            if type(d).__name__ == "SetPriority":
                queues[d.queue] = queues.get(d.queue, 0) + 1
        for q in list(queues) + [q for q in range(4) if q not in queues]:
            self.queue_length.labels(str(q)).set(queues.get(q, 0))
        for r in report.results:
            self.writes.labels(r.status.value).inc()
        self.last_cycle.set(report.time_s)
        self.protected.set(report.protected or 0)

    def serve(self, address: str, port: int):
        if address not in ("127.0.0.1", "localhost", "::1"):
            log.warning("metrics listen on %s:%d, reachable from other hosts", address, port)
        server, _thread = start_http_server(port, addr=address, registry=self.registry)
        log.info("metrics on http://%s:%d/metrics", address, server.server_port)
        return server
