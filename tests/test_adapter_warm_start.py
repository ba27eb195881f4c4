"""The warm start: the runtime saves its policy's state periodically and at shutdown, and a runtime of the
same deployment starts from it; any other file is reported, counted and ignored, never fatal."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from specpolicy.errors import ConfigError
from specpolicy.registry import make_policy, parse_config
from specpolicy.runtime.decision import StepRecord
from specpolicy.runtime.runtime import AdapterRuntime
from specpolicy.runtime.settings import ENV_POLICY, ENV_VARS, AdapterSettings
from specpolicy.runtime.warm_start import FILE_FORMAT, WarmStart
from specpolicy.stats import StepStats

POLICY = {"name": "cost_model"}


def _runtime(path: Path, every: int = 4096, tp_agreement: str = "auto", **kw: Any) -> AdapterRuntime:
    settings = AdapterSettings.build(
        POLICY, metrics=False, warm_start_path=path, warm_start_every=every, tp_agreement=tp_agreement
    )
    args: dict[str, Any] = {"engine": "sglang", "engine_version": "0.5.17", "path": "p", "model": "m"}
    args.update(kw)
    return AdapterRuntime(settings, allowed_steps=range(8), default_steps=3, drafter="d", **args)


def _serve(rt: AdapterRuntime, steps: int, batch: int = 2) -> list[int]:
    out = []
    for i in range(steps):
        ids = [i // 5 + j for j in range(batch)]
        step, k = rt.decide(rt.next_stats(batch, 0, 500.0, ids))
        out.append(k)
        rt.outcome(step, [min(k, 2)] * batch if k else None, 0.010 + 0.001 * k, request_ids=ids)
    return out


def _state(rt: AdapterRuntime) -> Any:
    return json.loads(json.dumps(rt.policy.state_dict()))  # type: ignore[attr-defined]


def test_a_restart_continues_from_the_saved_state(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    first = _runtime(path)
    assert first.warm_start is not None and first.warm_start.counts == {"warm_start_ignored_missing": 1}
    _serve(first, 300)
    first.close()
    saved = json.loads(path.read_text())
    assert saved["format"] == FILE_FORMAT and saved["step"] == 300
    assert saved["state"] == _state(first)

    second = _runtime(path)
    assert second.warm_start is not None and second.warm_start.counts == {"warm_start_loaded": 1}
    assert _state(second) == _state(first)
    # from here on it decides as the first one would have
    assert _serve(second, 200) == _serve(first, 200)
    assert not list(tmp_path.glob(".*tmp"))  # nothing left of the atomic writes


def test_the_state_is_saved_every_n_steps(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "state.json"  # the folder is made
    rt = _runtime(path, every=32)
    _serve(rt, 100)
    assert rt.warm_start is not None and rt.warm_start.counts["warm_start_saves"] == 3  # steps 32, 64, 96
    assert json.loads(path.read_text())["step"] == 96
    rt.close()
    assert rt.warm_start.counts["warm_start_saves"] == 4


def _ignored(path: Path, caplog: pytest.LogCaptureFixture, **kw: Any) -> tuple[str, str]:
    """(the count, the logged line) of a runtime that does not load ``path``; its policy starts cold."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="specpolicy.adapter"):
        rt = _runtime(path, **kw)
    assert rt.warm_start is not None
    cold = make_policy(parse_config(POLICY))
    assert _state(rt) == json.loads(json.dumps(cold.state_dict()))  # type: ignore[attr-defined]
    lines = [r.getMessage() for r in caplog.records if "warm start" in r.getMessage()]
    assert len(lines) == 1, lines
    (count,) = rt.warm_start.counts
    return count, lines[0]


def _saved(path: Path) -> dict[str, Any]:
    rt = _runtime(path)
    _serve(rt, 150)
    rt.close()
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_a_missing_corrupt_or_foreign_file_is_reported_once_and_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.json"
    count, line = _ignored(path, caplog)
    assert count == "warm_start_ignored_missing" and "no state saved yet" in line
    good = _saved(path)

    path.write_text(json.dumps(good)[:-20])
    count, line = _ignored(path, caplog)
    assert count == "warm_start_ignored_corrupt" and "not JSON" in line

    path.write_text(json.dumps({**good, "format": "other"}))
    assert _ignored(path, caplog)[0] == "warm_start_ignored_corrupt"

    bad = json.loads(json.dumps(good))
    bad["state"]["state"]["$o"]["cur"] = 99
    path.write_text(json.dumps(bad))
    count, line = _ignored(path, caplog)
    assert count == "warm_start_ignored_corrupt" and "state.cur" in line

    path.write_text(json.dumps(good))
    count, line = _ignored(path, caplog, engine_version="0.5.23")
    assert count == "warm_start_ignored_mismatch" and "engine_version" in line and "0.5.17" in line
    count, line = _ignored(path, caplog, model="other-model")
    assert count == "warm_start_ignored_mismatch" and "model" in line

    path.write_text(json.dumps({**good, "version": 99}))
    assert _ignored(path, caplog)[0] == "warm_start_ignored_mismatch"


def test_a_state_of_another_policy_config_is_a_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    _saved(path)
    settings = AdapterSettings.build(
        {"name": "cost_model", "switch_margin": 0.2}, metrics=False, warm_start_path=path
    )
    rt = AdapterRuntime(
        settings, engine="sglang", engine_version="0.5.17", path="p", allowed_steps=range(8), default_steps=3,
        model="m", drafter="d",
    )  # fmt: skip
    assert rt.warm_start is not None and rt.warm_start.counts == {"warm_start_ignored_mismatch": 1}
    assert rt.warm_start.reason is not None and "policy" in rt.warm_start.reason


