"""Contract: every SGLang attribute the 0.5.23 route hooks or calls exists, with the signature it expects.

If an SGLang release renames or reshapes one of these, this file fails before any server does.
"""

from __future__ import annotations

import inspect
import pkgutil

import pytest
from conftest import requires_version

pytestmark = requires_version("0.5.23")


def _params(obj: object) -> list[str]:
    return list(inspect.signature(obj).parameters)  # type: ignore[arg-type]


def test_every_hook_target_resolves() -> None:
    from specpolicy.adapters.sglang.v0_5_23 import HOOK_TARGETS

    for target in HOOK_TARGETS:
        owner, attr = target.rsplit(".", 1)
        assert hasattr(pkgutil.resolve_name(owner), attr), target


def test_adaptive_policy_protocol_is_what_the_bridge_implements() -> None:
    from sglang.srt.speculative.adaptive_runtime_state import AdaptiveSpecPolicy

    from specpolicy.adapters.sglang.v0_5_23 import SpecPolicyParams

    members = {n for n in vars(AdaptiveSpecPolicy) if not n.startswith("_")}
    assert members == {
        "candidate_steps",
        "set_cuda_graph_bs",
        "get_steps_for_batch",
        "on_verify_complete",
        "cuda_graph_bs_for_step",
    }
    for name in members - {"candidate_steps"}:
        assert _params(getattr(AdaptiveSpecPolicy, name)) == _params(getattr(SpecPolicyParams, name)), name
    assert isinstance(inspect.getattr_static(SpecPolicyParams, "candidate_steps"), property)


def test_controller_calls_the_policy_where_the_bridge_expects() -> None:
    from sglang.srt.speculative.adaptive_runtime_state import AdaptiveController

    assert _params(AdaptiveController.__init__) == ["self", "worker", "policy"]
    assert _params(AdaptiveController.activate_step_by_batch) == ["self", "batch_size"]
    assert _params(AdaptiveController.on_verify_complete) == [
        "self",
        "num_correct_drafts_per_req",
        "batch_size",
    ]
    src = inspect.getsource(AdaptiveController)
    assert "self.params.get_steps_for_batch(batch_size)" in src
    assert "self.params = policy" in src or "self.params: AdaptiveSpecPolicy = policy" in src


def test_worker_hooks_and_decision_point() -> None:
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    assert _params(EAGLEWorkerV2.__init__)[:5] == [
        "self",
        "server_args",
        "gpu_id",
        "nccl_port",
        "target_worker",
    ]
    src = inspect.getsource(EAGLEWorkerV2.__init__)
    assert "self.adaptive_controller" in src and "AdaptiveController(" in src
    fwd = inspect.getsource(EAGLEWorkerV2.forward_batch_generation)
    # the decision is applied before drafting, and steps=0 has the trivial verify path
    assert fwd.index("self.activate_step_by_batch(") < fwd.index("self.draft_worker.draft(batch)")
    assert "_build_trivial_verify_input" in fwd
    assert _params(EAGLEWorkerV2.on_verify_complete_cpu) == [
        "self",
        "num_correct_drafts_per_req",
        "batch_size",
    ]


def test_scheduler_feeds_acceptance_from_cpu_and_run_batch_takes_the_batch() -> None:
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor

    assert _params(Scheduler.run_batch)[:2] == ["self", "batch"]
    src = inspect.getsource(SchedulerBatchResultProcessor._resolve_spec_v2_tokens)
    assert "assert result.accept_lens.is_cpu" in src
    assert "self.model_worker.on_verify_complete_cpu(" in src


def test_adaptive_config_helpers() -> None:
    from sglang.srt.speculative import adaptive_spec_params as asp

    assert _params(asp.resolve_candidate_steps_from_config) == ["cfg_path"]
    assert _params(asp.adaptive_unsupported_reason) == ["server_args"]
    assert _params(asp.AdaptiveSpeculativeParams.__init__) == ["self", "initial_steps", "cfg_path"]


@pytest.mark.parametrize("req_attr", ["seqlen"])
def test_request_exposes_context_length_on_cpu(req_attr: str) -> None:
    from sglang.srt.managers.schedule_batch import Req

    assert isinstance(inspect.getattr_static(Req, req_attr), property)


def test_hook_registry_api() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    assert {"BEFORE", "AFTER"} <= set(HookType.__members__)
    assert _params(HookRegistry.register)[:3] == ["target", "hook", "hook_type"]
