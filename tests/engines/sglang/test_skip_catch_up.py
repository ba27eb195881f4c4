"""The live check's skipped hidden-state catch-up (``gpucheck_skip_catch_up``, tools/livecheck/policies)
on the legacy workers' real off steps: while armed, SGLang's draft extend over the new token gets zero hidden
states on v1 and v2, and the output is unchanged; disarmed, it gets the target's again. This is what makes
the live check's skip phase a skipped catch-up and nothing else."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import MethodType, ModuleType
from typing import Any

import pytest
import test_legacy_off_decode as lod
import torch
from test_legacy_off_decode import names, wrapped, wrapped_v2  # noqa: F401  (fixtures)

from specpolicy.adapters.sglang.legacy.decode_target import DecodeTarget
from specpolicy.adapters.sglang.legacy.one_token import FieldNames

ROOT = Path(__file__).resolve().parents[3]


def _gpucheck() -> ModuleType:
    """The test-policy package as a module (no entry points registered, as in tools/livecheck/tests)."""
    path = ROOT / "tools" / "livecheck" / "policies" / "specpolicy_gpucheck" / "__init__.py"
    spec = importlib.util.spec_from_file_location("specpolicy_gpucheck_e", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def skip(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(DecodeTarget, "forward", DecodeTarget.forward)  # restored after the test
    s = _gpucheck().CatchUpSkip()
    assert s.install() and DecodeTarget.forward.__name__ == "forward"
    return s


def test_v1_armed_skip_zeroes_the_hidden_states_of_the_draft_extend(
    names: FieldNames,  # noqa: F811
    wrapped: Any,  # noqa: F811
    skip: Any,
) -> None:
    v = lod.V1(names, lazy=False)
    skip.armed = True
    v.step(0)
    (ext,) = v.extend_calls
    hidden = ext["spec"].hidden_states
    assert hidden.shape[0] == len(lod.PROMPTS) and torch.count_nonzero(hidden) == 0
    assert skip.zeroed == 1
    want = [lod._oracle(i, n, 1) for i, n in enumerate(lod.PROMPTS)]
    assert [v.tokens(i)[lod.PROMPTS[i] :] for i in range(3)] == want  # output unchanged
    skip.armed = False
    v.step(0)
    again = v.extend_calls[1]["spec"].hidden_states
    assert again[:, 0].tolist() == [float(n + 1) for n in lod.PROMPTS]  # the target's (fake: the position)
    assert skip.zeroed == 1


def test_v2_armed_skip_zeroes_the_hidden_states_of_the_draft_extend(
    names: FieldNames,  # noqa: F811
    wrapped_v2: Any,  # noqa: F811
    skip: Any,
) -> None:
    from sglang.srt.managers.scheduler import Scheduler

    s, sched, batch, rt, off, kv = lod._v2(names, lazy=False)
    dw = s.worker.draft_worker
    seen: list[Any] = []
    original = type(dw)._draft_extend_for_decode

    def spy(self: Any, mwb: Any, result: Any) -> Any:
        seen.append(result.logits_output.hidden_states.clone())
        return original(self, mwb, result)

    dw._draft_extend_for_decode = MethodType(spy, dw)
    skip.armed = True
    result = Scheduler.run_batch(sched, batch)
    (hidden,) = seen  # at the launch stride: the draft extend writes D positions per request
    assert hidden.shape[0] == len(lod.PROMPTS) * (lod.STEPS + 1) and torch.count_nonzero(hidden) == 0
    sched.process_batch_result_decode(batch, result)
    assert [r.output_ids[-1] for r in batch.reqs] == [
        lod.ls.token_after(n, i) for i, n in enumerate(lod.PROMPTS)
    ]  # output unchanged
    skip.armed = False
    Scheduler.run_batch(sched, batch)
    assert torch.count_nonzero(seen[1]) > 0
