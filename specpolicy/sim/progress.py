"""A dependency-free progress bar on stderr that appears only once a run has taken more than a second."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["ProgressBar"]


class ProgressBar:
    """Draws ``label [#####.....] 42% 3.1s`` with carriage returns; silent for the first ``delay_s``.

    ``enabled`` None means "only when the stream is a terminal" (CI logs stay clean).
    """

    def __init__(
        self,
        total: float,
        label: str = "simulating",
        *,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        delay_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        width: int = 30,
    ) -> None:
        self.total = max(total, 1e-12)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.delay_s = delay_s
        self.clock = clock
        self.width = width
        self.done = 0.0
        self.t0 = clock()
        self._last_draw = -1.0
        self.drawn = False

    def update(self, done: float) -> None:
        """Set the amount done (same unit as ``total``) and redraw at most ten times a second."""
        self.done = min(done, self.total)
        if not self.enabled:
            return
        now = self.clock()
        if now - self.t0 < self.delay_s or now - self._last_draw < 0.1:
            return
        self._last_draw = now
        self._draw(now)

    def _draw(self, now: float) -> None:
        frac = self.done / self.total
        filled = int(round(frac * self.width))
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {frac:4.0%} {now - self.t0:5.1f}s")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        """Finish the line if anything was drawn."""
        if self.enabled and self.drawn:
            self.done = self.total
            self._draw(self.clock())
            self.stream.write("\n")
            self.stream.flush()
