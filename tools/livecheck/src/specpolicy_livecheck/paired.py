"""Several engines alive at once, their batches interleaved: ratios between engines measured seconds apart.

On one GPU host identical batches of one engine ran up to 1.2x apart within a minute, and every host-side
method of SGLang's scheduler slowed or sped up together, by up to 1.6x (``host_timers``, 2026-12-02): the
host's speed drifts. Engines measured one after another (the live check, ``ab_static.py``) then compare
different moments of the host, and a step whose time is mostly host work (the non-overlap worker's) shows
the drift as a ratio. Here each variant's engine runs in its own process and serves this one's commands
over a pair of pipes; the batches rotate across the variants (``plan.interleave``), so a drift hits every
variant alike and the ratios of neighbouring batches cancel it.

The protocol is one JSON object per line each way. The child first answers ``{"ready": true, ...}`` (or
``{"ready": false, "error": ...}``); then each command gets one reply: ``{"op": "batch", ...}`` a batch
result, ``{"op": "quit"}`` ``{"bye": true}`` before the child exits. ``Child`` speaks it from this side;
``ab_static.serve`` from the engine's.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

__all__ = [
    "Child",
    "ChildError",
    "cpu_sets",
    "fixed_passes",
    "lossless_total",
    "median",
    "more_passes",
    "paired_batches",
    "ratios",
]

#: A batch served until ``min_s`` makes at most this many passes.
MAX_PASSES = 16

#: ``cpu_sets``: the fewest CPUs an engine's processes (scheduler, tokenizer, detokenizer) are pinned to.
MIN_CPUS_PER_ENGINE = 2


def cpu_sets(engines: int, cpus: Sequence[int]) -> list[list[int]]:
    """``cpus`` cut into ``engines`` disjoint contiguous sets, the first ones a CPU larger where they do not
    divide evenly: one per engine of a paired run, so that one engine's host work (a non-overlap worker's
    step is mostly host work) never shares a core with another's. ValueError below ``MIN_CPUS_PER_ENGINE``
    CPUs per engine."""
    ids = sorted(cpus)
    if engines < 1:
        raise ValueError(f"engines must be >= 1, got {engines}")
    if len(ids) < engines * MIN_CPUS_PER_ENGINE:
        raise ValueError(
            f"{engines} engines need {engines * MIN_CPUS_PER_ENGINE} CPUs or more to be pinned apart"
            f" ({MIN_CPUS_PER_ENGINE} each); this process may use {len(ids)}"
        )
    size, extra = divmod(len(ids), engines)
    out: list[list[int]] = []
    start = 0
    for i in range(engines):
        n = size + (1 if i < extra else 0)
        out.append(ids[start : start + n])
        start += n
    return out


class ChildError(RuntimeError):
    """A child engine that did not answer in time, answered garbage, or exited."""


class Child:
    """One engine process, started with ``argv`` plus ``--cmd-fd R --reply-fd W`` (the pipes' child ends)."""

    def __init__(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.name = name
        cmd_r, cmd_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self.proc = subprocess.Popen(
            [*argv, "--cmd-fd", str(cmd_r), "--reply-fd", str(rep_w)],
            pass_fds=(cmd_r, rep_w),
            env=env,
            start_new_session=True,  # killpg reaches the engine's own scheduler processes
        )
        os.close(cmd_r)
        os.close(rep_w)
        self._cmd: TextIO = os.fdopen(cmd_w, "w", buffering=1)
        self._rep_fd = rep_r
        self._buf = b""

    def send(self, cmd: dict[str, Any]) -> None:
        try:
            self._cmd.write(json.dumps(cmd) + "\n")
        except (OSError, ValueError) as exc:
            raise ChildError(
                f"{self.name}: cannot send {cmd.get('op')!r}: the child has gone ({exc})"
            ) from None

    def recv(self, timeout_s: float) -> dict[str, Any]:
        """The next reply line, waiting at most ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildError(f"{self.name}: no reply within {timeout_s:.0f} s")
            ready, _, _ = select.select([self._rep_fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._rep_fd, 65536)
            if not chunk:
                raise ChildError(f"{self.name}: the child exited (rc={self.proc.poll()}) without a reply")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            raise ChildError(f"{self.name}: a reply that is not JSON: {line[:200]!r}") from None
        if not isinstance(reply, dict):
            raise ChildError(f"{self.name}: a reply that is not an object: {line[:200]!r}")
        return reply

    def request(self, cmd: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        self.send(cmd)
        return self.recv(timeout_s)

    def kill(self) -> None:
        """Kill the child's whole process group now (the engine's scheduler processes too)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self, timeout_s: float = 60.0) -> int:
        """Ask the child to quit; kill its process group if it does not exit in time. Returns its rc."""
        try:
            self.request({"op": "quit"}, timeout_s)
        except ChildError:
            pass
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait()
        finally:
            try:
                self._cmd.close()
            except OSError:  # buffered text for a child that has gone
                pass
            os.close(self._rep_fd)


