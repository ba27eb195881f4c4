"""A policy that answers from a script, for the controller and step-path tests."""

from __future__ import annotations

from typing import Any

from specpolicy import SpecMode, StepStats


class Scripted:
    """Answers the given modes in order (an exception in the script is raised); the stats it saw are kept."""

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)
        self.seen: list[StepStats] = []

    def decide(self, stats: StepStats) -> SpecMode:
        self.seen.append(stats)
        out = self.script.pop(0)
        if isinstance(out, BaseException):
            raise out
        return out  # type: ignore[no-any-return]

    def reset(self) -> None:
        pass
