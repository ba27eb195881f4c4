"""Workloads read from files: a JSONL list of requests, or a step trace replayed as a closed loop.

- a JSONL file, one request per line: ``{"arrival_s": 0.0, "prompt_tokens": 512, "output_tokens": 256,
  "acceptance": 0.7}`` (acceptance optional: drawn from the model when absent); runs until every request is
  done unless a duration cuts it.
- a step trace (``specpolicy-trace/1``, as the engine adapters write it): replayed as a closed loop whose
  concurrency follows the trace's batch size + queue and whose acceptance follows the trace's, per 10 s.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from .acceptance import AcceptanceModel
from .scenario import Requests, RequestShape, Scenario

__all__ = ["load_file"]


def load_file(
    path: Path, duration_s: float | None, shape: RequestShape, acceptance: AcceptanceModel
) -> list[Scenario]:
    """The scenario of a workload file: a step trace, else a JSONL list of requests."""
    if _looks_like_trace(path):
        return [_trace_scenario(path, duration_s, shape, acceptance)]
    reqs = _read_requests_file(path)
    return [
        Scenario(
            path.name,
            duration_s or float(reqs.arrival_s[-1]) + 1.0,
            requests=reqs,
            shape=shape,
            acceptance=acceptance,
            drain=duration_s is None,
        )
    ]


def _read_requests_file(path: Path) -> Requests:
    arrival: list[float] = []
    prompt: list[int] = []
    out: list[int] = []
    acc: list[float] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{where}: not JSON: {exc}") from None
            if not isinstance(obj, dict):
                raise ConfigError(f"{where}: each line must be a JSON object")
            a = obj.get("arrival_s")
            if not isinstance(a, (int, float)) or isinstance(a, bool) or not (math.isfinite(a) and a >= 0):
                raise ConfigError(f"{where}: arrival_s must be a number of seconds >= 0, got {a!r}")
            for key in ("prompt_tokens", "output_tokens"):
                v = obj.get(key)
                if type(v) is not int or v < 1:
                    raise ConfigError(f"{where}: {key} must be an integer >= 1, got {v!r}")
            p = obj.get("acceptance")
            if p is not None and (
                not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 <= p <= 1.0
            ):
                raise ConfigError(f"{where}: acceptance must be a number in [0, 1] or absent, got {p!r}")
            arrival.append(float(a))
            prompt.append(obj["prompt_tokens"])
            out.append(obj["output_tokens"])
            acc.append(math.nan if p is None else float(p))
    if not arrival:
        raise ConfigError(f"{path}: workload file has no requests")
    order = np.argsort(np.asarray(arrival), kind="stable")
    return Requests(
        np.asarray(arrival, dtype=np.float64)[order],
        np.asarray(prompt, dtype=np.int64)[order],
        np.asarray(out, dtype=np.int64)[order],
        np.asarray(acc, dtype=np.float64)[order],
    )


def _per_token_acceptance(mean_accepted: float, depth: float) -> float:
    """Solve sum_{i=1..k} p**i = mean_accepted for p (chain acceptance), by bisection."""
    k = max(1, round(depth))
    lo, hi = 1e-4, 1.0 - 1e-4
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if sum(mid**i for i in range(1, k + 1)) < mean_accepted:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _trace_scenario(
    path: Path,
    duration_s: float | None,
    shape: RequestShape,
    acceptance: AcceptanceModel,
    window_s: float = 10.0,
) -> Scenario:
    from ..trace import read_trace

    t = 0.0
    t0: float | None = None
    conc: list[tuple[float, int]] = []
    acc_sum: dict[int, list[float]] = {}
    n = 0
    try:
        for rec in read_trace(path):
            if rec.rank != 0:
                continue
            n += 1
            if rec.ts is not None:
                t0 = rec.ts if t0 is None else t0
                t = rec.ts - t0
            c = max(1, rec.batch_size + rec.num_waiting)
            if not conc or conc[-1][1] != c:
                conc.append((t, c))
            if rec.last_num_steps > 0 and rec.accepted_draft_tokens:
                acc = rec.accepted_draft_tokens
                bucket = acc_sum.setdefault(int(t // window_s), [0.0, 0.0, 0.0])
                bucket[0] += sum(acc)
                bucket[1] += len(acc)
                bucket[2] += rec.last_num_steps * len(acc)
            if rec.ts is None:
                t += rec.step_time_s or 0.0
    except ValueError as exc:
        raise ConfigError(f"workload trace {path}: {exc}") from None
    if n == 0:
        raise ConfigError(f"workload trace {path}: no step records")
    phases: list[tuple[float, float]] = []
    for b in sorted(acc_sum):
        s, cnt, depth = acc_sum[b]
        p = _per_token_acceptance(s / cnt, depth / cnt)
        phases.append((b * window_s, min(0.99, max(0.01, p))))
    end = max(t, conc[-1][0] + 1.0)
    if conc[0][0] > 0:
        conc.insert(0, (0.0, conc[0][1]))
    return Scenario(
        workload=path.name,
        duration_s=duration_s or end,
        closed_loop=tuple(conc),
        acceptance_phases=tuple(phases),
        shape=shape,
        acceptance=acceptance,
    )


def _looks_like_trace(path: Path) -> bool:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    return False
                return isinstance(obj, dict) and (
                    obj.get("kind") == "header" or ("batch_size" in obj and "num_steps" in obj)
                )
    return False
