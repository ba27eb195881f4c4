"""The vLLM adapter's start-up rules (settings sources, versions, engine configuration), without vLLM."""

from __future__ import annotations

import dataclasses
import json
import types

import pytest

from specpolicy import ConfigError
from specpolicy.adapters.vllm.checks import EngineFacts, check_engine, facts_from_vllm_config, preflight
from specpolicy.adapters.vllm.config import settings_from, uses_specpolicy_scheduler
from specpolicy.adapters.vllm.versions import UnsupportedVersion, check_version, version_key
from specpolicy.runtime.runtime import AdapterInstallError

FACTS = EngineFacts(
    version="0.33.0",
    method="eagle3",
    num_speculative_tokens=3,
    schedule=((1, 6, 3), (7, 7, 1), (8, 8, 0)),
    use_v2_model_runner=True,
    async_scheduling=True,
)


def test_settings_come_from_additional_config_before_the_environment() -> None:
    env = {"SPECPOLICY_POLICY": "static"}
    s = settings_from({"specpolicy": {"policy": {"name": "static", "num_steps": 1}}}, env)
    assert s is not None and s.policy.model_dump()["num_steps"] == 1
    s = settings_from({"other": 1}, env)
    assert s is not None and s.policy.model_dump()["num_steps"] == 3
    assert settings_from({}, {}) is None
    short = settings_from({"specpolicy": "static"}, {})
    assert short is not None and short.policy.name == "static"
    as_json = settings_from({"specpolicy": json.dumps({"policy": "static", "metrics": False})}, {})
    assert as_json is not None and as_json.metrics is False


@pytest.mark.parametrize(
    ("section", "text"),
    [
        (
            {"policy": {"name": "static", "num_steps": -1}},
            "additional_config.specpolicy.policy.static.num_steps",
        ),
        ({"policy": "static", "tp_agreement": "x"}, "additional_config.specpolicy.tp_agreement"),
        (["static"], "additional_config.specpolicy: must be an object"),
        ("{not json", "additional_config.specpolicy: not valid JSON"),
    ],
)
def test_bad_settings_name_the_field(section: object, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        settings_from({"specpolicy": section}, {})
    assert text in str(info.value)


def test_bad_environment_names_the_variable_and_field() -> None:
    with pytest.raises(ConfigError, match=r"(?s)SPECPOLICY_POLICY.*static\.num_steps"):
        settings_from({}, {"SPECPOLICY_POLICY": '{"name": "static", "num_steps": 100}'})


def test_scheduler_cls_recognition() -> None:
    assert uses_specpolicy_scheduler("specpolicy.adapters.vllm.Scheduler")
    assert uses_specpolicy_scheduler(" specpolicy.adapters.vllm.PolicyAsyncScheduler")
    assert not uses_specpolicy_scheduler(None)
    assert not uses_specpolicy_scheduler("vllm.v1.core.sched.scheduler.Scheduler")
    fake = type("X", (), {"__module__": "specpolicy.adapters.vllm.scheduler"})
    assert uses_specpolicy_scheduler(fake)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("0.33.0", (0, 33, 0)),
        ("0.24.1rc2", (0, 24, 1)),
        ("v1.2", (1, 2, 0)),
        ("0.34.0.dev3+gabc", (0, 34, 0)),
    ],
)
def test_version_key(text: str, key: tuple[int, int, int]) -> None:
    assert version_key(text) == key


def test_versions() -> None:
    assert check_version("0.33.0") == "0.33.0"
    assert check_version("0.26.0") == "0.26.0"
    with pytest.raises(UnsupportedVersion, match="vLLM is not installed"):
        check_version(None, allow_untested=True)
    with pytest.raises(UnsupportedVersion, match="tested with vLLM 0.26.0, 0.33.0"):
        check_version("0.32.0")
    with pytest.raises(UnsupportedVersion, match="tested with"):
        check_version("0.25.1")
    assert check_version("0.32.0", allow_untested=True) == "0.32.0"
    assert check_version("0.24.0", allow_untested=True) == "0.24.0"
    with pytest.raises(UnsupportedVersion, match="predates"):
        check_version("0.23.0", allow_untested=True)
    with pytest.raises(UnsupportedVersion, match="predates"):
        check_version("nightly", allow_untested=True)


