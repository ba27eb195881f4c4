"""The vLLM check's engine arguments built into vLLM 0.26.0's real configuration, on the CPU.

Each engine's ``vllm.LLM`` keyword arguments (``vllm_check.engine_kwargs``) must be ones that release
accepts (``LLM.__init__`` parameters or ``EngineArgs`` fields) and must finish into the ``VllmConfig`` the
check means: the draft-model method at depth 3, triton attention for target and draft, vLLM's own table
where asked, the specpolicy scheduler with the test dispatcher (whose front-end check, run by the
specpolicy plugin inside ``create_engine_config``, accepts it), the V1 model runner, sync scheduling, the
fixed KV pool. This needs vLLM 0.26.0: in-process where it is importable, else through the engine venv
(``scripts/engine-envs.sh vllm-0.26.0``); skipped without either.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from lc_env import POLICIES_PROJECT, REPO, child_env
from specpolicy_livecheck import vllm_check as vc

ROOT = REPO
VENV_PY = ROOT / ".venvs" / "vllm-0.26.0" / "bin" / "python"

#: Run by the vLLM 0.26.0 interpreter: prints ``RESULT <json>`` with what each engine's config became.
CHILD = r"""
import ast, dataclasses, importlib.util, json, os, sys, tempfile
from pathlib import Path
POLICIES = Path(sys.argv[1])
from specpolicy_livecheck import vllm_bundle
os.environ.update(vllm_bundle.ENGINE_ENV)
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
import vllm
import vllm.platforms as platforms
from vllm.platforms.cpu import CpuPlatform
if not isinstance(platforms.current_platform, CpuPlatform):  # 0.26 on a machine without a GPU
    platforms._current_platform = CpuPlatform()
path = POLICIES / "specpolicy_gpucheck" / "__init__.py"
spec = importlib.util.spec_from_file_location("specpolicy_gpucheck", path)
gc = importlib.util.module_from_spec(spec)
sys.modules["specpolicy_gpucheck"] = gc
spec.loader.exec_module(gc)
import specpolicy.registry as registry
from specpolicy.policies import BUILTIN_ENTRIES
entries = [gc.CYCLE, gc.RAISE, gc.RESUME, gc.SLOW, gc.SKIP_CATCH_UP, gc.DISPATCH]
reg = registry._Registry([*BUILTIN_ENTRIES, *entries])
registry._registry = lambda: reg
from specpolicy_livecheck import bigram_model as bm
from specpolicy_livecheck import vllm_check as vc
from vllm.config import AttentionConfig, ProfilerConfig
from vllm.engine.arg_utils import EngineArgs
# LLM's own parameters, read from its source (importing vllm.entrypoints.llm needs fastapi)
src = Path(vllm.__file__).parent / "entrypoints" / "llm.py"
cls = next(n for n in ast.parse(src.read_text()).body if isinstance(n, ast.ClassDef) and n.name == "LLM")
init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
llm_params = {a.arg for a in [*init.args.args, *init.args.kwonlyargs]} - {"self"}
fields = {f.name for f in dataclasses.fields(EngineArgs)}
tmp = Path(tempfile.mkdtemp())
for name, shape in (("target", bm.TINY), ("draft", bm.ModelShape(**{**bm.TINY.__dict__, "layers": 1}))):
    (tmp / name).mkdir()
    (tmp / name / "config.json").write_text(json.dumps(bm.hf_config(shape)))
