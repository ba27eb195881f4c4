"""The scheduler's per-step depth reaching the V2 runner's drafter (``drafter_depth``), on vLLM's own classes.

The drafter is vLLM's ``EagleSpeculator`` built by the release's ``init_speculator`` from an EAGLE-3 engine
configuration; the batches are vLLM's ``InputBatch.make_dummy`` over the speculator's own buffers; the
depth comes in vLLM's ``SchedulerOutput``; the drafts leave through vLLM's ``DraftTokensHandler``. Only what
cannot run on a CPU is replaced: the three Triton kernels ``propose`` launches (``prepare_prefill_inputs``,
``prepare_decode_inputs``, ``update_draft_inputs``) by the few tensor writes of theirs that the draft
loop's outcome depends on, and the draft model (no weights here) by one that counts its forwards and
proposes a token that names the forward.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _vllm_harness import K_MAX, VERSION, FakeRunner, add_request, build_scheduler, use_model_runner

from specpolicy.adapters import _patch
from specpolicy.adapters.vllm import drafter_depth, runner_hooks

pytestmark = pytest.mark.skipif(
    not drafter_depth.needed(VERSION), reason=f"vLLM {VERSION}'s V2 drafter takes the per-step depth itself"
)

N_REQS = 3
FIRST_TOKEN = 100  # the draft model proposes FIRST_TOKEN + the number of its forward in the step


class CountingDraftModel:
    """Stands in for the EAGLE-3 head: counts forwards, proposes FIRST_TOKEN + the forward's number."""

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab
        self.forwards = 0

    def __call__(self, input_ids: Any, positions: Any, hidden_states: Any, inputs_embeds: Any = None) -> Any:
        self.forwards += 1
        return hidden_states + 1

    def compute_logits(self, hidden_states: Any) -> Any:
        import torch

        logits = torch.zeros(hidden_states.shape[0], self.vocab)
        logits[:, FIRST_TOKEN + self.forwards - 1] = 1.0
        return logits


def _prepare_prefill_inputs(
    last_token_indices: Any,
    current_draft_step: Any,
    input_buffers: Any,
    input_batch: Any,
    num_sampled: Any,
    num_rejected: Any,
    last_sampled: Any,
    next_prefill_tokens: Any,
    max_num_reqs: int,
) -> None:
    n = input_batch.num_reqs
    last_token_indices[:n] = input_batch.query_start_loc[1 : n + 1] - 1 - num_rejected[:n]
    current_draft_step.zero_()


def _prepare_decode_inputs(
    draft_tokens: Any, target_seq_lens: Any, num_rejected: Any, input_buffers: Any, *args: Any, **kwargs: Any
) -> None:
    input_buffers.input_ids[: draft_tokens.shape[0]] = draft_tokens


def _update_draft_inputs(
    draft_tokens: Any,
    current_draft_step: Any,
    hidden_states: Any,
    output_draft_tokens: Any,
    next_input_hidden_states: Any,
    input_buffers: Any,
    num_reqs: int,
    max_model_len: int,
    num_speculative_steps: int,
    advance_draft_positions: bool = True,
) -> None:
    step = int(current_draft_step)
    output_draft_tokens[:num_reqs, step] = draft_tokens
    if step < num_speculative_steps - 1:
        input_buffers.input_ids[:num_reqs] = draft_tokens
        next_input_hidden_states[:num_reqs] = hidden_states[:num_reqs]
        input_buffers.positions[:num_reqs] += 1


