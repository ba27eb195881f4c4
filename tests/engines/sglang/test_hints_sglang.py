"""Per-request hints on SGLang's real request types: ``SamplingParams.custom_params["specpolicy"]`` read
from real ``Req`` objects, on the legacy route (0.5.10 / 0.5.12: through ``EAGLEWorker``'s wrapped
``forward_batch_generation``, an off step for the batch whose requests opt out) and on the v2 route's
policy bridge (0.5.13+: ``note_batch`` on a real ``ScheduleBatch``, then ``get_steps_for_batch``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import legacy_support as ls
import pytest
from conftest import SGLANG_VERSION

from specpolicy import SpecMode, StepStats
from specpolicy.adapters.sglang.legacy.targets import SUPPORTED_VERSIONS
from specpolicy.hints import HINT_KEY
from specpolicy.runtime.runtime import AdapterRuntime
from specpolicy.runtime.settings import AdapterSettings


class Seen:
    """Asks for depth 3 every step and keeps the StepStats it was given."""

    def __init__(self) -> None:
        self.seen: list[StepStats] = []

    def decide(self, stats: StepStats) -> SpecMode:
        self.seen.append(stats)
        return SpecMode(3)


def _reqs(hints: list[Any]) -> list[Any]:
    """Real Reqs built from real SamplingParams carrying ``hints[i]`` (None: no custom params)."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    out = []
    for i, h in enumerate(hints):
        custom = None if h is None else {HINT_KEY: h}
        sp = SamplingParams(max_new_tokens=8, temperature=0, custom_params=custom)
        sp.normalize(None)
        sp.verify(ls.VOCAB)
        out.append(Req(f"h{i}", "", [1, 2, 3], sp, vocab_size=ls.VOCAB))
    return out


def test_real_requests_hints_are_read_once_and_bad_ones_counted() -> None:
    rt = ls.legacy_runtime(Seen(), launch_depth=3, path="v1")
    reqs = _reqs(["off", None, "max_depth=2", "bogus", {"max_depth": 1}])
    rt.on_non_decode(reqs)  # their prefill
    rt.on_non_decode(reqs[:2])  # a later chunk of the same requests: not counted again
    assert rt.runtime.hint_counts() == {
        "requests_off": 1, "requests_capped": 2, "bad": 1, "request_steps_trimmed": 0, "steps_off": 0,
        "steps_capped": 0,
    }


def test_legacy_batch_rule_and_the_policy_sees_the_hints() -> None:
    pol = Seen()
    rt = ls.legacy_runtime(pol, launch_depth=3, path="v1")
    reqs = _reqs(["off", "off", None])
    rt.on_non_decode(reqs)
    assert rt.begin_decode(3, 30, reqs=reqs) is True  # 2 of 3 opt out: a majority, off
    rt.end_decode()
    assert pol.seen[-1].hints == (2, 0, 0, 0)
    assert rt.begin_decode(2, 20, reqs=reqs[1:]) is False  # 1 of 2: no majority, the policy's depth
    rt.end_decode()
    assert rt.begin_decode(1, 10, reqs=reqs[2:]) is False and pol.seen[-1].hints is None
    rt.end_decode()
    # a cap below the launch depth: legacy workers run only {0, launch}, so the batch runs off
    capped = _reqs(["max_depth=2"])
    rt.on_non_decode(capped)
    assert rt.begin_decode(1, 10, reqs=capped) is True
    rt.end_decode()
    assert rt.runtime.controller.hint_counts() == {"steps_off": 2, "steps_capped": 0}


def test_settings_turn_hints_off() -> None:
    from specpolicy.adapters.sglang.legacy.runtime import make_runtime

    settings = AdapterSettings.build("static", metrics=False, hints=False)
    rt = make_runtime(settings, policy=Seen(), launch_depth=3, path="v1")  # type: ignore[arg-type]
    reqs = _reqs(["off"])
    rt.on_non_decode(reqs)
    assert rt.begin_decode(1, 10, reqs=reqs) is False
    assert rt.runtime.hints.counts()["requests_off"] == 0