def test_a_v2_runner_that_drafts_every_token_is_refused_sync_and_warned_async() -> None:
    """0.26's V2 model runner drafts num_speculative_tokens whatever the depth (versions.RELEASES), except
    with the autoregressive drafters the adapter's hook drives (drafter_depth.METHODS)."""
    hooked = dataclasses.replace(FACTS, version="0.26.0")
    assert check_engine(hooked, [0, 1, 3]) == []
    assert check_engine(dataclasses.replace(hooked, async_scheduling=False), [0, 1, 3]) == []
    old = dataclasses.replace(hooked, method="dflash")  # a parallel drafter: one pass drafts all K
    (warning,) = check_engine(old, [0, 1, 3])
    assert "saves verification, not drafting" in warning and "VLLM_USE_V2_MODEL_RUNNER=0" in warning
    with pytest.raises(AdapterInstallError, match="depth would be ignored"):
        check_engine(dataclasses.replace(old, async_scheduling=False), [0, 1, 3])
    v1 = dataclasses.replace(old, use_v2_model_runner=False, async_scheduling=False)
    assert check_engine(v1, [0, 1, 3]) == []
    # the rule is the 0.26 row's, not a blanket one: 0.33 and untested releases are not touched by it
    assert check_engine(dataclasses.replace(FACTS, async_scheduling=False), [0, 1, 3]) == []
    assert check_engine(dataclasses.replace(old, version="0.25.1"), [0, 1, 3]) == []


def test_a_well_formed_engine_passes_and_uncaptured_depths_warn() -> None:
    assert check_engine(FACTS, [0, 1, 3]) == []
    warnings = check_engine(FACTS, [0, 2, 3])
    assert len(warnings) == 1 and "depth(s) [2]" in warnings[0] and "FULL CUDA graphs" in warnings[0]
    pp = check_engine(dataclasses.replace(FACTS, pipeline_parallel_size=2), [0, 3])
    assert len(pp) == 1 and "pipeline parallelism" in pp[0]


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"method": None, "num_speculative_tokens": 0}, "no speculative decoding"),
        ({"data_parallel_size": 2}, "data_parallel_size=2"),
        ({"data_parallel_size": 2, "schedule": None}, "data_parallel_size=2"),  # vLLM dropped it: say why
        ({"method": "ngram_gpu"}, "fixed K"),
        ({"method": "custom_class"}, "custom proposer"),
        ({"schedule": None}, "num_speculative_tokens_per_batch_size is not set"),
        ({"schedule": None, "use_v2_model_runner": False, "method": "suffix"}, "V1 model runner"),
    ],
)
def test_engine_configurations_the_policy_cannot_run_in(change: dict[str, object], text: str) -> None:
    with pytest.raises(AdapterInstallError, match=text):
        check_engine(dataclasses.replace(FACTS, **change), [0, 3])  # type: ignore[arg-type]


def test_depths_beyond_num_speculative_tokens_are_refused() -> None:
    with pytest.raises(AdapterInstallError, match=r"depth\(s\) \[4, 5\]"):
        check_engine(FACTS, [0, 4, 5])


def _vllm_config(additional_config: object, dp: int = 1, schedule: object = ((1, 8, 3),)) -> object:
    ns = types.SimpleNamespace
    return ns(
        additional_config=additional_config,
        speculative_config=ns(
            method="eagle3", num_speculative_tokens=3, num_speculative_tokens_per_batch_size=schedule
        ),
        parallel_config=ns(data_parallel_size=dp, tensor_parallel_size=2, pipeline_parallel_size=1),
        scheduler_config=ns(async_scheduling=True, max_num_seqs=8),
        use_v2_model_runner=True,
    )


