"""cost_model's decisions on fixed, seeded step streams, against decisions recorded from a reference build.

decide() is hot, so it is made cheaper from time to time (lazy per-request estimates, cached batch sums,
skipped recomputations); none of that may change a decision. Each stream is generated here, closed loop and
seeded: a batch whose size moves (ramps, bursts, batches of 1-8 priced request by request and of hundreds
priced by sample), requests that come and go, each with its own acceptance (an easy and a hard population),
a shift in acceptance half-way, step times that depend on batch size and the depth that ran, stray slow steps,
and now and then a malformed field. The depth the policy decides is the depth the next step runs, so one
different decision changes every later step's inputs too: the first step where the depths differ is named.

``tests/fixtures/cost_model_replay.json`` holds the reference decisions; they were recorded from the
implementation that prices a batch priced as a population by the throughput of holding a depth (and keeps
the population's spread once it clears its noise, with the shape its deeper positions measure), fits the
requests' prior to their history, looks at a small batch while off when what it may show is worth the step,
prices probes by their time, takes the best acceptance seen only as far as its tries support it, audits
the other kind of depth every ``AUDIT_STEPS`` steps (alarming every bucket when one shows an estimate stale),
takes a sample far faster than its cell as the depth's cost, counts per-request outcomes at every fold,
and reads the first outcome at another depth (a probe's) whatever the step's parity.
Re-record them only for an intended change of decisions:
``PYTHONPATH=. python3 tests/test_cost_model_replay.py --record``.
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from specpolicy import StepStats, make_policy

FIXTURE = Path(__file__).parent / "fixtures" / "cost_model_replay.json"

#: (name, policy configuration, seed, steps)
STREAMS: tuple[tuple[str, dict[str, Any], int, int], ...] = (
    ("default", {}, 1, 4000),
    ("default-seed2", {}, 2, 4000),
    ("profile-prior", {"profile": "h200-llama8b"}, 3, 3000),
    ("change-detector", {"change_threshold": 8.0, "probe_steps": 3}, 4, 3000),
    ("small-batches", {}, 5, 3000),
    ("no-off", {"allow_off": False, "steps": [1, 2, 4]}, 6, 2000),
)


def _load(rng: random.Random, step: int, name: str) -> int:
    """The decode batch size at ``step``: a ramp up and down, bursts, and (``small-batches``) mostly 1-9."""
    if name == "small-batches":
        return max(1, int(5 + 4 * math.sin(step / 97.0)) + rng.randint(-1, 1))
    phase = (step // 500) % 4
    if phase == 0:
        return 1 + step % 500 // 8
    if phase == 1:
        return max(1, 64 - step % 500 // 8)
    if phase == 2:
        return 200 + rng.randint(0, 80) if step % 120 < 40 else rng.randint(1, 6)
    return rng.choice((1, 2, 3, 8, 9, 16, 33, 64, 128, 256))


def _step_time(rng: random.Random, batch: int, depth: int) -> float:
    """A step's time: a base, per request, and per verified token (compute-bound at large batches)."""
    tokens = batch * (depth + 1)
    t = 0.006 + 0.00002 * batch + 0.0009 * depth + 0.0000045 * tokens * (1.0 + tokens / 2048.0)
    return t * (1.0 + 0.03 * rng.random()) * (3.5 if rng.random() < 0.005 else 1.0)


def stream_decisions(name: str, config: dict[str, Any], seed: int, steps: int) -> str:
    """The decided depths of one stream, one character per step (``0``-``9``)."""
    policy = make_policy({"name": "cost_model", **config})
    rng = random.Random(seed)
    next_id = 0
    running: list[tuple[str, float]] = []
    last: tuple[list[str], int, int, float] | None = None  # ids, batch, decided depth, context
    out = []
    for step in range(steps):
        shift = 0.35 if step >= steps // 2 else 0.0  # acceptance drops half-way through
        want = _load(rng, step, name)
        running = [r for r in running if rng.random() > 0.01][:want]
        while len(running) < want:
            easy = rng.random() < 0.5
            running.append((f"{seed:02d}-{next_id:06x}", 0.9 if easy else 0.25))
            next_id += 1
        if rng.random() < 0.05:
            rng.shuffle(running)
        ids = [r for r, _ in running]
        ctx = 800.0 + 3.0 * (step % 300)
        fields: dict[str, Any] = {}
        if last is not None:
            last_ids, last_batch, depth, last_ctx = last
            rates = dict(running)
            accepted = []
            for rid in last_ids:
                p = max(0.02, rates.get(rid, 0.6) - shift)
                n = 0
                while n < depth and rng.random() < p:
                    n += 1
                accepted.append(n)
            t: Any = _step_time(rng, last_batch, depth)
            acc: Any = accepted if depth > 0 else None
            roll = rng.random()
            if roll < 0.01:
                t = float("nan")
            elif roll < 0.02:
                acc = tuple(accepted) if acc is not None else None
            elif roll < 0.025:
                t = None
            fields = {
                "last_num_steps": depth,
                "accepted_draft_tokens": acc,
                "last_step_time_s": t,
                "last_batch_size": last_batch,
                "last_decided_steps": depth,
                "last_mean_seq_len": last_ctx,
                "last_request_ids": last_ids if rng.random() > 0.02 else None,
            }
        stats = StepStats.fast(
            want, rng.randint(0, 4), ctx, fields.get("last_num_steps", 0),
            fields.get("accepted_draft_tokens"), None, fields.get("last_step_time_s"), None,
            fields.get("last_batch_size"),
            fields.get("last_decided_steps"), fields.get("last_mean_seq_len"), fields.get("last_request_ids"),
            ids if rng.random() > 0.01 else None,
        )
        depth = policy.decide(stats).num_steps
        out.append(str(depth))
        last = (ids, want, depth, ctx)
    return "".join(out)


def _reference() -> dict[str, str]:
    data: dict[str, str] = json.loads(FIXTURE.read_text())
    return data


@pytest.mark.parametrize("name,config,seed,steps", STREAMS, ids=[s[0] for s in STREAMS])
def test_decisions_match_the_reference(name: str, config: dict[str, Any], seed: int, steps: int) -> None:
    want = _reference()[name]
    got = stream_decisions(name, config, seed, steps)
    assert len(got) == len(want)
    first = next((i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), None)
    assert first is None, (
        f"{name}: first different decision at step {first}: {got[first]} instead of {want[first]} "
        f"(context: {got[max(0, first - 10):first + 10]} vs {want[max(0, first - 10):first + 10]})"
    )


def test_streams_exercise_the_policy() -> None:
    """The reference is worth matching only if the streams make the policy move: several depths each, off
    included where it may switch off."""
    for name, config, _, _ in STREAMS:
        used = set(_reference()[name])
        assert len(used) >= 3, (name, used)
        if config.get("allow_off", True):
            assert "0" in used, name


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    FIXTURE.write_text(
        json.dumps({name: stream_decisions(name, cfg, seed, n) for name, cfg, seed, n in STREAMS}, indent=1)
        + "\n"
    )
