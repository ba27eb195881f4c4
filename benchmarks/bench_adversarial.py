"""Seeded adversarial corpus: malformed StepStats against every policy, then a closed loop that must turn off.

Usage (from the repository root)::

    python benchmarks/bench_adversarial.py                       # >= 10^6 decide() calls, prints the figures
    python benchmarks/bench_adversarial.py --segments 200 --json out.json

Each segment feeds one policy a short prefix of ``StepStats.fast`` values whose fields are drawn from
``BAD_COUNTS`` / ``BAD_FLOATS`` / ``BAD_LISTS`` (numpy numbers, floats where ints belong, inf, NaN, strings,
``10**400``, bools, tensor-like objects whose conversions raise), then a closed loop in which speculating is
clearly worse (a large batch, a drafter that accepts nothing, step time growing with the depth). A policy
that can choose off must reach off within ``LIVENESS_BOUND`` steps of that loop; a short favourable loop
follows so the next segment starts from speculation. Counted: exceptions out of decide(), invalid outputs (not
a SpecMode among the config's candidate depths) and liveness violations. The test suite runs a small corpus;
this script is what the published figures come from.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from specpolicy import SpecMode, StepStats, available_policies, make_policy, parse_config

#: Steps of the unfavourable loop within which a policy that can choose off must have chosen it.
LIVENESS_BOUND = 1500


class Tensorish:
    """A number-like object as a tensor on an odd path is: conversions raise, comparisons give tensors."""

    def __float__(self) -> float:
        raise RuntimeError("a Tensor with 2 elements cannot be converted to Scalar")

    __int__ = __index__ = __float__  # type: ignore[assignment]

    def __bool__(self) -> bool:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")

    def _cmp(self, other: object) -> Tensorish:
        return self

    __lt__ = __le__ = __gt__ = __ge__ = _cmp  # type: ignore[assignment]

    def __len__(self) -> int:
        return 2

    def __iter__(self) -> Any:
        return iter((Tensorish(), Tensorish()))

    def __getitem__(self, item: object) -> Tensorish:
        return Tensorish()

    def __repr__(self) -> str:
        return "Tensorish()"


BAD_COUNTS: tuple[Any, ...] = (
    -1,
    10**400,
    2**64,
    7.0,
    3.0,
    3.5,
    np.int64(3),
    np.int32(-1),
    np.uint8(2),
    np.float64(3.0),
    True,
    False,
    "3",
    b"3",
    math.nan,
    math.inf,
    -math.inf,
    1e300,
    Tensorish(),
    object(),
    [1, 2],
    None,
)
BAD_FLOATS: tuple[Any, ...] = (
    -1.0,
    math.nan,
    math.inf,
    -math.inf,
    10**400,
    "1000",
    True,
    np.float64(0.02),
    np.float32(1e3),
    1000,
    np.int64(1000),
    1e308,
    -0.0,
    Tensorish(),
    object(),
    0,
)
BAD_LISTS: tuple[Any, ...] = (
    [],
    [-1],
    [10**400],
    [math.nan],
    [3.0],
    ["a"],
    np.array([1, 2, 3]),
    (1, 2, 3),
    Tensorish(),
    "abc",
    object(),
    [1] * 5000,
    range(5),
    [True, False],
    [np.int64(2)] * 3,
    [2**64],
    5,
)


def _pick(rng: random.Random, good: Any, bad: Sequence[Any], p_bad: float) -> Any:
    return bad[rng.randrange(len(bad))] if rng.random() < p_bad else good


def adversarial_stats(rng: random.Random, p_bad: float = 0.4) -> StepStats:
    """One StepStats whose fields are each, with probability ``p_bad``, replaced by a malformed value."""
    k = rng.randint(0, 7)
    b = rng.choice((1, 4, 64, 256))
    acc = None if k == 0 else [rng.randint(0, k) for _ in range(min(b, 8))]
    return StepStats.fast(
        _pick(rng, b, BAD_COUNTS, p_bad),
        _pick(rng, rng.randint(0, 8), BAD_COUNTS, p_bad),
        _pick(rng, 1000.0 + rng.random(), BAD_FLOATS, p_bad),
        _pick(rng, k, BAD_COUNTS, p_bad),
        _pick(rng, acc, BAD_LISTS, p_bad),
        _pick(rng, None, BAD_LISTS, p_bad / 4),
        _pick(rng, 0.01 + rng.random() * 1e-3, BAD_FLOATS, p_bad),
        _pick(rng, None, BAD_FLOATS, p_bad / 4),
    )


def closed_loop_stats(k: int, step: int, favourable: bool) -> StepStats:
    """What an engine reports after running depth ``k``: favourable = small batch, every draft accepted and
    cheap depth; otherwise a large batch, nothing accepted and each draft step costing 30% more time."""
    if favourable:
        batch, acc, slope = 1, [k], 0.02
    else:
        batch, acc, slope = 256, [0] * 256, 0.3
    t = 0.02 * (1.0 + slope * k) * (1.0 + 1e-4 * (step % 7))
    return StepStats.fast(batch, 0, 1000.0, k, acc if k else None, None, t)


def corpus_configs() -> list[tuple[str, Any]]:
    """Every registered policy with its default config, plus cost_model seeded from a shipped profile."""
    out: list[tuple[str, Any]] = [(n, n) for n in available_policies()]
    out.append(("cost_model+profile", {"name": "cost_model", "profile": "h200-llama8b"}))
    out.append(("static(0)", {"name": "static", "num_steps": 0}))
    return out


class Tally:
    """Counts of one policy's run through the corpus."""

    def __init__(self) -> None:
        self.calls = 0
        self.exceptions = 0
        self.invalid = 0
        self.liveness_checks = 0
        self.liveness_violations = 0
        self.worst_steps_to_off = 0
        self.errors: dict[str, int] = {}

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def run_policy(spec: Any, segments: int, seed: int, prefix_max: int = 16, favourable: int = 300) -> Tally:
    """Run ``segments`` segments (adversarial prefix, unfavourable loop, favourable loop) on one policy."""
    rng = random.Random(seed)
    policy = make_policy(spec)
    allowed = frozenset(parse_config(spec).candidate_steps())
    can_off = 0 in allowed
    tally = Tally()

    def call(stats: StepStats) -> int:
        tally.calls += 1
        try:
            mode = policy.decide(stats)
        except Exception as exc:  # noqa: BLE001 - counted, that is the point
            tally.exceptions += 1
            key = f"{type(exc).__name__}: {exc}"[:120]
            tally.errors[key] = tally.errors.get(key, 0) + 1
            return -1
        if type(mode) is not SpecMode or mode.num_steps not in allowed:
            tally.invalid += 1
            return -1
        return mode.num_steps

    step = 0
    for _ in range(segments):
        for _ in range(rng.randint(1, prefix_max)):
            call(adversarial_stats(rng))
        k = 0
        reached = -1
        for i in range(LIVENESS_BOUND):
            step += 1
            k = max(call(closed_loop_stats(k, step, favourable=False)), 0)
            if k == 0:
                reached = i + 1
                break
        if can_off:
            tally.liveness_checks += 1
            if reached < 0:
                tally.liveness_violations += 1
            else:
                tally.worst_steps_to_off = max(tally.worst_steps_to_off, reached)
        for _ in range(favourable):
            step += 1
            k = max(call(closed_loop_stats(k, step, favourable=True)), 0)
    return tally


