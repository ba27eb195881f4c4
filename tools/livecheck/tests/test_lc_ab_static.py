"""specpolicy_livecheck.ab_static: its variants configure what they say, its trace summary counts right."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from fakes.sglang.srt.server_args import FIELDS as FAKE_FIELDS
from specpolicy_gpucheck import DispatchConfig, DispatchPolicy
from specpolicy_livecheck import ab_static
from specpolicy_livecheck import sglang_check as gpu_check

from specpolicy.runtime.settings import AdapterSettings


@pytest.mark.parametrize(
    ("variant", "path", "steps"), [("on", "v2", 3), ("on_v1", "v1", 3), ("off_v2", "v2", 0)]
)
def test_the_static_variants_configure_their_depth_and_nothing_else(
    variant: str, path: str, steps: int
) -> None:
    got_path, env = ab_static.VARIANTS[variant]
    assert got_path == path and env is not None and set(env) == {"SPECPOLICY_POLICY"}
    s = AdapterSettings.from_env(env)
    assert s is not None and s.policy.candidate_steps() == (steps,)
    default = AdapterSettings.from_env({"SPECPOLICY_POLICY": json.dumps({"name": "static", "num_steps": 1})})
    assert default is not None
    differs = {k for k in AdapterSettings.model_fields if getattr(s, k) != getattr(default, k)}
    assert differs == {"policy"}  # every other setting as the adapter's defaults


def test_every_variant_is_documented_in_the_help() -> None:
    """``specpolicy-livecheck paired --help`` (the module's docstring) names every variant it accepts."""
    doc = ab_static.__doc__ or ""
    named = [v for v in ab_static.VARIANTS if v not in ab_static.V2_LABELS]
    assert named and all(f"``{v}``" in doc for v in named), [v for v in named if f"``{v}``" not in doc]
    # the v2-only names are a grammar: each of its parts is documented
    for part in (*ab_static.V2_POLICIES, *ab_static.V2_DRAFTERS, *ab_static.V2_SCHEDULING):
        assert f"``{part}``" in doc, part
    assert "``<policy>_<drafter>_<ov|nov>``" in doc and "``never_<ov|nov>``" in doc


def test_plain_runs_without_specpolicy_settings() -> None:
    path, env = ab_static.VARIANTS["plain"]
    assert path == "v2" and env is None


def test_summary_counts_busy_time_window_kernels_and_runtime_calls(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "kernel", "name": "decode", "ts": 100.0, "dur": 50.0},
        {"ph": "X", "cat": "kernel", "name": "decode", "ts": 300.0, "dur": 50.0},
        {"ph": "X", "cat": "gpu_memcpy", "name": "copy", "ts": 1000.0, "dur": 150.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 10.0, "dur": 400.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 20.0, "dur": 5.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 30.0, "dur": 5.0},
        {"ph": "i", "cat": "kernel", "name": "instant, not a span", "ts": 5000.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::zeros", "ts": 12.0, "dur": 8.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::zeros", "ts": 40.0, "dur": 4.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::index_put_", "ts": 60.0, "dur": 30.0},
    ]
    f = tmp_path / "t.json.gz"
    with gzip.open(f, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    s = ab_static.summarize(str(f))
    assert s["window_ms"] == pytest.approx(1.05)  # first kernel at 100 us to the copy's end at 1,150 us
    assert s["gpu_busy_ms"] == pytest.approx(0.25)
    assert s["kernels"] == 3
    assert dict(s["runtime_calls"]) == {"cudaStreamSynchronize": 1, "cudaLaunchKernel": 2}
    assert s["top_kernels_ms"] == [("copy", 0.15), ("decode", 0.1)]
    assert s["cpu_ops"] == 3
    assert dict(s["cpu_op_calls"]) == {"aten::zeros": 2, "aten::index_put_": 1}
    assert s["cpu_op_ms"] == [("aten::index_put_", 0.03), ("aten::zeros", 0.012)]


def test_a_trace_without_kernels_says_so(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"traceEvents": []}))
    assert ab_static.summarize(str(f)) == {"error": "no kernels in the trace"}


