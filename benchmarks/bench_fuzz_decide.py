"""Exceptions out of decide() per million fuzzed calls, per built-in policy.

Usage (from the repository root)::

    python benchmarks/bench_fuzz_decide.py --calls 100000 --seed 0

Every StepStats field is drawn (seeded) from a pool of well-formed and malformed values: per-request fields
as lists, tuples, numpy int and float arrays, iterables without ``len``, generators, strings, objects whose
conversions raise; counts beyond any float beside float arrays; NaN, inf, numpy scalars. Half the steps hold
well-formed counts beside one malformed field, so the readers get past their first checks. Counted: calls
that raise (numpy warnings are errors here) and results that are not a SpecMode among the candidate depths.
"""

from __future__ import annotations

import argparse
import math
import random
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from specpolicy import SpecMode, StepStats, make_policy, parse_config
from specpolicy.policies import BUILTIN_ENTRIES


class NoLen:
    def __init__(self, values: list[Any]) -> None:
        self.values = values

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values)


class Raising:
    def __len__(self) -> int:
        raise RuntimeError("no len")

    def __getitem__(self, i: object) -> Any:
        raise RuntimeError("no item")


NUMBERS: list[Any] = [
    0,
    1,
    3,
    7,
    -1,
    2.5,
    math.nan,
    math.inf,
    -math.inf,
    10**400,
    2**64,
    1e308,
    None,
    True,
    "3",
    np.int64(3),
    np.float64(2.5),
    np.uint8(200),
    np.float32(math.nan),
]


def _container(rng: random.Random, values: list[Any]) -> Any:
    pick = rng.randrange(10)
    if pick == 0:
        return values
    if pick == 1:
        return tuple(values)
    if pick == 2:
        return NoLen(values)
    if pick == 3:
        return (v for v in values)
    if pick == 4:
        try:
            return np.asarray(values, dtype=float)
        except Exception:  # noqa: BLE001
            return np.asarray([1.0, 2.0])
    if pick == 5:
        return np.asarray([v if type(v) is int and abs(v) < 100 else 1 for v in values])
    return rng.choice([None, "abc", 7, Raising(), np.float64(3.0), [[1, 2]], [{}], values])


def _stats(rng: random.Random) -> StepStats:
    k = rng.randint(1, 8)
    n = rng.randint(1, 12)
    good = [rng.randint(0, k) for _ in range(n)]
    if rng.random() < 0.5:
        acc = good if rng.random() < 0.5 else [rng.choice(NUMBERS) for _ in range(n)]
        acc = _container(rng, acc) if rng.random() < 0.3 else acc
        drafted = _container(rng, [k] * n)
    else:
        k = rng.choice([k, *NUMBERS])
        acc = _container(rng, [rng.choice(NUMBERS) for _ in range(n)])
        drafted = _container(rng, [rng.choice(NUMBERS) for _ in range(n)])
    fields = [rng.choice([*NUMBERS, rng.randint(0, 600)]) for _ in range(3)]
    tail = [rng.choice(NUMBERS) for _ in range(6)]
    ids = [rng.choice([None, list(range(n)), [[1]], np.arange(n), "ids"]) for _ in range(2)]
    values: list[Any] = [*fields, k, acc, drafted, *tail[:2], *tail[2:5], *ids]  # the 13 fields, in order
    return StepStats.fast(*values)


SPECS: list[dict[str, Any]] = [{"name": e.name} for e in BUILTIN_ENTRIES] + [
    {"name": "clamp", "inner": {"name": "acceptance"}, "depths": [0, 2]},
    {"name": "gate", "inner": {"name": "acceptance", "probe_interval": 1}},
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100_000, help="calls per policy configuration")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    total = bad = 0
    warnings.simplefilter("error")
    for spec in SPECS:
        rng = random.Random(args.seed)
        config = parse_config(spec)
        allowed = set(config.candidate_steps())
        policy = make_policy(config)
        raised = invalid = 0
        for i in range(args.calls):
            if i % 30 == 0:
                policy.reset()
            try:
                mode = policy.decide(_stats(rng))
            except Exception:  # noqa: BLE001 - what is counted
                raised += 1
                continue
            invalid += type(mode) is not SpecMode or mode.num_steps not in allowed
        total += args.calls
        bad += raised + invalid
        label = spec["name"] + ("" if len(spec) == 1 else "(" + spec["inner"]["name"] + ")")
        print(f"{label:22s} {raised:6d} raised {invalid:6d} invalid in {args.calls} calls")
    print(f"all: {bad} bad results in {total} calls = {bad / total * 1e6:.1f} per million")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
