"""Contract: what the v2 route relies on in SGLang 0.5.23's AdaptiveController, worker and scheduler, beyond
the names in the release's hook table (``test_release_row`` resolves those).

If an SGLang release renames or reshapes one of these, this file fails before any server does.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from conftest import requires_version

pytestmark = requires_version("0.5.23")


def _params(obj: object) -> list[str]:
    return list(inspect.signature(obj).parameters)  # type: ignore[arg-type]


def test_adaptive_policy_protocol_is_what_the_bridge_implements() -> None:
    from sglang.srt.speculative.adaptive_runtime_state import AdaptiveSpecPolicy

    from specpolicy.adapters.sglang.adaptive import SpecPolicyParams

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
    # the states built are the params' candidate steps (the bridge's: the policy's speculative depths and
    # the launch depth, never 0), read when init_states runs, after the bridge took the params slot
    assert "return self.params.candidate_steps" in inspect.getsource(AdaptiveController.candidate_steps.fget)
    init = inspect.getsource(AdaptiveController.init_states)
    assert "for steps in self.candidate_steps:" in init and "build_adaptive_runtime_state(" in init


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
    # the controller's states are built in init_cuda_graphs (wrapped: the bridge is in place before it)
    assert "self.adaptive_controller.init_states(" in inspect.getsource(EAGLEWorkerV2.init_cuda_graphs)
    fwd = inspect.getsource(EAGLEWorkerV2.forward_batch_generation)
    # SGLang's own decode step applies the depth before drafting: the route's wrapper has decided by then,
    # and a depth-0 step never reaches it (SGLang's trivial verify is not run)
    assert fwd.index("self.activate_step_by_batch(") < fwd.index("self.draft_worker.draft(batch)")
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


def test_the_launchers_reading_of_an_adaptive_config_is_sglangs(tmp_path: Path) -> None:
    """``launch._config_steps`` repeats SGLang's rule (the launcher must not import SGLang early)."""
    from sglang.srt.speculative import adaptive_spec_params as asp

    from specpolicy.adapters.sglang import launch

    assert _params(asp.resolve_candidate_steps_from_config) == ["cfg_path"]
    cfg = tmp_path / "a.json"
    cfg.write_text(json.dumps({"1": {"candidate_steps": [0, 3]}, "16": {"candidate_steps": [1]}, "x": 2}))
    assert launch._config_steps(str(cfg)) == asp.resolve_candidate_steps_from_config(str(cfg)) == [0, 1, 3]


@pytest.mark.parametrize("req_attr", ["seqlen"])
def test_request_exposes_context_length_on_cpu(req_attr: str) -> None:
    from sglang.srt.managers.schedule_batch import Req

    assert isinstance(inspect.getattr_static(Req, req_attr), property)
