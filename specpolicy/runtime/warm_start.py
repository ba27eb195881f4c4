"""A warm start: the policy's learned state saved to a file while the engine serves, and loaded at the next
start when the file was saved by the same deployment.

The file holds the policy's ``state_dict()`` and a fingerprint of what it was learned on (engine and
release, model, drafter, GPU, ranks, the policy's config, the specpolicy release): step costs and acceptance
learned on one of them say little about another. Rank 0 writes it every ``warm_start_every`` steps and at
shutdown, atomically (a temporary file in the same folder, then a rename), so a crash mid-write leaves the
previous file. A file that is missing, older than ``warm_start_max_age_s``, unreadable or of another
deployment is reported once in the log with the reason and the policy starts cold: a warm start is never
a reason for the engine not to start. Every outcome is counted (``counts``, the metrics' engine events).

With several ranks every rank loads rank 0's file: ranks that decide alone (``tp_agreement=local``) decide
alike only from the same state, and their states, learned from rank-identical inputs, are rank 0's.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..config_files import write_text_atomic
from ..errors import short_repr, short_str
from ..policy import Policy, Stateful
from ..snapshot import StateError
from .decision import StepRecord

__all__ = ["FILE_FORMAT", "FILE_VERSION", "WarmStart", "gpu_name"]

log = logging.getLogger("specpolicy.adapter")

FILE_FORMAT = "specpolicy-warm-start"
FILE_VERSION = 1
#: A file saved this far in the future (clock steps between hosts) still counts as fresh.
_CLOCK_SLACK_S = 300.0


def gpu_name() -> str:
    """The name of this process's GPU (torch's), or ``cpu`` where there is none."""
    try:
        import torch

        if torch.cuda.is_available():
            return str(torch.cuda.get_device_name())
    except Exception:  # noqa: BLE001 - no torch, no driver: no GPU to name
        pass
    return "cpu"


class WarmStart:
    """Loads a policy's state at start and saves it periodically and at ``close``; an observer of the steps
    (``on_record``), so the controller needs nothing of it.

    Args:
        path: the state file.
        policy: returns the policy whose state is kept (the settings' policy, before an engine's wrapper).
        fingerprint: returns what the state is valid for (asked at each load and save: a policy changed
            while running saves under its own config); a file with another is not loaded.
        every: steps between two saves.
        max_age_s: a file saved longer ago is stale.
        rank: for the log; only rank 0 saves.
    """

    def __init__(
        self,
        path: Path,
        policy: Callable[[], Policy],
        fingerprint: Callable[[], Mapping[str, object]],
        *,
        every: int,
        max_age_s: float,
        rank: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.policy = policy
        self._fingerprint = fingerprint
        self.every = every
        self.max_age_s = max_age_s
        self.rank = rank
        self.clock = clock
        #: what happened: ``loaded``, ``ignored_<reason>``, ``saves``, ``save_failures``
        self.counts: dict[str, int] = {}
        #: why the last load did not happen (None after a load)
        self.reason: str | None = None
        self._next_save = every
        self._save_logged = False

    def fingerprint(self) -> dict[str, Any]:
        """The fingerprint now, as a file holds it (JSON; what JSON lacks as its string)."""
        loaded: dict[str, Any] = json.loads(json.dumps(dict(self._fingerprint()), default=str))
        return loaded

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    # -- start -----------------------------------------------------------------------------------------------
    def load(self) -> bool:
        """Load the file's state into the policy when it fits; otherwise log why once and leave the policy
        cold. Never raises."""
        try:
            kind, reason = self._load()
        except Exception as exc:  # noqa: BLE001 - a warm start must never stop the engine
            kind, reason = "corrupt", f"{type(exc).__name__}: {short_str(exc)}"
        if kind == "loaded":
            self.reason = None
            self._count("warm_start_loaded")
            log.info("specpolicy rank %d: warm start from %s (%s)", self.rank, self.path, reason)
            return True
        self.reason = f"{kind}: {reason}"
        self._count(f"warm_start_ignored_{kind}")
        level = logging.INFO if kind == "missing" else logging.WARNING
        log.log(
            level,
            "specpolicy rank %d: no warm start from %s, %s; starting cold",
            self.rank,
            self.path,
            self.reason,
        )
        return False

    def _load(self) -> tuple[str, str]:
        """(outcome, detail): ``loaded`` or why not (``missing``, ``stale``, ``corrupt``, ``mismatch``,
        ``unsupported``)."""
        policy = self.policy()
        if not isinstance(policy, Stateful):
            return "unsupported", f"the policy {type(policy).__name__} keeps no state to load"
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return "missing", "no state saved yet"
        except OSError as exc:
            return "corrupt", f"cannot read it: {short_str(exc)}"
        try:
            data = json.loads(raw)
        except ValueError as exc:
            return "corrupt", f"not JSON: {short_str(exc)}"
        if not isinstance(data, dict) or data.get("format") != FILE_FORMAT:
            return "corrupt", f"not a {FILE_FORMAT} file"
        if data.get("version") != FILE_VERSION:
            return "mismatch", f"file version {data.get('version')!r}, this release reads {FILE_VERSION}"
        saved_at = data.get("saved_at")
        if not isinstance(saved_at, int | float) or isinstance(saved_at, bool) or not math.isfinite(saved_at):
            return "corrupt", f"saved_at must be a time, got {saved_at!r}"
        age = self.clock() - saved_at
        if age > self.max_age_s:
            return "stale", f"saved {age:.0f} s ago, over warm_start_max_age_s={self.max_age_s:g}"
        if age < -_CLOCK_SLACK_S:
            return "corrupt", f"saved_at is {-age:.0f} s in the future"
        theirs, mine = data.get("fingerprint"), self.fingerprint()
        if not isinstance(theirs, dict):
            return "corrupt", "no fingerprint"
        differ = sorted(k for k in {*theirs, *mine} if theirs.get(k) != mine.get(k))
        if differ:
            key = differ[0]
            were, now = short_repr(theirs.get(key)), short_repr(mine.get(key))
            return "mismatch", f"saved for another {', '.join(differ)} ({key}: {were}, here {now})"
        state = data.get("state")
        if not isinstance(state, Mapping):
            return "corrupt", "no state"
        try:
            policy.load_state_dict(state)
        except StateError as exc:
            return ("mismatch" if exc.field in ("version", "policy", "config") else "corrupt"), str(exc)
        return "loaded", f"saved {age:.0f} s ago at step {data.get('step')!r}"

    # -- saving ----------------------------------------------------------------------------------------------
    def on_record(self, record: StepRecord) -> None:
        if record.step >= self._next_save and self.rank == 0:
            self._next_save = record.step + self.every
            self.save(record.step)

    def save(self, step: int | None = None) -> bool:
        """Write the policy's state atomically; a failure is logged once, counted, never raised."""
        try:
            policy = self.policy()
            if not isinstance(policy, Stateful):
                return False
            body: dict[str, Any] = {
                "format": FILE_FORMAT,
                "version": FILE_VERSION,
                "saved_at": self.clock(),
                "step": step,
                "fingerprint": self.fingerprint(),
                "state": policy.state_dict(),
            }
            text = json.dumps(body, allow_nan=False, separators=(",", ":"))
            write_text_atomic(self.path, text)
        except Exception as exc:  # noqa: BLE001 - the engine serves on whatever the disk does
            self._count("warm_start_save_failures")
            if not self._save_logged:
                self._save_logged = True
                log.warning(
                    "specpolicy rank %d: cannot save the warm-start state to %s: %s (counted in "
                    'specpolicy_engine_events_total{event="warm_start_save_failures"}; not logged again)',
                    self.rank,
                    self.path,
                    short_str(exc),
                )
            return False
        self._count("warm_start_saves")
        return True

    def close(self, step: int | None = None) -> None:
        """Save the final state (shutdown; rank 0)."""
        if self.rank == 0:
            self.save(step)
