"""Run the simulator as a coroutine that stops inside ``run_cycle`` for each decision.

The simulator calls its policy deep inside its event loop; an environment's ``step`` must
return in between. ``pause(request)`` (called inside the simulator) hands ``request`` to the
caller of ``resume`` and waits for the answer. A worker thread and two queues: only one side
runs at a time, so runs are deterministic. (A greenlet version measured no faster on the
2-core machine once torch's per-thread OpenMP setting was set in the worker, so the
standard library suffices.)
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable


class Aborted(Exception):
    """Raised inside the paused simulator to end a run early (reset, close, truncation)."""


_ABORT = object()


class ThreadRunner:
    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._to_main: queue.Queue = queue.Queue(maxsize=1)
        self._to_worker: queue.Queue = queue.Queue(maxsize=1)
        self._paused = False

    def start(self, body: Callable[[], object]) -> tuple[str, object]:
        """Run ``body`` until it pauses ("pause", request) or ends ("done", result)."""
        self.stop()

        def target():
            import torch
            torch.set_num_threads(1)  # an OpenMP setting per thread: set it again here
            try:
                result = body()
            except Aborted:
                return
            except BaseException as exc:  # surfaced in the caller's thread
                self._to_main.put(("error", exc))
                return
            self._to_main.put(("done", result))

        self._thread = threading.Thread(target=target, daemon=True, name="slurm-marl-sim")
        self._thread.start()
        return self._wait()

    def pause(self, request):
        self._to_main.put(("pause", request))
        answer = self._to_worker.get()
        if answer is _ABORT:
            raise Aborted()
        return answer

    def resume(self, answer) -> tuple[str, object]:
        self._to_worker.put(answer)
        return self._wait()

    def _wait(self) -> tuple[str, object]:
        kind, payload = self._to_main.get()
        self._paused = kind == "pause"
        if not self._paused:
            self._thread.join()
            self._thread = None
        return kind, payload

    def stop(self) -> None:
        if self._thread is not None:
            if self._paused:
                self._to_worker.put(_ABORT)
            self._thread.join()
        self._thread = None
        self._paused = False
        for q in (self._to_main, self._to_worker):
            while not q.empty():
                q.get_nowait()
