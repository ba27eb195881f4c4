"""Policy changes without a restart: the control file, its checks, refusals, metrics and trace lines."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Literal

import prometheus_client as prom
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy import SpecMode, StepStats
from specpolicy import registry as policy_mod
from specpolicy.cli import main
from specpolicy.errors import ConfigError
from specpolicy.policy import PolicyConfig, PolicyEntry
from specpolicy.registry import parse_config
from specpolicy.runtime.control_file import parse_control, read_control, write_control
from specpolicy.runtime.controller import StepController
from specpolicy.runtime.runtime import AdapterRuntime
from specpolicy.runtime.settings import AdapterSettings
from specpolicy.runtime.tp import AgreedDecider
from specpolicy.trace import iter_trace_lines, read_trace


def _runtime(
    ctl: Path, every: int = 4, policy: Any = None, registry: Any = None, **kw: Any
) -> AdapterRuntime:
    return AdapterRuntime(
        AdapterSettings.build(
            policy or {"name": "static", "num_steps": 3}, control_path=ctl, control_every=every, **kw
        ),
        engine="test",
        engine_version="0",
        path="unit",
        allowed_steps=range(8),
        default_steps=3,
        metrics_registry=registry,
    )


def _steps(rt: AdapterRuntime, n: int) -> list[int]:
    out = []
    for _ in range(n):
        step, k = rt.decide(rt.next_stats(4, 0, 100.0))
        rt.outcome(step, [1] * 4 if k else None, 0.01)
        out.append(k)
    return out


def _static(k: int) -> PolicyConfig:
    return parse_config({"name": "static", "num_steps": k})


def test_a_change_takes_effect_at_the_next_check_and_names_its_step(tmp_path: Path) -> None:
    ctl = tmp_path / "ctl.json"
    rt = _runtime(ctl, every=4)
    assert rt.control is not None
    assert _steps(rt, 6) == [3] * 6
    write_control(ctl, _static(1))
    # checks run before decisions 5, 9, 13...: written after decision 6, the policy changes at decision 9
    assert _steps(rt, 6) == [3, 3, 1, 1, 1, 1]
    assert rt.settings.policy == _static(1) and rt.controller.policy_name == "static"
    assert rt.control.swaps == 1 and rt.control.refused == 0
    assert rt.control.watch is not None and rt.control.watch.checks == 2 and rt.control.watch.reads == 1


def test_the_file_present_at_start_is_the_baseline_and_is_not_applied(tmp_path: Path) -> None:
    ctl = tmp_path / "ctl.json"
    write_control(ctl, _static(1))
    rt = _runtime(ctl, every=2)
    assert _steps(rt, 7) == [3] * 7  # checked before decisions 3, 5, 7: unchanged
    write_control(ctl, _static(2))
    assert _steps(rt, 4) == [3, 2, 2, 2]  # the next check, before decision 9


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"{not json", "not valid JSON"),
        (b'{"policy": {"name": "static", "num_steps": 99}}', "num_steps"),
        (b'{"policy": {"name": "no_such_policy"}}', "no_such_policy"),
        (b'{"policy": "static", "colour": 1}', "unknown key"),
        (b'{"format": "other/2", "policy": "static"}', "format"),
        (b'{"written_at": 1}', "policy: missing"),
        # a depth the engine did not pre-build (allowed 0..7 here)
        (b'{"policy": {"name": "static", "num_steps": 9}}', "only prepared"),
    ],
)
def test_a_bad_file_is_refused_with_its_reason_and_the_running_policy_stays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, reason: str
) -> None:
    ctl = tmp_path / "ctl.json"
    rt = _runtime(ctl, every=1)
    assert rt.control is not None
    _steps(rt, 2)
    with caplog.at_level(logging.ERROR, "specpolicy.adapter"):
        ctl.write_bytes(content)
        assert _steps(rt, 3) == [3, 3, 3]
    assert rt.control.refused == 1 and rt.control.swaps == 0
    assert rt.settings.policy == _static(3)
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1 and reason in refusals[0] and "static stays" in refusals[0]


def test_each_bad_version_is_counted_but_a_reason_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ctl = tmp_path / "ctl.json"
    rt = _runtime(ctl, every=1)
    assert rt.control is not None
    bad = b'{"policy": {"name": "static", "num_steps": -1}}'
    with caplog.at_level(logging.ERROR, "specpolicy.adapter"):
        for _ in range(3):
            ctl.unlink(missing_ok=True)
            _steps(rt, 1)
            ctl.write_bytes(bad)
            _steps(rt, 1)
        ctl.write_bytes(b"[]")  # another bad content: its own line
        _steps(rt, 1)
    assert rt.control.refused == 4
    assert sum("refused" in r.getMessage() for r in caplog.records) == 2
    write_control(ctl, _static(2))  # a good one after bad ones is still taken
    assert _steps(rt, 1) == [2]


def test_a_policy_asking_for_request_ids_is_refused_where_none_are_collected(tmp_path: Path) -> None:
    ctl = tmp_path / "ctl.json"
    rt = _runtime(ctl, every=1)
    assert rt.control is not None and not rt.wants_request_ids
    cm = parse_config("cost_model")
    if not cm.needs_request_ids():
        pytest.skip("no built-in policy reads request ids")
    write_control(ctl, cm)
    _steps(rt, 2)
    assert rt.control.refused == 1 and rt.settings.policy == _static(3)


def test_a_wrapped_runtime_maps_the_new_policys_depths(tmp_path: Path) -> None:
    """An engine with graphs for one depth: its wrapper maps a swapped-in policy as it maps the first."""
    from specpolicy.policies.compose import OnOffAtDepth

    ctl = tmp_path / "ctl.json"
    rt = AdapterRuntime(
        AdapterSettings.build({"name": "static", "num_steps": 3}, control_path=ctl, control_every=1),
        engine="test",
        engine_version="0",
        path="unit",
        allowed_steps=[0, 3],
        default_steps=3,
        wrap=lambda p: OnOffAtDepth(p, 3),
    )
    write_control(ctl, _static(5))
    assert _steps(rt, 2) == [3, 3]
    assert rt.control is not None and rt.control.swaps == 1
    write_control(ctl, parse_config({"name": "static", "num_steps": 0}))
    assert _steps(rt, 1) == [0]


class _RaisesConfig(PolicyConfig):
    name: Literal["raises_for_tests"] = "raises_for_tests"

    def candidate_steps(self) -> tuple[int, ...]:
        return (0, 3)


class _Raises:
    def __init__(self, config: _RaisesConfig) -> None:
        pass

    def decide(self, stats: StepStats) -> SpecMode:
        raise RuntimeError("this policy always fails")

    def reset(self) -> None:
        pass


class _FactoryFailsConfig(PolicyConfig):
    name: Literal["factory_fails_for_tests"] = "factory_fails_for_tests"

    def candidate_steps(self) -> tuple[int, ...]:
        return (3,)


def _factory_fails(config: _FactoryFailsConfig) -> Any:
    raise ValueError("cannot build")


@pytest.fixture
def test_policies() -> Any:
    entries = policy_mod._registry().entries
    entries["raises_for_tests"] = PolicyEntry("raises_for_tests", _RaisesConfig, _Raises)
    entries["factory_fails_for_tests"] = PolicyEntry(
        "factory_fails_for_tests", _FactoryFailsConfig, _factory_fails
    )
    yield
    entries.pop("raises_for_tests")
    entries.pop("factory_fails_for_tests")


def test_a_policy_that_raises_after_a_swap_is_contained(tmp_path: Path, test_policies: Any) -> None:
    ctl = tmp_path / "ctl.json"
    rt = _runtime(ctl, every=1, policy={"name": "static", "num_steps": 0})
    write_control(ctl, parse_config("raises_for_tests"))
    # checked before decision 2 (with every=1 the first check follows the first decision); from there the
    # engine default, every step
    assert _steps(rt, 4) == [0, 3, 3, 3]
    assert rt.controller.errors == 3 and rt.controller.first_error is not None
    assert "always fails" in rt.controller.first_error


def test_a_policy_whose_factory_fails_is_refused(tmp_path: Path, test_policies: Any) -> None:
    ctl = tmp_path / "ctl.json"
    rt = _runtime(ctl, every=1)
    write_control(ctl, parse_config("factory_fails_for_tests"))
    assert _steps(rt, 2) == [3, 3]
    assert rt.control is not None and rt.control.refused == 1


def test_swaps_and_refusals_reach_the_metrics_and_the_trace(tmp_path: Path) -> None:
    ctl, trace = tmp_path / "ctl.json", tmp_path / "trace.jsonl"
    reg = prom.CollectorRegistry()
    rt = _runtime(ctl, every=2, trace_path=trace, metrics=True, registry=reg)
    _steps(rt, 2)
    write_control(ctl, _static(1))
    _steps(rt, 2)  # swap before decision 3
    ctl.write_bytes(b"{}")
    _steps(rt, 2)  # refused before decision 5
    rt.close()
    labels = {"engine": "test", "rank": "0"}
    assert reg.get_sample_value("specpolicy_policy_swaps_total", labels) == 1
    assert reg.get_sample_value("specpolicy_policy_swaps_refused_total", labels) == 1
    events = [obj for _, obj in iter_trace_lines(trace) if obj.get("kind", "header") != "header"]
    assert [(e["kind"], e["step"]) for e in events] == [("policy_swap", 3), ("policy_swap_refused", 5)]
    assert events[0]["policy"] == {"name": "static", "num_steps": 1} and events[0]["previous"] == "static"
    assert "policy: missing" in events[1]["reason"]
    records = list(read_trace(trace))  # the event lines are no step records
    assert [r.num_steps for r in records] == [3, 3, 1, 1, 1, 1]


def test_a_hook_that_raises_is_contained_and_the_decision_goes_ahead() -> None:
    class Fixed:
        def decide(self, stats: StepStats) -> SpecMode:
            return SpecMode.on(2)

        def reset(self) -> None:
            pass

    c = StepController(Fixed(), allowed_steps=[0, 2, 3], default_steps=3)
    calls: list[int] = []

    def hook(step: int) -> None:
        calls.append(step)
        raise OSError("stat failed")

    c.watch(hook, 3)
    assert [c.decide(StepStats(1))[1] for _ in range(7)] == [2] * 7
    assert calls == [4, 7] and c.errors == 0


class _Wire:
    """An in-process broadcast group: rank 0 writes first each step, the others read."""

    def __init__(self) -> None:
        self.values: list[int] = []
        self.blobs: list[bytes] = []

    def member(self, rank: int) -> _Member:
        return _Member(self, rank)


class _Member:
    def __init__(self, wire: _Wire, rank: int) -> None:
        self.wire, self.rank, self.i, self.j = wire, rank, 0, 0

    def share(self, num_steps: int) -> int:
        if self.rank == 0:
            self.wire.values.append(num_steps)
        self.i += 1
        return self.wire.values[self.i - 1]

    def share_bytes(self, data: bytes | None) -> bytes:
        if self.rank == 0:
            assert data is not None
            self.wire.blobs.append(data)
        self.j += 1
        return self.wire.blobs[self.j - 1]


def _ranked(ctl: Path, wire: _Wire, rank: int, every: int, world: int = 2) -> AdapterRuntime:
    return AdapterRuntime(
        AdapterSettings.build({"name": "static", "num_steps": 3}, control_path=ctl, control_every=every),
        engine="test",
        engine_version="0",
        path="unit",
        allowed_steps=range(8),
        default_steps=3,
        rank=rank,
        world_size=world,
        sync_factory=lambda: wire.member(rank),
    )


def test_ranks_switch_at_the_same_step_even_when_only_rank0_sees_the_file(tmp_path: Path) -> None:
    ctl = tmp_path / "ctl.json"
    wire = _Wire()
    ranks = [_ranked(ctl, wire, r, every=3) for r in (0, 1)]
    assert isinstance(ranks[0].decide.__self__, AgreedDecider)  # type: ignore[attr-defined]
    depths: list[list[int]] = [[], []]
    for step in range(1, 13):
        if step == 5:
            write_control(ctl, _static(6))
        for r, rt in enumerate(ranks):
            depths[r].append(rt.decide(StepStats(4))[1])
    assert depths[0] == depths[1] == [3] * 6 + [6] * 6  # checks before decisions 4, 7, 10
    assert ranks[1].control is not None and ranks[1].control.watch is None  # rank 1 never reads the file
    assert ranks[1].settings.policy == _static(6) and ranks[1].control.swaps == 1


def test_local_agreement_over_several_ranks_does_not_watch(tmp_path: Path) -> None:
    rt = AdapterRuntime(
        AdapterSettings.build("static", control_path=tmp_path / "c.json", tp_agreement="local"),
        engine="test",
        engine_version="0",
        path="unit",
        allowed_steps=range(8),
        default_steps=3,
        world_size=2,
    )
    assert rt.control is None


def test_settings_name_the_field_and_its_range() -> None:
    with pytest.raises(ConfigError, match=r"control_every: must be from 1 to 1,000,000 \(got 0\)"):
        AdapterSettings.build("static", control_every=0)
    with pytest.raises(ConfigError, match=r"control_every: must be from 1 to 1,000,000 \(got 10000000\)"):
        AdapterSettings.build("static", control_every=10**7)
    with pytest.raises(ConfigError, match=r"control_every"):
        AdapterSettings.from_env({"SPECPOLICY_POLICY": "static", "SPECPOLICY_CONTROL_EVERY": "often"})
    s = AdapterSettings.from_env(
        {"SPECPOLICY_POLICY": "static", "SPECPOLICY_CONTROL": "/run/c.json", "SPECPOLICY_CONTROL_EVERY": "9"}
    )
    assert s is not None and str(s.control_path) == "/run/c.json" and s.control_every == 9
    assert AdapterSettings.from_env(s.to_env()) == s


def test_the_command_validates_writes_atomically_and_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ctl = tmp_path / "d" / "ctl.json"
    assert main(["control", "set", "--file", str(ctl), '{"name": "static", "num_steps": 2}']) == 0
    assert read_control(ctl) == _static(2)
    before = ctl.read_bytes()
    assert main(["control", "set", "--file", str(ctl), '{"name": "static", "num_steps": 999}']) == 1
    assert ctl.read_bytes() == before  # a bad policy leaves the file as it was
    assert "num_steps" in capsys.readouterr().err
    assert list(ctl.parent.iterdir()) == [ctl]  # no temporary file left behind
    assert main(["control", "show", "--file", str(ctl)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["num_steps"] == 2 and shown["candidate_steps"] == [2]
    ctl.write_text("{}")
    assert main(["control", "show", "--file", str(ctl)]) == 1


def test_parse_control_rejects_what_is_not_a_control_document() -> None:
    with pytest.raises(ConfigError, match="must be a JSON object"):
        parse_control(b'"static"')
    assert parse_control(b'{"policy": "static"}') == parse_config("static")
    with pytest.raises(ConfigError, match=r"policy\.static\.num_steps"):
        parse_control(b'{"policy": {"name": "static", "num_steps": 65}}')


@settings(max_examples=40, deadline=None)
@given(
    every=st.integers(1, 5),
    writes=st.lists(
        st.tuples(st.integers(1, 6), st.one_of(st.integers(0, 7), st.just(-1))), min_size=1, max_size=8
    ),
)
def test_every_step_runs_the_latest_valid_policy_seen_at_the_last_check(
    tmp_path_factory: pytest.TempPathFactory, every: int, writes: list[tuple[int, int]]
) -> None:
    """Writes (good depths, and -1: a bad file) at random steps: each decision runs the policy of the
    latest valid file seen at the latest check before it, or the start policy; never anything else."""
    ctl = tmp_path_factory.mktemp("ctl") / "ctl.json"
    rt = _runtime(ctl, every=every)
    expected_k, file_k, step = 3, None, 0
    for gap, k in writes:
        for _ in range(gap):
            step += 1
            if step > every and (step - 1) % every == 0:  # a check before this decision
                expected_k, file_k = (expected_k if file_k is None else file_k), None
            assert _steps(rt, 1) == [expected_k], (step, writes)
        if k >= 0:
            write_control(ctl, _static(k))
            file_k = k
        else:
            ctl.write_bytes(b'{"policy": {"name": "static", "num_steps": -1}}')
            file_k = None


@settings(max_examples=30, deadline=None)
@given(
    every=st.integers(1, 4),
    world=st.integers(2, 4),
    writes=st.lists(st.tuples(st.integers(1, 5), st.integers(-1, 7)), min_size=1, max_size=6),
)
def test_ranks_always_run_the_same_depth_and_switch_at_the_same_step(
    tmp_path_factory: pytest.TempPathFactory, every: int, world: int, writes: list[tuple[int, int]]
) -> None:
    """Whatever rank 0 reads (good depths, -1: a bad file) and whenever, every rank runs rank 0's depth
    and records each change at the step rank 0 made it."""
    ctl = tmp_path_factory.mktemp("ctl") / "ctl.json"
    wire = _Wire()
    ranks = [_ranked(ctl, wire, r, every=every, world=world) for r in range(world)]
    installed: list[list[tuple[int, str]]] = [[] for _ in ranks]
    for r, rt in enumerate(ranks):
        assert rt.control is not None
        install = rt.control.install

        def spy(config: Any, built: Any, step: int, source: str, r: int = r, install: Any = install) -> None:
            installed[r].append((step, json.dumps(config.model_dump(mode="json"))))
            install(config, built, step, source)

        rt.control.install = spy  # type: ignore[method-assign]
    for gap, k in writes:
        for _ in range(gap):
            depths = {rt.decide(StepStats(4))[1] for rt in ranks}
            assert len(depths) == 1
        if k >= 0:
            write_control(ctl, _static(k))
        else:
            ctl.write_bytes(b"{")
    assert all(seen == installed[0] for seen in installed)
    assert {rt.settings.policy for rt in ranks} == {ranks[0].settings.policy}