def test_a_policy_changed_while_running_saves_under_its_own_config(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    rt = _runtime(path)
    _serve(rt, 50)
    new = parse_config({"name": "cost_model", "switch_margin": 0.2})
    rt.policy = make_policy(new)  # what a control-file change installs
    rt.settings = rt.settings.model_copy(update={"policy": new})
    _serve(rt, 50)
    rt.close()
    assert json.loads(path.read_text())["fingerprint"]["policy"]["switch_margin"] == 0.2
    settings = AdapterSettings.build(new, metrics=False, warm_start_path=path)
    again = AdapterRuntime(
        settings, engine="sglang", engine_version="0.5.17", path="p", allowed_steps=range(8), default_steps=3,
        model="m", drafter="d",
    )  # fmt: skip
    assert again.warm_start is not None and again.warm_start.counts == {"warm_start_loaded": 1}


def test_a_stale_file_is_not_loaded(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    _saved(path)
    saved_at = json.loads(path.read_text())["saved_at"]
    policy = make_policy(parse_config(POLICY))
    fingerprint = json.loads(path.read_text())["fingerprint"]

    def warm(age: float) -> WarmStart:
        return WarmStart(
            path,
            lambda: policy,
            lambda: fingerprint,
            every=64,
            max_age_s=3600.0,
            clock=lambda: saved_at + age,
        )

    assert warm(3599.0).load()
    stale = warm(3601.0)
    assert not stale.load() and stale.counts == {"warm_start_ignored_stale": 1}
    future = warm(-86_400.0)
    assert not future.load() and future.counts == {"warm_start_ignored_corrupt": 1}


def test_a_failing_save_is_counted_and_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.json"
    path.mkdir()  # a folder where the file should be: every save fails
    rt = _runtime(path, every=16)
    with caplog.at_level(logging.WARNING, logger="specpolicy.adapter"):
        _serve(rt, 100)
        rt.close()
    assert rt.warm_start is not None and rt.warm_start.counts["warm_start_save_failures"] == 7
    assert len([r for r in caplog.records if "cannot save the warm-start state" in r.getMessage()]) == 1


def test_the_counts_reach_the_metrics(tmp_path: Path) -> None:
    prom = pytest.importorskip("prometheus_client")
    path = tmp_path / "state.json"
    settings = AdapterSettings.build(POLICY, warm_start_path=path, warm_start_every=16)
    rt = AdapterRuntime(
        settings, engine="e", engine_version="1", path="p", allowed_steps=range(8), default_steps=3,
        metrics_registry=prom.CollectorRegistry(), engine_counts=lambda: {"forced_steps": 2},
    )  # fmt: skip
    _serve(rt, 40)
    assert rt.metrics is not None and rt.metrics.engine_counts is not None
    counts = rt.metrics.engine_counts()
    assert counts == {"forced_steps": 2, "warm_start_ignored_missing": 1, "warm_start_saves": 2}
    rt.close()


def test_every_rank_loads_rank_0s_file_and_only_rank_0_writes(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    first = _runtime(path, every=16, tp_agreement="local", world_size=2)  # rank 0 of 2
    _serve(first, 40)
    first.close()
    before = path.read_text()
    other = _runtime(path, every=16, tp_agreement="local", world_size=2, rank=1)
    assert other.warm_start is not None and other.warm_start.counts == {"warm_start_loaded": 1}
    assert _state(other) == _state(first)
    _serve(other, 40)
    other.close()
    assert path.read_text() == before  # rank 1 never writes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_an_observer_record_before_the_first_interval_saves_nothing(tmp_path: Path) -> None:
    policy = make_policy(parse_config(POLICY))
    warm = WarmStart(tmp_path / "s.json", lambda: policy, dict, every=64, max_age_s=60.0)
    warm.on_record(StepRecord(63, StepStats(1), 3, 0.0, False, 0.0))
    assert warm.counts == {} and not (tmp_path / "s.json").exists()
    warm.on_record(StepRecord(64, StepStats(1), 3, 0.0, False, 0.0))
    assert warm.counts == {"warm_start_saves": 1}


def test_warm_start_settings_from_the_environment_and_their_bounds(tmp_path: Path) -> None:
    env = {
        ENV_POLICY: "cost_model",
        ENV_VARS["warm_start_path"]: str(tmp_path / "s.json"),
        ENV_VARS["warm_start_every"]: "512",
        ENV_VARS["warm_start_max_age_s"]: "60",
    }
    s = AdapterSettings.from_env(env)
    assert s is not None
    assert (s.warm_start_path, s.warm_start_every, s.warm_start_max_age_s) == (tmp_path / "s.json", 512, 60.0)
    assert AdapterSettings.from_env(s.to_env()) == s
    assert "warm_start=" in s.summary()
    with pytest.raises(ConfigError, match=r"warm_start_every.*16"):
        AdapterSettings.from_env({**env, ENV_VARS["warm_start_every"]: "3"})
    with pytest.raises(ConfigError, match=r"warm_start_max_age_s"):
        AdapterSettings.build("cost_model", warm_start_max_age_s=0)
    assert AdapterSettings.build("cost_model").warm_start_path is None