@pytest.fixture
def vllm_config(make_config: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    use_model_runner(monkeypatch, "MRV2")
    return make_config(async_scheduling=True)


@pytest.fixture
def speculator(vllm_config: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.v1.worker.gpu.spec_decode import init_speculator
    from vllm.v1.worker.gpu.spec_decode.autoregressive import speculator as ar

    monkeypatch.setattr(ar, "prepare_prefill_inputs", _prepare_prefill_inputs)
    monkeypatch.setattr(ar, "prepare_decode_inputs", _prepare_decode_inputs)
    monkeypatch.setattr(ar, "update_draft_inputs", _update_draft_inputs)
    with set_current_vllm_config(vllm_config):
        spec = init_speculator(vllm_config, torch.device("cpu"))
        assert isinstance(spec, ar.AutoRegressiveSpeculator) and spec.num_speculative_steps == K_MAX
        spec.model = CountingDraftModel(spec.vocab_size)
        yield spec


@pytest.fixture
def hooked() -> Iterator[list[str]]:
    """The hooks installed as the plugin installs them; every original restored afterwards."""
    try:
        yield runner_hooks.install(VERSION)
    finally:
        _patch.unwrap_all()


@pytest.fixture
def unhooked() -> None:
    """vLLM's own methods (building an engine configuration loads the plugins, which install the hook)."""
    _patch.unwrap_all()


def runner_for(vllm_config: Any, speculator: Any) -> Any:
    """vLLM's GPUModelRunner with the parts the hook touches: its config, speculator and draft handler
    (built without ``__init__``, which needs CUDA streams)."""
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner
    from vllm.v1.worker.gpu.spec_decode.utils import DraftTokensHandler

    runner = object.__new__(GPUModelRunner)
    runner.vllm_config = vllm_config
    runner.speculator = speculator
    handler = object.__new__(DraftTokensHandler)
    handler.device = None
    handler.req_ids = []
    handler.draft_tokens_np = None
    handler.num_draft_tokens = 0
    runner.draft_tokens_handler = handler
    return runner


def step_output(depth: int) -> Any:
    from vllm.v1.core.sched.output import SchedulerOutput

    so = SchedulerOutput.make_empty()
    so.num_spec_tokens_to_schedule = depth
    return so


def propose(speculator: Any) -> tuple[int, list[list[int]]]:
    """One ``propose`` over a decode batch of N_REQS requests: (drafter forwards, drafts per request)."""
    import torch
    from vllm.v1.worker.gpu.input_batch import InputBatch

    batch = InputBatch.make_dummy(N_REQS, N_REQS, speculator.input_buffers)
    ones = torch.ones(N_REQS, dtype=torch.int32)
    speculator.model.forwards = 0
    drafts = speculator.propose(
        batch,
        None,
        None,
        torch.zeros(N_REQS, speculator.hidden_size),
        None,
        ones,
        torch.zeros(N_REQS, dtype=torch.int32),
        torch.zeros(speculator.max_num_reqs, dtype=torch.int64),
        torch.zeros(speculator.max_num_reqs, dtype=torch.int64),
        torch.zeros(speculator.max_num_reqs),
        torch.zeros(speculator.max_num_reqs, dtype=torch.int64),
        dummy_run=True,
        skip_attn_for_dummy_run=True,  # no attention metadata: the counting model reads none
        is_profile=True,  # eager dispatch: no CUDA graph manager on a CPU
    )
    return speculator.model.forwards, drafts.tolist()


def expected_drafts(depth: int) -> list[list[int]]:
    row = [FIRST_TOKEN + i if i < depth else -1 for i in range(K_MAX)]
    return [row] * N_REQS


DEPTHS = [K_MAX, 0, 2, 1, K_MAX, 0, 0, 1]


def test_without_the_hook_the_drafter_drafts_every_token_whatever_the_depth(
    vllm_config: Any, speculator: Any, unhooked: None
) -> None:
    """The gap the hook closes: the depth noted on vLLM's own ``propose`` changes nothing."""
    runner = runner_for(vllm_config, speculator)
    for depth in DEPTHS:
        _execute_model(runner, step_output(depth))
        assert propose(speculator) == (K_MAX, expected_drafts(K_MAX))
        assert getattr(speculator, drafter_depth.DEPTH) == depth  # noted, never read


def _execute_model(runner: Any, so: Any, **kwargs: Any) -> None:
    """The runner's wrapper (its depth note: these runners have no token history for the off-step
    bookkeeping) around a stand-in for the target forward (which needs a GPU)."""
    make = runner_hooks.runner_execute_model(runner_hooks.Pieces(depth=True))
    make(lambda self, so, *a, **k: None)(runner, so, **kwargs)


def test_the_steps_depth_reaches_the_drafter(vllm_config: Any, speculator: Any, hooked: list[str]) -> None:
    """Each step drafts its own depth: max(K, 1) drafter forwards (the first pass still writes the
    drafter's KV at K = 0), K drafts per request, the rest marked -1; the scheduler gets K per request."""
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    assert GPUModelRunner.execute_model.__specpolicy_wrapped__ is not None  # type: ignore[attr-defined]
    runner = runner_for(vllm_config, speculator)
    handler = runner.draft_tokens_handler
    seen = []
    for depth in DEPTHS:
        _execute_model(runner, step_output(depth))
        forwards, drafts = propose(speculator)
        assert drafts == expected_drafts(depth), depth
        handler.set_draft_tokens(_batch(speculator), speculator.draft_tokens[:N_REQS])
        given = handler.get_draft_tokens().draft_token_ids
        seen.append((forwards, {len(d) for d in given}))
    assert seen == [(max(d, 1), {d}) for d in DEPTHS]
    assert speculator.num_speculative_steps == K_MAX  # restored after every step


def _batch(speculator: Any) -> Any:
    from vllm.v1.worker.gpu.input_batch import InputBatch

    return InputBatch.make_dummy(N_REQS, N_REQS, speculator.input_buffers)


def test_the_policys_depths_reach_the_drafter_and_come_back_as_the_next_steps_drafts(
    make_config: Any, monkeypatch: pytest.MonkeyPatch, speculator: Any, hooked: list[str]
) -> None:
    """The whole loop with sync scheduling, in ``EngineCore.step``'s order: vLLM's scheduler asks the policy,
    the runner's drafter drafts that depth, and the scheduler verifies exactly those drafts next step."""
    use_model_runner(monkeypatch, "MRV2")
    depths = [K_MAX, 0, 2, 1, 0, 0, K_MAX, 1, 2]
    cfg = make_config(
        additional_config={"specpolicy": {"policy": {"name": "scripted", "depths": depths}, "metrics": False}}
    )
    sched = build_scheduler(cfg)
    ids = [f"r{i}" for i in range(N_REQS)]
    for rid in ids:
        add_request(sched, rid)
    target = FakeRunner(sched, lambda s, r, d: d)
    runner = runner_for(cfg, speculator)
    forwards, verified = [], []
    for _ in depths:
        so = sched.schedule()
        verified.append({len(so.scheduled_spec_decode_tokens.get(r, ())) for r in ids})
        _execute_model(runner, so)
        sched.update_from_output(so, target.run(so))
        n, _drafts = propose(speculator)
        forwards.append(n)
        batch = _batch(speculator)
        batch.req_ids = list(so.num_scheduled_tokens)
        runner.draft_tokens_handler.set_draft_tokens(batch, speculator.draft_tokens[:N_REQS])
        sched.update_draft_token_ids(runner.draft_tokens_handler.get_draft_tokens())
    assert forwards == [max(d, 1) for d in depths]
    assert verified == [{0}] + [{d} for d in depths[:-1]]


def test_dummy_runs_and_calls_without_a_fresh_depth_draft_at_full_depth(
    vllm_config: Any, speculator: Any, hooked: list[str]
) -> None:
    runner = runner_for(vllm_config, speculator)
    _execute_model(runner, step_output(0), dummy_run=True)  # start-up warm-up and capture
    assert propose(speculator)[0] == K_MAX
    _execute_model(runner, step_output(1))
    assert propose(speculator)[0] == 1
    assert propose(speculator)[0] == K_MAX  # the depth was the previous step's: consumed


def test_an_engine_on_vllms_own_scheduler_is_left_alone(
    vllm_config: Any, speculator: Any, hooked: list[str]
) -> None:
    vllm_config.scheduler_config.scheduler_cls = "vllm.v1.core.sched.async_scheduler.AsyncScheduler"
    runner = runner_for(vllm_config, speculator)
    _execute_model(runner, step_output(1))
    assert propose(speculator) == (K_MAX, expected_drafts(K_MAX))


def test_the_plugin_installs_the_hook_in_every_vllm_process(restore_engine_args: None) -> None:
    """vLLM's plugin loader (every worker runs it before building its model runner) wraps the methods."""
    import vllm.plugins
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner
    from vllm.v1.worker.gpu.spec_decode.autoregressive.speculator import AutoRegressiveSpeculator
    from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
    from vllm.v1.worker.gpu.spec_decode.utils import DraftTokensHandler

    original = GPUModelRunner.__dict__["execute_model"]
    vllm.plugins.plugins_loaded = False
    try:
        vllm.plugins.load_general_plugins()
        assert GPUModelRunner.__dict__["execute_model"].__specpolicy_wrapped__ is original
        assert hasattr(EagleSpeculator.propose, "__specpolicy_wrapped__")
        assert "propose" in AutoRegressiveSpeculator.__dict__
        assert hasattr(DraftTokensHandler.set_draft_tokens, "__specpolicy_wrapped__")
    finally:
        _patch.unwrap_all()
    assert GPUModelRunner.__dict__["execute_model"] is original