@pytest.mark.parametrize("side", ["v1", "v2"])
def test_the_off_step_variants_run_every_step_off_beside_the_speculation_free_engine(side: str) -> None:
    """The EAGLE-3 off step against the draft model's and a speculation-free step, on one worker kind."""
    from specpolicy_livecheck import plan as P

    assert ab_static.VARIANTS[f"base_{side}"] == (f"base_{side}", None)
    for variant, path in ((f"off_{side}", side), (f"off_eagle3_{side}", f"eagle3_{side}")):
        p, env = ab_static.VARIANTS[variant]
        assert p == path and p in P.ADAPTER_PATHS and env is not None
        s = AdapterSettings.from_env(env)
        assert s is not None and s.policy.candidate_steps() == (0,)


def test_a_profile_folder_is_emptied_so_an_earlier_variants_trace_is_not_summarised(tmp_path: Path) -> None:
    folder = tmp_path / "off_eagle3_v2-1"
    (folder / "rank0").mkdir(parents=True)
    (folder / "rank0" / "earlier.trace.json.gz").write_bytes(b"x" * 4096)
    assert ab_static.fresh_dir(folder) == folder
    assert folder.is_dir() and not any(folder.iterdir())
    assert ab_static.newest_trace(folder) is None


def test_the_newest_trace_is_summarised_not_the_largest(tmp_path: Path) -> None:
    import os

    big, small = tmp_path / "a" / "big.trace.json.gz", tmp_path / "b" / "small.trace.json.gz"
    for f, size, mtime in ((big, 9000, 1_000), (small, 10, 2_000)):
        f.parent.mkdir()
        f.write_bytes(b"x" * size)
        os.utime(f, ns=(mtime * 10**9, mtime * 10**9))
    assert ab_static.newest_trace(tmp_path) == small


def test_every_aten_op_is_listed_so_two_variants_can_be_compared_name_by_name(tmp_path: Path) -> None:
    events = [{"ph": "X", "cat": "kernel", "name": "k", "ts": 0.0, "dur": 1.0}]
    events += [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "ts": 1.0, "dur": 1.0} for i in range(40)]
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"traceEvents": events}))
    assert len(ab_static.summarize(str(f))["cpu_op_calls"]) == 40


@pytest.mark.parametrize(("variant", "path"), [("mixed_v1", "v1"), ("mixed_v2", "v2")])
def test_a_switched_variant_holds_the_two_policies_it_switches_between(
    variant: str, path: str, tmp_path: Path
) -> None:
    from specpolicy_livecheck import plan as P

    assert ab_static.VARIANTS[variant][0] == path and variant in ab_static.MIXED
    env = ab_static.mixed_env(tmp_path, variant)
    cfg = json.loads(env["SPECPOLICY_POLICY"])
    assert cfg["initial"] == "static-0" and cfg["policies"]["static-0"] == {"name": "static", "num_steps": 0}
    assert cfg["policies"]["static"] == {"name": "static", "num_steps": P.LAUNCH_DEPTH}
    assert set(cfg["policies"]) == {"static", "static-0"}
    assert set(env) == {"SPECPOLICY_POLICY"}  # no trace
    assert (tmp_path / f"ab-control-{variant}.txt").exists()
    DispatchConfig.model_validate(cfg)  # every child configures


class _Engine:
    """Records which policy the dispatcher runs for each generate() call (its decide() at every call)."""

    def __init__(self, policy: DispatchPolicy) -> None:
        self.policy = policy
        self.served: list[tuple[int, str]] = []

    def generate(
        self, input_ids: list[list[int]], sampling_params: dict[str, object]
    ) -> list[dict[str, object]]:
        from specpolicy import StepStats

        mode = self.policy.decide(StepStats(len(input_ids)))
        self.served.append((len(input_ids), "on" if mode.num_steps else "off"))
        n = int(sampling_params["max_new_tokens"])  # type: ignore[call-overload]
        return [{"meta_info": {"completion_tokens": n, "spec_verify_ct": n}} for _ in input_ids]

    def start_profile(self, **kw: object) -> None:
        self.served.append((0, "profile"))

    def stop_profile(self) -> None:
        pass