opts = vc.Options(out=str(tmp / "out"))
out = {"version": vllm.__version__}
for engine in vc.ENGINE_NAMES:
    kw = vc.engine_kwargs(engine, tmp, opts, str(tmp / "control"), str(tmp / "log"), str(tmp / "trace"))
    ea = dict(kw)
    ea["attention_config"] = AttentionConfig(**ea["attention_config"])  # as LLM.__init__ converts them
    ea["profiler_config"] = ProfilerConfig(**ea["profiler_config"])
    cfg = EngineArgs(**ea).create_engine_config()
    sc = cfg.speculative_config
    section = (cfg.additional_config or {}).get("specpolicy", {})
    out[engine] = {
        "unknown_kwargs": sorted(k for k in kw if k not in llm_params and k not in fields),
        "method": sc.method if sc else None,
        "k": sc.num_speculative_tokens if sc else None,
        "table": [list(x) for x in sc.num_speculative_tokens_per_batch_size]
        if sc and sc.num_speculative_tokens_per_batch_size else None,
        "draft_attention_backend": sc.attention_backend.name if sc and sc.attention_backend else None,
        "draft_model": sc.draft_model_config.model if sc else None,
        "scheduler_cls": str(cfg.scheduler_config.scheduler_cls),
        "async_scheduling": cfg.scheduler_config.async_scheduling,
        "max_num_seqs": cfg.scheduler_config.max_num_seqs,
        "attention_backend": cfg.attention_config.backend.name if cfg.attention_config.backend else None,
        "kv_cache_memory_bytes": cfg.cache_config.kv_cache_memory_bytes,
        "max_model_len": cfg.model_config.max_model_len,
        "dtype": str(cfg.model_config.dtype),
        "use_v2_model_runner": cfg.use_v2_model_runner,
        "policy": section.get("policy", {}).get("name"),
        "labels": sorted(section.get("policy", {}).get("policies", {})),
        "trace_path": section.get("trace_path"),
        "profiler": cfg.profiler_config.profiler,
        "profiler_steps": cfg.profiler_config.max_iterations,
    }
print("RESULT " + json.dumps(out))
"""


def _run() -> dict[str, Any]:
    if importlib.util.find_spec("vllm") is not None:
        cmd = [sys.executable, "-c", CHILD, str(POLICIES_PROJECT)]
    elif VENV_PY.exists():
        cmd = [str(VENV_PY), "-c", CHILD, str(POLICIES_PROJECT)]
    else:
        pytest.skip(
            "vLLM 0.26.0 is not importable here and its engine venv is absent (scripts/engine-envs.sh)"
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECPOLICY_", "VLLM_"))}
    env = child_env(REPO, base=env)  # the tool and specpolicy of this checkout
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    if result["version"] != "0.26.0":
        pytest.skip(f"vLLM {result['version']} is importable here, not 0.26.0")
    return result


@pytest.fixture(scope="module")
def configs() -> dict[str, Any]:
    return _run()


def test_every_keyword_is_one_vllm_0_26_takes(configs: dict[str, Any]) -> None:
    for engine in vc.ENGINE_NAMES:
        assert configs[engine]["unknown_kwargs"] == [], engine


def test_every_engine_runs_the_same_runner_backend_pool_and_scheduling(configs: dict[str, Any]) -> None:
    for engine in vc.ENGINE_NAMES:
        c = configs[engine]
        assert c["attention_backend"] == "TRITON_ATTN"
        assert c["use_v2_model_runner"] is False  # VLLM_USE_V2_MODEL_RUNNER=0 (the draft model needs V1)
        assert c["async_scheduling"] is False
        assert c["kv_cache_memory_bytes"] == vc.KV_CACHE_BYTES
        assert c["max_num_seqs"] == vc.MAX_NUM_SEQS and c["max_model_len"] == vc.MAX_MODEL_LEN
        assert c["dtype"] == "torch.bfloat16"
        assert c["profiler"] == "torch" and c["profiler_steps"] == vc.PROFILE_STEPS


def test_speculation_by_engine(configs: dict[str, Any]) -> None:
    assert configs["never"]["method"] is None and configs["never"]["scheduler_cls"] == "None"
    for engine in ("vllm-k", "vllm-table", "sp"):
        c = configs[engine]
        assert c["method"] == "draft_model" and c["k"] == vc.K
        assert c["draft_attention_backend"] == "TRITON_ATTN"
        assert c["draft_model"].endswith("/draft")
    assert configs["vllm-k"]["table"] is None and configs["vllm-k"]["scheduler_cls"] == "None"
    assert configs["vllm-table"]["table"] == vc.vllm_table()
    assert configs["vllm-table"]["scheduler_cls"] == "None"


def test_the_specpolicy_engine_takes_the_dispatcher(configs: dict[str, Any]) -> None:
    sp = configs["sp"]
    assert sp["scheduler_cls"] == "specpolicy.adapters.vllm.Scheduler"
    assert sp["policy"] == "gpucheck_dispatch"
    assert set(sp["labels"]) == set(vc.sp_policies(vc.DEFAULT_PERF))
    assert sp["trace_path"] and sp["table"][-1][1] == vc.MAX_NUM_SEQS
    assert {d for _, _, d in sp["table"]} == {0, vc.K}