def run_corpus(
    segments: int,
    seed: int,
    configs: Sequence[tuple[str, Any]] | None = None,
    progress: Callable[[str, Tally, float], None] | None = None,
) -> dict[str, Tally]:
    out: dict[str, Tally] = {}
    for i, (label, spec) in enumerate(configs or corpus_configs()):
        t0 = time.perf_counter()
        out[label] = run_policy(spec, segments, seed + i)
        if progress is not None:
            progress(label, out[label], time.perf_counter() - t0)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--segments", type=int, default=300, help="segments per policy config")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--json", default=None, help="also write the tallies here")
    args = ap.parse_args(argv)

    def show(label: str, t: Tally, secs: float) -> None:
        print(
            f"| {label} | {t.calls} | {t.exceptions} | {t.invalid} | {t.liveness_violations}/"
            f"{t.liveness_checks} | {t.worst_steps_to_off} | {secs:.1f} |",
            flush=True,
        )

    print(
        "| policy | decide() calls | exceptions | invalid outputs | liveness violations/checks | "
        "worst steps to off | seconds |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    tallies = run_corpus(args.segments, args.seed, progress=show)
    total = {
        f: sum(getattr(t, f) for t in tallies.values())
        for f in ("calls", "exceptions", "invalid", "liveness_violations", "liveness_checks")
    }
    print(
        f"| total | {total['calls']} | {total['exceptions']} | {total['invalid']} | "
        f"{total['liveness_violations']}/{total['liveness_checks']} | | |"
    )
    for label, t in tallies.items():
        for err, n in sorted(t.errors.items(), key=lambda kv: -kv[1])[:5]:
            print(f"  {label}: {n} x {err}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"total": total, "policies": {k: v.as_dict() for k, v in tallies.items()}}, f, indent=2)
    return 0 if total["exceptions"] == total["invalid"] == total["liveness_violations"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