@pytest.mark.skipif(SGLANG_VERSION not in SUPPORTED_VERSIONS, reason="the legacy worker path")
def test_opted_out_batch_runs_the_off_step_through_the_real_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sglang.srt.speculative.eagle_worker")
    from specpolicy.adapters import _patch as patching
    from specpolicy.adapters.sglang.legacy import hooks
    from specpolicy.adapters.sglang.legacy.off_path import OffPath
    from specpolicy.adapters.sglang.legacy.one_token import FieldNames, OneTokenTarget

    names = FieldNames.detect()
    ls.patch_kernels(monkeypatch)
    ls.wrap_v1_hooks(names)
    try:
        setup = ls.make_v1_worker(names)
        pol = Seen()
        rt = ls.legacy_runtime(pol, launch_depth=3, path="v1")
        one = OneTokenTarget("one-token-attn", "one-token-graph", [setup.server_args])
        setattr(setup.worker, hooks.OT, OffPath(names=names, sizes=one, decode=None, lag=None))
        setattr(setup.worker, hooks.RT, rt)
        prompts, first = [5, 9, 2], [11, 12, 13]
        batch = ls.make_v1_batch(names, prompts, first, setup.alloc)
        for r in batch.reqs[:2]:  # two of the three requests opt out
            r.sampling_params.custom_params = {HINT_KEY: "off"}
        rt.on_non_decode(batch.reqs)  # what the wrapped forward does for their prefill batch

        setup.worker.forward_batch_generation(batch)

        expected = [ls.token_after(n, i) for i, n in enumerate(prompts)]
        assert [r.output_ids for r in batch.reqs] == [[f, e] for f, e in zip(first, expected, strict=True)]
        assert rt.skipped_steps == 1 and pol.seen[-1].hints == (2, 0, 0, 0)
        (call,) = setup.target.calls
        assert call["draft_token_num"] == 1  # a one-token verify: no drafts for anyone
    finally:
        patching.unwrap_all()


def test_v2_bridge_reads_the_batch_hints(monkeypatch: pytest.MonkeyPatch) -> None:
    import v2_support as vs
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    from specpolicy.adapters.sglang.adaptive import SpecPolicyParams

    pol = Seen()
    settings = AdapterSettings.build("static", metrics=False, hint_off_rule="any")
    art = AdapterRuntime(settings, engine="sglang", engine_version=str(SGLANG_VERSION), path="v2",
                         allowed_steps=[0, 1, 2, 3], default_steps=3, policy=pol)  # type: ignore[arg-type]
    params = SpecPolicyParams(art, initial_steps=3, engine_candidates=[1, 2, 3])
    sched = SimpleNamespace(waiting_queue=[])
    reqs = _reqs([None, "max_depth=2", None, "off"])

    params.note_batch(sched, vs.schedule_batch(reqs=reqs, forward_mode=ForwardMode.EXTEND))
    params.note_batch(sched, vs.schedule_batch(reqs=reqs[:3], forward_mode=ForwardMode.DECODE))
    assert params.get_steps_for_batch(3) == 2  # the cap of the one capped request
    params.note_batch(sched, vs.schedule_batch(reqs=reqs, forward_mode=ForwardMode.DECODE))
    assert params.get_steps_for_batch(4) == 0  # hint_off_rule=any: one request opts out
    assert [s.hints for s in pol.seen] == [(0, 1, 2, 2), (1, 1, 2, 2)]
    params.note_batch(sched, vs.schedule_batch(reqs=[reqs[0], reqs[2]], forward_mode=ForwardMode.DECODE))
    assert params.get_steps_for_batch(2) == 3 and pol.seen[-1].hints is None
    params.note_batch(sched, vs.schedule_batch(reqs=reqs, forward_mode=ForwardMode.DECODE))
    assert params.get_steps_for_batch(3) == 3  # another batch size than noted: its hints are not used
    assert art.hint_counts() == {
        "requests_off": 1, "requests_capped": 1, "bad": 0, "request_steps_trimmed": 0, "steps_off": 1,
        "steps_capped": 1,
    }


def test_batch_hints_follow_sglang_filter_and_merge() -> None:
    """SGLang filters a batch into a new list and merges by extending it: each is a rescan, the same list
    at the same length is not; finished requests are forgotten."""
    from specpolicy.adapters.sglang import hints as sh
    from specpolicy.hints import HintBook

    rh = sh.RequestHints(HintBook())
    reqs = _reqs(["off", None, "max_depth=2"])
    rh.on_extend(reqs)
    running = list(reqs)
    assert rh.of_batch(running) == (1, 1, 2, 2)
    running = [running[1], running[2]]  # filter_batch: a new list without the opted-out request
    assert rh.of_batch(running) == (0, 1, 2, 2)
    more = _reqs([None, None, None, "off"])[3:]
    rh.on_extend(more)
    running.extend(more)  # merge_batch: the same list, longer
    assert rh.of_batch(running) == (1, 1, 2, 2)
    assert rh.of_batch(running) is rh.of_batch(running)  # unchanged: the last scan's result
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH

    reqs[0].finished_reason = FINISH_LENGTH(length=1)
    for _ in range(sh.PRUNE_EVERY + 1):
        rh.of_batch(list(running))  # the first request is in no batch any more, and finished
    assert set(rh.live) == {more[0].rid, reqs[2].rid}