def test_facts_and_preflight_from_a_config_object() -> None:
    cfg = _vllm_config({"specpolicy": {"policy": {"name": "static", "num_steps": 2}}})
    facts = facts_from_vllm_config(cfg, "0.33.0")
    assert facts.schedule == ((1, 8, 3),) and facts.tensor_parallel_size == 2
    assert facts.path() == (
        "MRV2 async-scheduler cudagraphs=unknown method=eagle3 num_speculative_tokens=3 tp=2 pp=1 dp=1"
    )
    graphs = dataclasses.replace(facts, cudagraph_mode="FULL_AND_PIECEWISE")
    assert graphs.path().startswith("MRV2 async-scheduler cudagraphs=FULL_AND_PIECEWISE method=eagle3 ")
    pre = preflight(cfg, "0.33.0")
    assert pre is not None and pre.warnings and "depth(s) [2]" in pre.warnings[0]


def test_preflight_refuses_or_warns_as_the_settings_say(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECPOLICY_CONFIG", raising=False)
    monkeypatch.delenv("SPECPOLICY_POLICY", raising=False)
    refuse = _vllm_config({"specpolicy": {"policy": "static"}}, dp=2)
    with pytest.raises(AdapterInstallError, match="data parallelism"):
        preflight(refuse, "0.33.0")
    warn = _vllm_config({"specpolicy": {"policy": "static", "on_install_failure": "warn"}}, dp=2)
    assert preflight(warn, "0.33.0") is None
    with pytest.raises(ConfigError, match="missing"):
        preflight(_vllm_config({}), "0.33.0")


def test_a_v1_runner_held_to_piecewise_graphs_warns_that_depth_0_is_not_free() -> None:
    """vLLM's V1 runner drops full CUDA graphs for a per-step speculative length (measured live: depth 0 at
    0.28-0.56x a speculation-free engine); the warning names the cause only where it applies."""
    v1 = dataclasses.replace(FACTS, version="0.26.0", use_v2_model_runner=False, async_scheduling=False)
    (warning,) = check_engine(dataclasses.replace(v1, cudagraph_mode="PIECEWISE"), [0, 1, 3])
    assert "piecewise CUDA graphs" in warning and "VLLM_USE_V2_MODEL_RUNNER=1" in warning
    assert check_engine(dataclasses.replace(v1, cudagraph_mode="PIECEWISE"), [1, 3]) == []  # never off
    assert check_engine(dataclasses.replace(v1, cudagraph_mode="FULL_AND_PIECEWISE"), [0, 1, 3]) == []
    assert check_engine(dataclasses.replace(v1, cudagraph_mode="NONE"), [0, 1, 3]) == []  # eager, chosen
    assert check_engine(dataclasses.replace(FACTS, cudagraph_mode="PIECEWISE"), [0, 1, 3]) == []  # V2


def test_facts_read_the_cudagraph_mode_by_name() -> None:
    mode = types.SimpleNamespace(name="PIECEWISE")
    cfg = _vllm_config({"specpolicy": "static"})
    cfg.compilation_config = types.SimpleNamespace(cudagraph_mode=mode)
    assert facts_from_vllm_config(cfg, "0.33.0").cudagraph_mode == "PIECEWISE"
    del cfg.compilation_config
    assert facts_from_vllm_config(cfg, "0.33.0").cudagraph_mode is None


def test_a_v2_runner_without_a_graph_table_per_depth_warns_that_some_depth_0_steps_run_eagerly() -> None:
    """0.26's V2 runner finds decode graphs by token count first (tests/engines/vllm/test_mrv2_graphs.py shows
    the eager depth-0 batches); 0.33 and 0.34 keep a table per depth, and without depth 0 nothing applies."""
    old = dataclasses.replace(FACTS, version="0.26.0", cudagraph_mode="FULL_AND_PIECEWISE")
    warnings = check_engine(old, [0, 1, 3])
    assert any("depth-0 step" in w and "runs without a graph" in w for w in warnings), warnings
    assert not any("depth-0 step" in w for w in check_engine(old, [1, 3]))
    assert not any(
        "depth-0 step" in w for w in check_engine(dataclasses.replace(old, cudagraph_mode="NONE"), [0, 3])
    )
    for version in ("0.33.0", "0.34.0"):
        new = dataclasses.replace(old, version=version)
        assert not any("depth-0 step" in w for w in check_engine(new, [0, 1, 3]))
