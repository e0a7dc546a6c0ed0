"""The 2D-LAS knobs the search tunes, their canonical form and the profile they make."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_marl.policy.profile import Profile, profile_from_mapping


NUM_QUEUES = (1, 2, 3, 4)
LOG10_T_RANGE = (1.5, 6.5)          # first boundary: ~30 GPU-s .. ~3.2M GPU-s
MIN_LOG10_GAP = 0.05                # consecutive boundaries at least 12% apart
LOG10_STARVE_RANGE = (-1.0, 2.0)    # starve_limit 0.1 .. 100 (x the last run time)


@dataclass(frozen=True)
class LasKnobs:
    """The searched knobs. ``thresholds_gpu_s`` empty: one queue (no demotion)."""

    thresholds_gpu_s: tuple[float, ...] = (3250.0, 7200.0, 18000.0)
    starve_limit: float = 0.0
    preemption: bool = True

    @property
    def num_queues(self) -> int:
        return len(self.thresholds_gpu_s) + 1

    def canonical(self) -> "LasKnobs":
        """Rounded (whole GPU-s, starve limit to 2 decimals) so equal policies compare equal.
        Without preemption, or with one queue, every waiting job is a never-run job of queue
        0 and no running job is displaced, so the order is arrival order whatever the other
        knobs: all such knobs become the one FIFO-like point (one queue, no preemption, no
        starve limit)."""
        if not self.preemption or not self.thresholds_gpu_s:
            return LasKnobs((), 0.0, False)
        ts: list[float] = []
        for t in self.thresholds_gpu_s:
            t = float(max(1, round(t)))
            if ts and t <= ts[-1]:
                t = ts[-1] + 1.0
            ts.append(t)
        return LasKnobs(tuple(ts), round(max(0.0, self.starve_limit), 2), self.preemption)

    def order_params(self) -> dict:
        if not self.thresholds_gpu_s:   # one queue; the boundary is never used
            return {"thresholds_gpu_s": [3250], "num_queues": 1,
                    "starve_limit": self.starve_limit}
        return {"thresholds_gpu_s": [int(t) if float(t).is_integer() else t
                                     for t in self.thresholds_gpu_s],
                "starve_limit": self.starve_limit}

    def profile_mapping(self, name: str, description: str = "") -> dict:
        return {"name": name,
                "description": description or f"2D-LAS with learned knobs ({self.describe()})",
                "preemption": self.preemption, "backfill": True, "backfill_reserve": False,
                "order": {"plugin": "tiresias_las", **self.order_params()},
                "place": {"consolidate": 1.0}}

    def profile(self, name: str = "las-learned-thresholds", description: str = "") -> Profile:
        return profile_from_mapping(self.profile_mapping(name, description), source=name)

    def to_toml(self, name: str = "las-learned-thresholds", description: str = "") -> str:
        m = self.profile_mapping(name, description)
        order = m["order"]
        lines = [f"name = {_toml_str(m['name'])}", f"description = {_toml_str(m['description'])}",
                 f"preemption = {_toml_bool(m['preemption'])}", "backfill = true",
                 "backfill_reserve = false", "", "[order]", 'plugin = "tiresias_las"',
                 "thresholds_gpu_s = [" + ", ".join(str(t) for t in order["thresholds_gpu_s"])
                 + "]"]
        if "num_queues" in order:
            lines.append(f"num_queues = {order['num_queues']}")
        lines += [f"starve_limit = {order['starve_limit']!r}", "", "[place]",
                  "consolidate = 1.0", ""]
        return "\n".join(lines)

    def describe(self) -> str:
        queues = ("1 queue (no demotion)" if not self.thresholds_gpu_s else
                  "thresholds " + "/".join(f"{t:.0f}" for t in self.thresholds_gpu_s) + " GPU-s")
        starve = f"starve {self.starve_limit:g}" if self.starve_limit > 0 else "no starve limit"
        return f"{queues}, {starve}, preemption {'on' if self.preemption else 'off'}"

    def as_dict(self) -> dict:
        return {"thresholds_gpu_s": list(self.thresholds_gpu_s), "num_queues": self.num_queues,
                "starve_limit": self.starve_limit, "preemption": self.preemption}


FIXED_TIRESIAS = LasKnobs()   # las-consolidate's knobs


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _toml_bool(b: bool) -> str:
    return "true" if b else "false"
