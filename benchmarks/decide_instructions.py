"""Machine instructions per decide() step, counted under valgrind: a figure that a busy machine does not move.

Wall-clock medians (``bench_decide.py``) vary by 30% and more between runs on a shared 2-core machine, which
hides a change of 5-10% in decide(). Instruction counts do not vary: this script runs ``bench_decide.py``'s
inputs (same seeds, ids filled) through one policy, or SGLang's built-in, for ``LOOPS`` loops of 256 steps;
the count of two runs with different ``LOOPS``, differenced and divided by the extra steps, is the cost of one
step, start-up and imports cancelled. Instructions are not time (Python code that hashes strings or misses
the cache runs fewer instructions per nanosecond), so compare like with like: the same policy before and
after a change, or a policy against SGLang's on the same inputs. Usage (from the repository root; the
interpreter's own binary, not a shim script; ``PYTHONHASHSEED`` fixes the dict layouts)::

    for n in 2 8; do PYTHONHASHSEED=0 valgrind --tool=cachegrind --cache-sim=no \\
        --cachegrind-out-file=/dev/null "$(python3 -c 'import sys; print(sys.executable)')" \\
        benchmarks/decide_instructions.py cost_model 64 $n 2>&1 | grep 'I *refs'; done
    # (second - first) / (6 * 256) instructions per step; "sglang" instead of a policy name measures
    # SGLang's AdaptiveSpeculativeParams (run it with an interpreter where sglang is importable)

The loop is closed as in ``bench_decide.py`` (a fourth argument ``open`` feeds the open loop's depth-3
steps). SGLang's count moves by up to 2x between pairs of loop counts (its start-up varies by more than
many loops of its steps), so for it take the slope over several loop counts (2, 42, 82, 122, 162).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_decide as bd  # noqa: E402 - the benchmark's own inputs, from beside this file

from specpolicy import StepStats, make_policy  # noqa: E402


def main(argv: list[str]) -> int:
    name, batch, loops = argv[0], int(argv[1]), int(argv[2])
    closed = argv[3:4] != ["open"]
    raw = bd._inputs(batch, 256, 32, seed=batch, ids=True)
    if name == "sglang":
        cls, note = bd.load_sglang_params()
        if cls is None:
            print(note, file=sys.stderr)
            return 1
        params = cls(bd.DEPTH, None)
        get, feed = params.get_steps_for_batch, params.on_verify_complete
        accs = [a[4] for a in raw]
        capped = bd._capped(accs)
        for _ in range(3 + loops):  # 3 warm-up loops, as for a policy
            if closed:
                for row in capped:
                    feed(row[get(batch)], batch)
            else:
                for acc in accs:
                    get(batch)
                    feed(acc, batch)
        return 0
    decide = make_policy(name).decide
    if closed:
        rows = bd._closed_rows(raw)
        k = bd.DEPTH
        for _ in range(3 + loops):
            for row in rows:
                k = decide(row[k]).num_steps
        return 0
    stats = [StepStats.fast(*a) for a in raw]
    for _ in range(3 + loops):
        for s in stats:
            decide(s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
