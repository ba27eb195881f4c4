"""The GPU harness's engine arguments against the installed release's real ServerArgs.

The live-check tool (tools/livecheck, ``sglang_check``) writes the arguments under 0.5.12.post1's names
and ``for_release`` renames those that later releases moved; this holds every variant of its ``ab_static``,
alone and side by side, to the fields ``sglang.Engine(**kw)`` of this release accepts, and the CPU tests'
stand-in to the real type. Run inside an engine venv (0.5.12.post1 and 0.5.17 at least).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
_LC = ROOT / "tools" / "livecheck"  # the tool is not installed in the engine venvs
for _p in (_LC / "src", _LC / "tests" / "fakes" / "sglang" / "srt"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from conftest import requires_version  # noqa: E402
from specpolicy_livecheck import ab_static  # noqa: E402
from specpolicy_livecheck import sglang_check as gpu_check  # noqa: E402

# The live harness drives the releases the GPU host can run (torch 2.11): 0.5.23 pins torch 2.14.1.
pytestmark = requires_version("0.5.12.post1", "0.5.17")


@pytest.fixture(scope="module")
def fields() -> frozenset[str]:
    return gpu_check.server_arg_fields()


@pytest.mark.parametrize("variant", sorted(ab_static.VARIANTS))
def test_every_variant_alone_and_paired_passes_only_real_server_args(
    variant: str, fields: frozenset[str]
) -> None:
    path, _ = ab_static.VARIANTS[variant]
    kw = {**gpu_check.engine_kwargs(path, Path("/m"), tp=2), **ab_static.ENGINE_KW.get(variant, {})}
    for extra in ({}, ab_static.PAIRED_ENGINE_KW):
        out = gpu_check.for_release({**kw, **extra}, fields)
        assert set(out) <= fields
        assert len(out) == len({**kw, **extra})  # nothing dropped, nothing merged


def test_the_cuda_graph_arguments_carry_this_releases_names(
    sglang_version: str, fields: frozenset[str]
) -> None:
    from packaging.version import Version

    kw = gpu_check.for_release(
        {**gpu_check.engine_kwargs("v2", Path("/m")), **ab_static.PAIRED_ENGINE_KW}, fields
    )
    if Version(sglang_version) >= Version("0.5.13"):
        assert kw["cuda_graph_bs_decode"] == [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128]
        assert kw["cuda_graph_max_bs_decode"] == 128 and kw["cuda_graph_max_bs_prefill"] == 8192
        assert not {"cuda_graph_bs", "cuda_graph_max_bs", "piecewise_cuda_graph_max_tokens"} & set(kw)
    else:
        assert kw["cuda_graph_bs"] and kw["piecewise_cuda_graph_max_tokens"] == 8192


def test_the_cpu_stand_in_names_only_fields_that_0_5_12_post1_has(
    sglang_version: str, fields: frozenset[str]
) -> None:
    if sglang_version != "0.5.12.post1":
        pytest.skip("the stand-in spells the names as 0.5.12.post1 does")
    from server_args import FIELDS  # tools/livecheck/tests/fakes/sglang/srt/server_args.py

    assert set(FIELDS) <= fields


def test_sglang_adaptive_refuses_a_standalone_draft_model_as_the_skip_says(sglang_version: str) -> None:
    from packaging.version import Version

    if Version(sglang_version) < Version("0.5.13"):
        pytest.skip("AdaptiveController arrives in 0.5.13")
    import types

    from sglang.srt.speculative.adaptive_spec_params import adaptive_unsupported_reason

    reason = adaptive_unsupported_reason(types.SimpleNamespace(speculative_algorithm="STANDALONE"))  # type: ignore[arg-type]
    assert reason is not None and "EAGLE/EAGLE3" in reason
    assert ab_static.SKIPPED["adaptive_draft_ov"] == ab_static.ADAPTIVE_DRAFT_SKIP


def test_the_stand_ins_request_and_answer_carry_this_releases_names() -> None:
    """What the stand-in's decode loop (tests/fakes/sglang/_stepper.py) offers the adapter of a request and
    answers of one: the real ``Req`` takes ``rid`` and ``sampling_params`` and has ``seqlen`` and
    ``finished()``, ``SamplingParams`` keeps ``custom_params`` (where a hint rides), and the tokenizer
    manager's ``meta_info`` carries ``spec_verify_ct`` and ``spec_num_correct_drafts`` per request."""
    import inspect

    from sglang.srt.managers import tokenizer_manager
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = inspect.signature(Req.__init__).parameters
    assert {"rid", "sampling_params"} <= set(params)
    assert isinstance(inspect.getattr_static(Req, "seqlen"), property) and callable(Req.finished)
    sp = SamplingParams(max_new_tokens=4, custom_params={"specpolicy": "off"})
    assert sp.custom_params == {"specpolicy": "off"}
    source = inspect.getsource(tokenizer_manager)
    for key in ("spec_verify_ct", "spec_num_correct_drafts"):
        assert f'meta_info["{key}"]' in source, key