def test_the_switched_run_measures_off_before_on_then_in_turn_then_in_a_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the real dispatcher over the control file: every batch runs the policy its key names."""
    import argparse

    env = ab_static.mixed_env(tmp_path, "mixed_v1")
    eng = _Engine(DispatchPolicy(DispatchConfig.model_validate(json.loads(env["SPECPOLICY_POLICY"]))))
    monkeypatch.setattr(ab_static.time, "sleep", lambda s: None)
    args = argparse.Namespace(
        out=str(tmp_path), profile="1", prof_root=str(tmp_path / "prof"), repeats=2, min_s=0.0
    )
    perf, profiles = ab_static.run_mixed(eng, args, "mixed_v1", [1, 16], vocab=64)
    assert set(perf) == {f"{k}:{c}" for k in ("off_fresh", "on", "off_after_on", "off_late") for c in (1, 16)}
    assert all(len(v) == 2 for v in perf.values())
    assert set(profiles) == {"off_fresh:1", "off_after_on:1"}
    modes = [m for _, m in eng.served]
    first_on = modes.index("on")
    assert (
        "off" in modes[:first_on] and modes[:first_on].count("profile") == 1
    )  # off, profiled, before any on
    after = modes[first_on:]
    assert after[-4:] == ["off"] * 4  # off_late: the last batches, in a row
    assert "on" in after and after.count("profile") == 1


@pytest.mark.parametrize(
    ("variant", "path", "label"),
    [
        ("cm_v1", "v1", "cost_model"),
        ("cm_v2", "v2", "cost_model"),
        ("hyst_v1", "v1", "hysteresis"),
        ("hyst_v2", "v2", "hysteresis"),
        ("on_eagle3_v1", "eagle3_v1", "static"),
        ("cm_eagle3_v1", "eagle3_v1", "cost_model"),
        ("on_eagle3_v2", "eagle3_v2", "static"),
        ("cm_eagle3_v2", "eagle3_v2", "cost_model"),
        ("on_eagle3tree_v1", "eagle3tree_v1", "static"),
        ("cm_eagle3tree_v1", "eagle3tree_v1", "cost_model"),
    ],
)
def test_the_policy_variants_run_the_live_checks_policy_for_the_engines_life(
    variant: str, path: str, label: str
) -> None:
    from specpolicy_livecheck import plan

    got_path, env = ab_static.VARIANTS[variant]
    assert got_path == path and env is not None
    cfg = json.loads(env["SPECPOLICY_POLICY"])
    depth = plan.spec_shape(path).num_steps  # type: ignore[union-attr]  # the engine's launch depth
    assert cfg == plan.perf_policies(depth)[label]  # the policy itself, no dispatcher resetting it per phase
    s = AdapterSettings.from_env(env)
    assert s is not None and s.policy.candidate_steps() == ((depth,) if label == "static" else (0, depth))
    assert variant not in ab_static.MIXED


class _ChainEngine:
    """Answers greedy requests with the bigram chain of ``pi``; request ``bad`` of every pass gets one token
    changed."""

    def __init__(self, pi: object, bad: int | None = None) -> None:
        from specpolicy_livecheck import bigram_model as bm

        self.pi, self.bad, self.bm = pi, bad, bm

    def generate(
        self, input_ids: list[list[int]], sampling_params: dict[str, object]
    ) -> list[dict[str, object]]:
        n = int(sampling_params["max_new_tokens"])  # type: ignore[call-overload]
        outs = []
        for i, p in enumerate(input_ids):
            ids = self.bm.greedy_chain(self.pi, p[-1], n)
            if i == self.bad:
                ids[n // 2] = ids[n // 2] + 1
            outs.append({"output_ids": ids, "meta_info": {"completion_tokens": n, "spec_verify_ct": n // 2}})
        return outs


@pytest.mark.parametrize("bad", [None, 2])
def test_a_batch_counts_the_requests_equal_to_the_oracle_over_every_pass(bad: int | None) -> None:
    from specpolicy_livecheck import bigram_model as bm

    pi = bm.bigram_map(64, seed=1)
    prompts = ab_static._prompts(4, 64, 3)
    res = ab_static._batch(_ChainEngine(pi, bad), prompts, 10, 0.0, pi)
    assert res["passes"] == 1 and res["requests"] == 4
    assert res["lossless"] == (4 if bad is None else 3)
    assert res["accept_len"] == 2.0
    # a map the engine did not follow: nothing is lossless
    other = bm.bigram_map(64, seed=2)
    assert ab_static._batch(_ChainEngine(pi), prompts, 10, 0.0, other)["lossless"] < 4
    assert "lossless" not in ab_static._batch(_ChainEngine(pi), prompts, 10, 0.0)  # no oracle, no count


@pytest.fixture
def fake_sglang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[dict[str, object], str | None]]:
    """Test models' meta.json under ``tmp_path`` and an ``sglang`` whose Engine records its arguments and
    the host-timers variable it starts with, in start order."""
    import os
    import sys
    import types

    from specpolicy_gpucheck.host_timers import ENV
    from specpolicy_livecheck import bigram_model as bm

    models = tmp_path / "models"
    models.mkdir()
    (models / "meta.json").write_text(
        json.dumps({"chain_vocab": 64, "pi": bm.bigram_map(64, seed=1).tolist()})
    )
    seen: list[tuple[dict[str, object], str | None]] = []
    fake = types.ModuleType("sglang")
    fake.Engine = lambda **kw: seen.append((kw, os.environ.get(ENV))) or object()  # type: ignore[attr-defined]
    fake.__version__ = "0.5.12.post1"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sglang", fake)
    # the ServerArgs names of 0.5.12.post1 (tests/fakes; held to the real ones in tests/engines/sglang)
    monkeypatch.setattr(gpu_check, "server_arg_fields", lambda: frozenset(FAKE_FIELDS))
    return seen


def _args(tmp_path: Path, **kw: object) -> object:
    import types

    return types.SimpleNamespace(work=str(tmp_path), out=str(tmp_path / "out"), **kw)


def test_only_a_paired_engine_gets_the_shared_gpu_arguments(
    tmp_path: Path, fake_sglang: list[tuple[dict[str, object], str | None]]
) -> None:
    from specpolicy_livecheck import bigram_model as bm

    for serve in (None, "off_v1"):
        _, res, vocab, pi = ab_static.start_engine(_args(tmp_path, serve=serve), "off_v1")
        assert vocab == 64 and list(pi) == bm.bigram_map(64, seed=1).tolist()
        assert "SPECPOLICY_TRACE" not in res["env"]
    (alone, _), (paired_kw, _) = fake_sglang
    assert alone["max_total_tokens"] == 131072 and "sleep_on_idle" not in alone
    assert paired_kw["max_total_tokens"] == ab_static.PAIRED_ENGINE_KW["max_total_tokens"]
    assert paired_kw["sleep_on_idle"] is True
    assert paired_kw["mem_fraction_static"] > alone["mem_fraction_static"]  # type: ignore[operator]
    assert res["engine_kw"]["sleep_on_idle"] is True  # the ready reply says what the engine ran with
    # the largest batch of a paired run fits the capped pool: 128 requests x (prompt + output + draft reserve)
    assert 128 * (128 + ab_static.TOKENS[128] + 4) < ab_static.PAIRED_ENGINE_KW["max_total_tokens"]
    # and its prompts are prefilled in one chunk, so that every request is admitted at once
    assert 128 * 128 <= min(paired_kw["chunked_prefill_size"], paired_kw["max_prefill_tokens"])  # type: ignore[type-var]


def test_a_trace_folder_and_a_log_level_reach_every_variant_that_asks(
    tmp_path: Path, fake_sglang: list[tuple[dict[str, object], str | None]]
) -> None:
    args = _args(tmp_path, serve="cm_v1", trace_dir=str(tmp_path / "t"), engine_log_level="info")
    _, res, _, _ = ab_static.start_engine(args, "cm_v1")
    assert res["env"]["SPECPOLICY_TRACE"] == str(tmp_path / "t" / "trace-cm_v1.jsonl")
    assert json.loads(res["env"]["SPECPOLICY_POLICY"])["name"] == "cost_model"  # the policy is kept
    assert fake_sglang[0][0]["log_level"] == "info" and (tmp_path / "t").is_dir()
    _, res, _, _ = ab_static.start_engine(args, "base_v1")  # no specpolicy there: no trace setting
    assert res["env"] is None


def test_host_timers_reach_every_variant_including_the_speculation_free_one(
    tmp_path: Path, fake_sglang: list[tuple[dict[str, object], str | None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from specpolicy_gpucheck.host_timers import ENV

    monkeypatch.setenv(ENV, "/elsewhere/left-over.jsonl")
    stale = tmp_path / "h" / "timers-base_v1.jsonl"
    stale.parent.mkdir()
    stale.write_text('{"kind": "totals"}\n')
    args = _args(tmp_path, serve="x", host_timers_dir=str(tmp_path / "h"))
    for v in ("base_v1", "off_v1"):
        ab_static.start_engine(args, v)
    assert [env for _, env in fake_sglang] == [str(stale), str(tmp_path / "h" / "timers-off_v1.jsonl")]
    assert not stale.exists()  # an earlier command's lines would be read as this run's
    args.host_timers_dir = None  # type: ignore[attr-defined]
    ab_static.start_engine(args, "base_v1")
    assert fake_sglang[-1][1] is None  # no folder: the variable is cleared with the other SPECPOLICY_ ones


def test_only_the_named_variants_write_a_trace(tmp_path: Path) -> None:
    import argparse

    every = argparse.Namespace(trace_dir=str(tmp_path), trace_variants=None)
    some = argparse.Namespace(trace_dir=str(tmp_path), trace_variants="cm_v1,off_v2")
    assert ab_static.trace_path(every, "off_v1") == tmp_path / "trace-off_v1.jsonl"
    assert ab_static.trace_path(some, "cm_v1") == tmp_path / "trace-cm_v1.jsonl"
    assert ab_static.trace_path(some, "off_v1") is None  # its ratio counts: no trace's cost
    assert ab_static.trace_path(argparse.Namespace(trace_dir=None, trace_variants="cm_v1"), "cm_v1") is None


V2_NAMES = [
    f"{p}_{d}_{o}"
    for p in ("sglang", "adaptive", "static", "static0", "cm")
    for d in ("draft", "eagle3")
    for o in ("ov", "nov")
] + ["never_ov", "never_nov"]


@pytest.mark.parametrize("variant", V2_NAMES)
def test_each_v2_only_variant_launches_its_drafter_scheduling_and_policy(variant: str) -> None:
    path, env = ab_static.VARIANTS[variant]
    kw = {**gpu_check.engine_kwargs(path, Path("/m")), **ab_static.ENGINE_KW.get(variant, {})}
    policy, *rest = variant.split("_")
    # nov: the v2 worker with overlap scheduling off; ov: on (0.5.13+ have no v1 worker)
    assert kw["disable_overlap_schedule"] is (rest[-1] == "nov")
    if policy == "never":
        assert "speculative_algorithm" not in kw and env is None
        return
    algorithm, draft = {"draft": ("STANDALONE", "/m/draft"), "eagle3": ("EAGLE3", "/m/eagle3")}[rest[0]]
    assert kw["speculative_algorithm"] == algorithm and kw["speculative_draft_model_path"] == draft
    assert kw["speculative_num_steps"] == 3 and kw["speculative_eagle_topk"] == 1
    assert kw.get("speculative_adaptive", False) is (policy == "adaptive")
    if policy in ("sglang", "adaptive"):  # SGLang's own: specpolicy installed, not configured
        assert env is None
        return
    assert env is not None
    settings = AdapterSettings.from_env(env)
    assert settings is not None
    expected = {"static": ("static", (3,)), "static0": ("static", (0,)), "cm": ("cost_model", None)}[policy]
    assert settings.policy.name == expected[0]
    if expected[1] is not None:
        assert settings.policy.candidate_steps() == expected[1]
    assert (
        ab_static.V2_LABELS[variant]
        == {"static": "static", "static0": "static-0", "cm": "cost_model"}[policy]
    )


def test_sglang_adaptive_with_a_draft_model_is_skipped_with_its_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    kept = ab_static.runnable(["never_ov", "adaptive_draft_ov", "adaptive_eagle3_ov", "adaptive_draft_nov"])
    assert kept == ["never_ov", "adaptive_eagle3_ov"]
    out = capsys.readouterr().out
    assert out.count("skipped adaptive_draft_") == 2 and "EAGLE / EAGLE3" in out
    assert set(ab_static.SKIPPED) == {"adaptive_draft_ov", "adaptive_draft_nov"}


def test_a_paired_run_left_with_one_variant_after_the_skips_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    argv = ["ab_static.py", "--work", str(tmp_path), "--out", str(tmp_path / "o"), "--paired"]
    monkeypatch.setattr(sys, "argv", [*argv, "--variants", "never_ov,adaptive_draft_ov"])
    assert ab_static.main() == 2
    assert "skipped adaptive_draft_ov" in capsys.readouterr().out


def test_engine_arguments_take_the_names_of_the_installed_release() -> None:
    kw = {
        "cuda_graph_bs": [1, 2],
        "cuda_graph_max_bs": 2,
        "piecewise_cuda_graph_max_tokens": 8192,
        "dtype": "bf16",
    }
    old = frozenset({"cuda_graph_bs", "cuda_graph_max_bs", "piecewise_cuda_graph_max_tokens", "dtype"})
    assert gpu_check.for_release(kw, old) == kw
    new = frozenset(
        {"cuda_graph_bs_decode", "cuda_graph_max_bs_decode", "cuda_graph_max_bs_prefill", "dtype"}
    )
    assert gpu_check.for_release(kw, new) == {
        "cuda_graph_bs_decode": [1, 2],
        "cuda_graph_max_bs_decode": 2,
        "cuda_graph_max_bs_prefill": 8192,
        "dtype": "bf16",
    }
    with pytest.raises(ValueError, match=r"\['dtype', 'speculative_adaptive'\]"):
        gpu_check.for_release({"dtype": "bf16", "speculative_adaptive": True}, frozenset({"model_path"}))


def test_a_v2_only_release_engine_gets_the_renamed_arguments_and_reports_its_release(
    tmp_path: Path, fake_sglang: list[tuple[dict[str, object], str | None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    renamed = {"cuda_graph_bs": "cuda_graph_bs_decode", "cuda_graph_max_bs": "cuda_graph_max_bs_decode"}
    renamed["piecewise_cuda_graph_max_tokens"] = "cuda_graph_max_bs_prefill"
    monkeypatch.setattr(
        gpu_check, "server_arg_fields", lambda: frozenset(renamed.get(f, f) for f in FAKE_FIELDS)
    )
    monkeypatch.setattr(sys.modules["sglang"], "__version__", "0.5.17")
    _, res, _, _ = ab_static.start_engine(_args(tmp_path, serve="adaptive_eagle3_ov"), "adaptive_eagle3_ov")
    kw, _ = fake_sglang[0]
    assert kw["cuda_graph_bs_decode"] and "cuda_graph_bs" not in kw
    assert kw["cuda_graph_max_bs_prefill"] == ab_static.PAIRED_ENGINE_KW["piecewise_cuda_graph_max_tokens"]
    assert kw["speculative_adaptive"] is True and kw["speculative_algorithm"] == "EAGLE3"
    assert res["sglang"] == "0.5.17" and res["engine_kw"]["speculative_adaptive"] is True
