"""AttrSwap, the one save/restore of engine attributes around a legacy SGLang off step: assignments in place
between swap_in and swap_out, every old value back after, whatever happened in between."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specpolicy.adapters.sglang.legacy.swap import KEEP, AttrSwap, swapped

NAMES = ("attn_backend", "graph_runner", "speculative_num_steps", "speculative_num_draft_tokens")


def _objects() -> list[SimpleNamespace]:
    return [SimpleNamespace(**{n: f"{i}-{n}" for n in NAMES}) for i in range(3)]


ASSIGNMENTS = st.tuples(st.integers(0, 2), st.sampled_from(NAMES), st.integers() | st.just(KEEP))


@given(st.lists(ASSIGNMENTS, max_size=12))
def test_swap_out_restores_every_attribute_even_one_named_twice(plan: list[tuple[int, str, Any]]) -> None:
    objs = _objects()
    before = [vars(o).copy() for o in objs]
    swap = AttrSwap()
    swap.swap_in((objs[i], name, value) for i, name, value in plan)
    assert swap.active
    last: dict[tuple[int, str], Any] = {}
    for i, name, value in plan:
        if value is not KEEP:
            last[(i, name)] = value
    for (i, name), value in last.items():
        assert getattr(objs[i], name) == value
    for i, o in enumerate(objs):  # what was not named is untouched
        assert all(getattr(o, n) == before[i][n] for n in NAMES if (i, n) not in last)
    swap.swap_out()
    assert [vars(o) for o in objs] == before and not swap.active
    swap.swap_out()  # a second swap_out changes nothing
    assert [vars(o) for o in objs] == before


def test_a_swap_in_over_a_swap_restores_the_first_and_missing_attributes_are_never_added() -> None:
    worker, runner = SimpleNamespace(speculative_num_steps=3), SimpleNamespace(attn_backend="verify")
    swap = AttrSwap()
    swap.swap_in([(worker, "speculative_num_steps", 0), (runner, "attn_backend", "one-token")])
    swap.swap_in([(runner, "attn_backend", "decode"), (runner, "graph_runner", "decode graphs")])
    assert worker.speculative_num_steps == 3 and runner.attn_backend == "decode"
    assert not hasattr(runner, "graph_runner")  # a release without it: skipped, not created
    swap.swap_out()
    assert runner.attn_backend == "verify" and vars(runner) == {"attn_backend": "verify"}


def test_swapped_restores_what_a_failing_build_changed() -> None:
    runner = SimpleNamespace(attn_backend="verify", graph_runner="launch graphs", spec_algorithm="EAGLE")
    with pytest.raises(RuntimeError, match="capture failed"):
        with swapped([(runner, "spec_algorithm", "NONE"), (runner, "attn_backend", KEEP),
                      (runner, "graph_runner", KEEP)]):
            assert runner.spec_algorithm == "NONE" and runner.attn_backend == "verify"
            runner.attn_backend = "decode"  # what building a backend leaves behind
            raise RuntimeError("capture failed")
    assert vars(runner) == {
        "attn_backend": "verify", "graph_runner": "launch graphs", "spec_algorithm": "EAGLE"
    }


def test_a_failing_assignment_leaves_nothing_swapped() -> None:
    class ReadOnly:
        __slots__ = ("x",)

        def __init__(self) -> None:
            self.x = 1

        @property
        def y(self) -> int:
            return 2

    ok, bad = SimpleNamespace(a=1), ReadOnly()
    swap = AttrSwap()
    with pytest.raises(AttributeError):
        swap.swap_in([(ok, "a", 5), (bad, "y", 7)])
    swap.swap_out()
    assert ok.a == 1 and bad.y == 2
