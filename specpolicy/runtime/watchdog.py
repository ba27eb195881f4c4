"""DecideWatchdog: find a policy that hangs inside decide().

A running Python call cannot be pre-empted safely from another thread, so a policy that never returns blocks
the engine step for good; the controller cannot fall back around it. What can be done is to say where it is
stuck: a daemon thread polls the controller's ``busy_since`` and, once one decide() call has run longer than
``timeout_s``, logs the deciding thread's stack (once per stuck call), so an operator sees the culprit line
instead of a silent stall.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from typing import Protocol

__all__ = ["DecideWatchdog"]

log = logging.getLogger("specpolicy.adapter")


class _Watched(Protocol):
    busy_since: float
    thread_id: int
    rank: int
    policy_name: str
    step: int


class DecideWatchdog:
    """Logs the stack of a decide() call running longer than ``timeout_s``; ``stop()`` ends the thread."""

    def __init__(self, controller: _Watched, timeout_s: float, poll_s: float | None = None) -> None:
        if not timeout_s > 0:
            raise ValueError(f"watchdog timeout_s must be > 0, got {timeout_s!r}")
        self.controller = controller
        self.timeout_s = timeout_s
        # never below 1 ms: a tiny timeout must not turn the thread into a busy loop beside the engine
        self.poll_s = max(poll_s if poll_s is not None else min(timeout_s / 4, 1.0), 1e-3)
        self.dumps = 0
        self._reported = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="specpolicy-watchdog", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the watchdog must never take anything down
                pass

    def check(self, now: float | None = None) -> bool:
        """Dump the stack if the running call is over time and not yet reported; True when it dumped."""
        c = self.controller
        since = c.busy_since
        if not since or since == self._reported:
            return False
        t = time.perf_counter() if now is None else now
        if t - since < self.timeout_s:
            return False
        self._reported = since
        frame = sys._current_frames().get(c.thread_id)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "(thread not found)\n"
        self.dumps += 1
        log.error(
            "specpolicy rank %d: policy %s has been inside decide() for %.1f s (step %d); a running call "
            "cannot be interrupted, the engine step waits for it. Its stack:\n%s",
            c.rank,
            c.policy_name,
            t - since,
            c.step + 1,
            stack.rstrip(),
        )
        return True

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
