"""The simulator's event heap: job arrivals, job finishes, policy wake-ups and period ticks
on the simulated clock.

An event is (time, kind, sequence number, job id, version); the sequence number keeps
events of one time in the order they were pushed. Finish events are versioned: a job's
finish event goes stale when the job is preempted or its speed changes (a new one is
pushed); stale events are skipped, start no batch, and the heap is compacted when more
than half of it is stale, so heavy preemption cannot grow it without bound.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping

from slurm_marl.sim.jobs import SimJob

FINISH, ARRIVAL, WAKE, TICK = 0, 1, 2, 3
# Events this close to a batch's time belong to it; a wake-up comes this much after the
# change it is for.
EPS = 1e-6


class EventHeap:
    def __init__(self, by_id: Mapping[int, SimJob]) -> None:
        self.by_id = by_id
        self.items: list = []
        self.stale = 0                   # stale finish events still in the heap
        self.seq = 0

    def push(self, t: float, kind: int, job_id: int = -1, version: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.items, (t, kind, self.seq, job_id, version))

    def went_stale(self) -> None:
        """A finish event in the heap is stale now (its job's version moved on)."""
        self.stale += 1

    def compact(self) -> None:
        """Drop stale finish events once they are more than half the heap (the order of
        the rest is unchanged: entries are unique by their sequence number)."""
        if self.stale * 2 <= len(self.items):
            return
        by_id = self.by_id
        self.items = [e for e in self.items
                      if e[1] != FINISH or by_id[e[3]].version == e[4]]
        heapq.heapify(self.items)
        self.stale = 0

    def next_live_time(self) -> float | None:
        """The time of the first event that is not a stale finish, dropping the stale ones
        before it; None when none is left."""
        items = self.items
        while items:
            head = items[0]
            if head[1] == FINISH and self.by_id[head[3]].version != head[4]:
                heapq.heappop(items)
                self.stale -= 1
                continue
            return head[0]
        return None

    def pop_due(self, now: float) -> Iterator[tuple[float, int, int]]:
        """(time, kind, job id) of each live event due by ``now`` (within ``EPS``), popped
        one at a time, so events pushed meanwhile are seen."""
        while self.items and self.items[0][0] <= now + EPS:
            t, kind, _, jid, version = heapq.heappop(self.items)
            if kind == FINISH and version != self.by_id[jid].version:
                self.stale -= 1
                continue
            yield t, kind, jid

    def has_arrivals(self) -> bool:
        return any(e[1] == ARRIVAL for e in self.items)
