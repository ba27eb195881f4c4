"""The examples in docs/ run as written: the plugin recipe in writing-a-policy.md, a worked example in
choosing-a-policy.md."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from specpolicy import SpecMode, StepStats, make_policy

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_api_plugin_recipe_builds_a_working_policy() -> None:
    text = (DOCS / "guides" / "writing-a-policy.md").read_text()
    code = re.search(r"```python\n(# my_policies/__init__.py\n.*?)```", text, re.S)
    assert code, "the plugin example moved; update this test"
    ns: dict[str, Any] = {}
    exec(compile(code.group(1), "writing-a-policy.md", "exec", dont_inherit=True), ns)
    policy = ns["QueueAware"](ns["QueueAwareConfig"]())
    assert policy.decide(StepStats(8)) == SpecMode.on(3)
    assert policy.decide(StepStats(8, num_waiting=5)) == SpecMode.off()
    assert policy.decide(StepStats.fast(8, math.nan)) == SpecMode.on(3)  # type: ignore[arg-type]
    assert ns["ENTRY"].name == "queue_aware" and ns["QueueAwareConfig"]().candidate_steps() == (0, 3)


def test_acceptance_worked_example() -> None:
    """policies.md: start at 2; [3, 3, 2, 3] at depth 3 -> 4; zeros: 3, 3, 2, 2, 2, 2, 2, 1, then off;
    the 64th off step probes at depth 1."""
    p = make_policy("acceptance")
    assert p.decide(StepStats(4)) == SpecMode.on(2)
    assert p.decide(StepStats(4, last_num_steps=3, accepted_draft_tokens=[3, 3, 2, 3])) == SpecMode.on(4)
    zeros = StepStats(4, last_num_steps=3, accepted_draft_tokens=[0, 0, 0, 0])
    assert [p.decide(zeros).num_steps for _ in range(9)] == [3, 3, 2, 2, 2, 2, 2, 1, 0]
    assert [p.decide(StepStats(4)).num_steps for _ in range(63)] == [0] * 62 + [1]


def test_cost_model_md_step_costs_are_the_shipped_profiles() -> None:
    from specpolicy.profiles import load_profile

    text = (DOCS / "design" / "cost-model.md").read_text().replace("\n", " ")
    found = re.search(r"\(([\d.]+) vs ([\d.]+) ms target forward in the shipped `([\w-]+)` profile", text)
    assert found, "cost-model.md no longer quotes the profile's step costs; update this test"
    four, one, name = float(found.group(1)), float(found.group(2)), found.group(3)
    profile = load_profile(name)
    assert profile.target_s(128, 4, 1024) * 1e3 == pytest.approx(four, abs=0.05)
    assert profile.target_s(128, 1, 1024) * 1e3 == pytest.approx(one, abs=0.05)