def paired_batches(
    children: dict[str, Child],
    order: Sequence[tuple[int, int, str]],
    command: Callable[[int, int, str], dict[str, Any]],
    *,
    timeout_s: float,
    deadline: float | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Run ``order`` ((repeat, concurrency, variant), as ``plan.interleave`` gives it), one batch at a time:
    ``command(r, c, variant)`` is sent to that variant's child. Returns variant -> concurrency -> the
    batch replies in run order (each with ``repeat`` and ``seq``, the batch's place in the whole run). A
    child that fails is dropped (said once) and its later batches skipped; past ``deadline``
    (``time.time()``) nothing more is started."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = {v: {} for v in children}
    dead: set[str] = set()
    for seq, (r, c, v) in enumerate(order):
        if v in dead or v not in children:
            continue
        if deadline is not None and time.time() >= deadline:
            log(f"paired: deadline reached after {seq} of {len(order)} batches")
            break
        try:
            reply = children[v].request(command(r, c, v), timeout_s)
        except ChildError as exc:
            log(f"paired: dropping {v}: {exc}")
            dead.add(v)
            continue
        reply.update(repeat=r, seq=seq)
        out[v].setdefault(str(c), []).append(reply)
    return out


def more_passes(done: int, passes: int | None, started: float, min_s: float) -> bool:
    """Whether a batch makes another pass: exactly ``passes`` when given, else at least one and more until
    ``min_s`` has passed since ``started`` (``time.perf_counter()``), at most ``MAX_PASSES``. A pass after
    the first finds its prompts in the engine's prefix cache and skips their prefill, so batches that are
    compared must make the same number (``fixed_passes``)."""
    if passes is not None:
        return done < passes
    return done == 0 or (done < MAX_PASSES and time.perf_counter() - started < min_s)


def fixed_passes(calibration: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, int]:
    """Per concurrency, the most passes any variant's calibration batch made (at least 1): with that many
    every variant's batch runs at least as long as ``min_s`` asked of the fastest, and all make the same."""
    out: dict[str, int] = {}
    for by_c in calibration.values():
        for c, rows in by_c.items():
            for b in rows:
                if isinstance(b.get("passes"), int):
                    out[c] = max(out.get(c, 1), b["passes"])
    return out


def ratios(
    batches: dict[str, dict[str, list[dict[str, Any]]]],
    num: str,
    den: str | Sequence[str],
    key: str = "tok_s",
) -> dict[str, dict[str, Any]]:
    """Per concurrency, ``num`` over ``den`` of each repeat's batches (they ran next to each other), and
    their median and min-max: what a drift of the host cannot move. ``den`` may name several variants: the
    ratio is then to the best of them in the same repeat (a policy against the better fixed engine), and a
    repeat where any of them is missing is left out. A repeat whose batches made different numbers of
    passes (``more_passes``: a later pass skips its prefill) is left out too, and counted
    (``unequal_passes``)."""
    dens = [den] if isinstance(den, str) else list(den)
    out: dict[str, dict[str, Any]] = {}
    for c, rows in batches.get(num, {}).items():
        by_rep: dict[int, list[float]] = {}
        passes: dict[int, set[Any]] = {}
        for d in dens:
            for b in batches.get(d, {}).get(c, []):
                if b.get(key):
                    by_rep.setdefault(b["repeat"], []).append(b[key])
                    passes.setdefault(b["repeat"], set()).add(b.get("passes"))
        best = {r: max(v) for r, v in by_rep.items() if len(v) == len(dens)}
        rs: list[float] = []
        unequal = 0
        for b in rows:
            if not b.get(key) or b["repeat"] not in best:
                continue
            seen = passes[b["repeat"]] | {b.get("passes")}
            if len(seen - {None}) > 1:
                unequal += 1
                continue
            rs.append(b[key] / best[b["repeat"]])
        rs.sort()
        if rs:
            out[c] = {
                "median": round(rs[len(rs) // 2], 4),
                "min": round(rs[0], 4),
                "max": round(rs[-1], 4),
                "n": len(rs),
            }
        elif unequal:  # nothing comparable: the level stays, so that it cannot pass for met
            out[c] = {"median": None, "min": None, "max": None, "n": 0}
        if unequal:
            out[c]["unequal_passes"] = unequal
    return out


def median(rows: list[dict[str, Any]], key: str = "tok_s") -> float | None:
    """The median of ``key`` over batch results (the upper one of an even count), every table's."""
    vals = sorted(b[key] for b in rows if b.get(key) is not None)
    return vals[len(vals) // 2] if vals else None


def lossless_total(by_c: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    """Requests checked against the oracle, those equal to it, and batches that failed, over one variant's
    batches (concurrency -> replies)."""
    rows = [b for runs in by_c.values() for b in runs]
    return {
        "requests": sum(int(b.get("requests", 0)) for b in rows),
        "lossless": sum(int(b.get("lossless", 0)) for b in rows),
        "errors": sum("error" in b for b in rows),
    }
