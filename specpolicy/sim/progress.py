"""The simulator's progress bar on stderr (tqdm), shown only once a run has taken more than a second and only
on a terminal, so quick runs and CI logs stay clean."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm

__all__ = ["ProgressBar"]


class ProgressBar:
    """``label [#####.....] 42%   3.1s``, redrawn at most ten times a second, silent for ``delay_s`` first.

    ``enabled`` None means "only when the stream is a terminal". ``update`` takes the amount done so far (the
    unit of ``total``, simulated seconds here), because the simulator's worker processes report a running sum.
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
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.done = 0.0
        self._bar = tqdm(
            total=self.total,
            desc=label,
            file=self.stream,
            disable=not self.enabled,
            delay=delay_s,
            mininterval=0.1,
            ascii=".#",
            bar_format="{desc} [{bar:" + str(width) + "}] {percentage:3.0f}% {elapsed_s:5.1f}s",
        )
        # tqdm reads the time from its instance attribute; its start is restarted on the given clock
        self._bar._time = clock
        self._bar.start_t = self._bar.last_print_t = clock()

    def update(self, done: float) -> None:
        """Set the amount done (same unit as ``total``)."""
        self.done = min(done, self.total)
        self._bar.update(self.done - self._bar.n)

    def close(self) -> None:
        """Finish the line at 100% if anything was drawn (nothing is written otherwise)."""
        if self.enabled:
            self._bar.n = self.total
        self._bar.close()
