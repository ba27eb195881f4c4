#!/usr/bin/env python3
"""First GPU call for vLLM: install the offline bundle, import the offline speculative path module by module,
and (optionally) start one tiny engine with the specpolicy scheduler. One short call says what the bundle
lacks before the live check spends minutes.

On the GPU host, from the repository root, with the bundle parts carried (``.carry/vllm/pN``, stashed in
earlier calls under ``/root/stash``)::

    specpolicy-livecheck vllm-probe --site /tmp/vsite --out $OUT --parts /root/stash .carry/vllm/p2 \
        --engine --build-models /tmp/gc

1. ``install``: ``vllm_bundle.install`` (join the parts, unpack into ``--site``, install specpolicy and
   the test policies from this tree); skipped when the site already holds vLLM.
2. ``imports``: every module of ``vllm_bundle.PROBE_MODULES`` in order, under ``vllm_bundle.ENGINE_ENV``;
   a failure is reported with the missing module's name (``ModuleNotFoundError.name``), the exception and
   the deepest vLLM frame, and the probe goes on with the next module.
3. ``checks``: CUDA and the GPU, vLLM's platform, FA3 loaded, the FlashInfer sampler off, the triton
   attention backend's class, the versions (and where each was imported from) of the packages that matter.
4. ``--engine``: in a child process, a 2-layer Llama pair with a known greedy chain
   (``bigram_model.py``), ``vllm.LLM`` with the draft model, the specpolicy scheduler (``static``, depth 3),
   triton attention and eager mode; 8 greedy requests compared with the oracle.
5. ``--build-models WORK``: ``specpolicy-livecheck build-models`` for the live check (on the GPU).

Everything lands in ``OUT/probe.json``; a summary goes to stdout (the ``PROBE`` lines). Exit status 0 when
every import and check passed (and the engine, when asked, was lossless), 1 otherwise.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from specpolicy_livecheck import vllm_bundle
from specpolicy_livecheck._proc import child_env, module_command

#: Packages whose version and origin (bundle site or image) the probe reports.
VERSIONS = (
    "torch",
    "triton",
    "transformers",
    "tokenizers",
    "huggingface_hub",
    "pydantic",
    "openai",
    "fastapi",
    "numpy",
    "vllm",
    "specpolicy",
)


def _deepest_frame(exc: BaseException, prefix: str = "vllm") -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f"/{prefix}/" in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f"{f.filename.split('/' + prefix + '/', 1)[-1]}:{f.lineno} ({f.name})"


def probe_imports(modules: tuple[str, ...] = vllm_bundle.PROBE_MODULES) -> list[dict[str, Any]]:
    """Import each module in turn; one record per module (``ok``, seconds, and on failure ``missing``,
    ``error``, ``where``)."""
    out: list[dict[str, Any]] = []
    for name in modules:
        t0 = time.perf_counter()
        rec: dict[str, Any] = {"module": name}
        try:
            importlib.import_module(name)
            rec["ok"] = True
        except BaseException as exc:  # noqa: BLE001  (a probe reports everything, SystemExit included)
            rec["ok"] = False
            rec["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
            if isinstance(exc, ModuleNotFoundError) and exc.name:
                rec["missing"] = exc.name
            rec["where"] = _deepest_frame(exc)
        rec["s"] = round(time.perf_counter() - t0, 2)
        out.append(rec)
        print(f"PROBE import {'ok  ' if rec['ok'] else 'FAIL'} {name} ({rec['s']} s)"
              + ("" if rec["ok"] else f": {rec['error']} [{rec['where']}]"), flush=True)  # fmt: skip
    return out


def _check(name: str, fn: Any) -> dict[str, Any]:
    try:
        value = fn()
        ok = bool(value) if isinstance(value, bool) else True
        rec = {"check": name, "ok": ok, "value": value}
    except BaseException as exc:  # noqa: BLE001
        rec = {"check": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:400]}
    print(
        f"PROBE check  {'ok  ' if rec['ok'] else 'FAIL'} {name}: {rec.get('value', rec.get('error'))}",
        flush=True,
    )
    return rec


def _version(name: str) -> dict[str, Any]:
    try:
        mod = importlib.import_module(name)
        return {"version": getattr(mod, "__version__", "?"), "file": getattr(mod, "__file__", "?")}
    except BaseException as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}


def probe_checks() -> list[dict[str, Any]]:
    """What must hold on the host beyond importability."""

    def cuda() -> str:
        import torch

        assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
        return f"{torch.cuda.get_device_name(0)}, capability {torch.cuda.get_device_capability(0)}"

    def platform() -> str:
        from vllm.platforms import current_platform

        assert current_platform.is_cuda(), f"vLLM resolved {type(current_platform).__name__}"
        return type(current_platform).__name__

    def fa3() -> bool:
        from vllm.vllm_flash_attn import flash_attn_interface as fai

        return bool(fai.FA3_AVAILABLE)

    def sampler_off() -> bool:
        from vllm.v1.sample.ops.topk_topp_sampler import flashinfer_sampler_supported

        return flashinfer_sampler_supported() is False

    def triton_backend() -> str:
        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        return str(AttentionBackendEnum.TRITON_ATTN.get_class().__name__)

    def plugin() -> bool:
        from importlib.metadata import entry_points

        names = {e.value for e in entry_points(group="vllm.general_plugins")}
        return "specpolicy.adapters.vllm.plugin:register" in names

    def gpucheck_policies() -> bool:
        from specpolicy import available_policies

        return "gpucheck_dispatch" in available_policies()

    return [
        _check("cuda", cuda),
        _check("vllm platform is CUDA", platform),
        _check("FA3 kernels load (vllm.vllm_flash_attn)", fa3),
        _check("FlashInfer sampler off (VLLM_USE_FLASHINFER_SAMPLER=0)", sampler_off),
        _check("TRITON_ATTN backend class", triton_backend),
        _check("specpolicy vllm.general_plugins entry point", plugin),
        _check("test policies registered (gpucheck_dispatch)", gpucheck_policies),
    ]


# ----------------------------------------------------------------------------------------------- engine
#: The probe's own pair: small enough to build on the CPU in a second, with a head size triton supports.
PROBE_SHAPE = {"hidden": 256, "layers": 2, "intermediate": 512, "heads": 4, "kv_heads": 2, "head_dim": 64,
               "vocab": 4096}  # fmt: skip


def build_probe_models(work: Path) -> dict[str, Any]:
    """A target and a 1-layer draft (agreeing on 70% of tokens) under ``work``; returns the meta."""
    from specpolicy_livecheck import bigram_model as bm

    meta_path = work / "meta.json"
    if meta_path.exists():
        return dict(json.loads(meta_path.read_text()))
    target = bm.ModelShape(**PROBE_SHAPE)
    draft = bm.ModelShape(**{**PROBE_SHAPE, "layers": 1})
    (work / "tokenizer").mkdir(parents=True, exist_ok=True)
    n_tok = min(bm.train_tokenizer(str(work / "tokenizer")), target.vocab)
    pi = bm.bigram_map(n_tok, seed=1)
    pi_d = bm.draft_map(pi, 0.7, seed=2)
    for name, shape, p, seed in (("target", target, pi, 0), ("draft", draft, pi_d, 3)):
        bm.write_checkpoint(str(work / name), shape, p, seed=seed, tokenizer_from=str(work / "tokenizer"))
    meta = {"chain_vocab": n_tok, "pi": pi.tolist(), "pi_draft": pi_d.tolist()}
    meta_path.write_text(json.dumps(meta))
    return meta


def engine_child(work: Path) -> dict[str, Any]:
    """One tiny engine with the specpolicy scheduler (run in its own process: vLLM spawns its engine core)."""
    import random

    import numpy as np
    from vllm import LLM, SamplingParams

    from specpolicy.adapters.vllm.args import build_vllm_args
    from specpolicy_livecheck import bigram_model as bm

    meta = build_probe_models(work)
    pi = np.asarray(meta["pi"])
    args = build_vllm_args("static", 3, max_num_seqs=8, method="draft_model", draft_model=str(work / "draft"),
                           settings={"metrics": False})  # fmt: skip
    spec = {**args.speculative_config, "attention_backend": "TRITON_ATTN"}
    t0 = time.time()
    llm = LLM(
        model=str(work / "target"),
        skip_tokenizer_init=True,
        dtype="bfloat16",
        enforce_eager=True,
        gpu_memory_utilization=0.3,
        kv_cache_memory_bytes=1 << 30,
        max_model_len=1024,
        attention_config={"backend": "TRITON_ATTN"},
        **{**args.as_kwargs(), "speculative_config": spec},
    )
    up = time.time() - t0
    rng = random.Random(0)
    prompts = [[rng.randrange(4, int(meta["chain_vocab"])) for _ in range(24)] for _ in range(8)]
    sp = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True, detokenize=False)
    t1 = time.time()
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
    gen = time.time() - t1
    got = [list(o.outputs[0].token_ids) for o in outs]
    want = [bm.greedy_chain(pi, p[-1], 48) for p in prompts]
    return {
        "engine_up_s": round(up, 1),
        "generate_s": round(gen, 2),
        "requests": len(got),
        "lossless": sum(a == b for a, b in zip(got, want, strict=True)),
    }


def probe_site() -> dict[str, Any]:
    """The imports, the checks and the versions, as this process (started on the site) sees them."""
    return {
        "imports": probe_imports(),
        "checks": probe_checks(),
        "versions": {name: _version(name) for name in VERSIONS},
    }


def run_probe_child() -> dict[str, Any]:
    """``probe_site`` in a child process whose PYTHONPATH holds the site (set by ``main``): the packages
    the bundle installed import from there, as they will in the engine. Its PROBE lines are passed on."""
    proc = subprocess.run(
        module_command("vllm_probe", "--probe-child"), capture_output=True, text=True, check=False,
        env=child_env(),
    )  # fmt: skip
    lines = proc.stdout.splitlines()
    for ln in lines[:-1]:
        print(ln, flush=True)
    try:
        rec: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        err = {"ok": False, "error": f"probe child rc={proc.returncode}: {proc.stderr[-1500:]}"}
        return {"imports": [], "checks": [{"check": "probe child", **err}], "versions": {}}
    return rec


def run_engine(work: Path, timeout_s: float) -> dict[str, Any]:
    dump_s = str(max(timeout_s - 20, 1))  # the child dumps its threads' stacks before the timeout kills it
    cmd = module_command("vllm_probe", "--engine-child", str(work), "--hang-dump-s", dump_s)
    t0 = time.time()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, check=False, env=child_env()
        )
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc = -9
        stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    rec: dict[str, Any] = {"rc": rc, "s": round(time.time() - t0, 1)}
    if lines:
        rec.update(json.loads(lines[-1]))
    missing = [ln for ln in stderr.splitlines() if "No module named" in ln]
    if missing:
        rec["missing"] = sorted(set(missing))[:5]
    rec["ok"] = rc == 0 and rec.get("lossless") == rec.get("requests") and bool(rec.get("requests"))
    rec["stderr_tail"] = stderr[-6000:]
    rec["stdout_tail"] = stdout[-6000:]
    print(f"PROBE engine {'ok  ' if rec['ok'] else 'FAIL'} rc={rc} in {rec['s']} s: "
          f"{ {k: rec.get(k) for k in ('engine_up_s', 'requests', 'lossless', 'missing')} }",
          flush=True)  # fmt: skip
    if not rec["ok"]:  # vLLM logs to stdout, a hang's tracebacks (below) go to stderr
        print(stdout[-3000:], stderr[-3000:], sep="\n", flush=True)
    return rec


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--site", type=Path, default=Path("/tmp/vsite"), help="install target (put on PYTHONPATH)"
    )
    ap.add_argument("--parts", type=Path, nargs="*", default=[], help="folders holding part.NN files")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/vprobe-out")))
    ap.add_argument("--engine", action="store_true", help="also start one tiny engine (about a minute)")
    ap.add_argument("--engine-timeout-s", type=float, default=240.0)
    ap.add_argument("--build-models", type=Path, metavar="WORK", help="then build the live check's models")
    ap.add_argument("--skip-install", action="store_true", help="import from the environment as it is")
    ap.add_argument("--engine-child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--hang-dump-s", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--probe-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    os.environ.update(vllm_bundle.ENGINE_ENV)
    if args.engine_child:
        if args.hang_dump_s > 0:  # a hang shows where every thread waits before the parent's timeout
            faulthandler.dump_traceback_later(args.hang_dump_s, exit=False)
        print(json.dumps(engine_child(args.engine_child)), flush=True)
        return 0
    if args.probe_child:
        print(json.dumps(probe_site()), flush=True)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"env": vllm_bundle.ENGINE_ENV}
    t0 = time.time()
    manifest = next((p / "manifest.json" for p in args.parts if (p / "manifest.json").exists()), None)
    try:
        if args.skip_install:
            report["install"] = {"skipped": True}
        else:
            report["install"] = vllm_bundle.install(args.parts, args.site, manifest=manifest)
        print(f"PROBE install ok: {report['install']}", flush=True)
    except Exception as exc:
        report["install"] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        print(f"PROBE install FAIL: {report['install']['error']}", flush=True)
        (args.out / "probe.json").write_text(json.dumps(report, indent=1))
        return 1
    # Children (the engine core, the tiny engine, build-models) import from the site too.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(args.site), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    report.update(run_probe_child())
    failed = [r for r in report["imports"] if not r["ok"]] + [c for c in report["checks"] if not c["ok"]]
    report["missing"] = sorted({r["missing"] for r in report["imports"] if r.get("missing")})
    ok = not failed
    if args.engine:
        report["engine"] = run_engine(Path("/tmp/vprobe-models"), args.engine_timeout_s)
        ok = ok and report["engine"]["ok"]
    if args.build_models:
        cmd = module_command(
            "sglang_check", "build-models", "--work", str(args.build_models), "--device", "cuda"
        )
        t1 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=child_env())
        report["build_models"] = {"rc": proc.returncode, "s": round(time.time() - t1, 1),
                                  "out": (proc.stdout + proc.stderr)[-2000:]}  # fmt: skip
        print(f"PROBE build-models rc={proc.returncode} in {report['build_models']['s']} s", flush=True)
        ok = ok and proc.returncode == 0
    report["ok"] = ok
    report["s"] = round(time.time() - t0, 1)
    (args.out / "probe.json").write_text(json.dumps(report, indent=1))
    print(f"PROBE {'OK' if ok else 'FAILED'} in {report['s']} s; "
          f"missing modules: {report['missing'] or 'none'}; "
          f"failed: {[r.get('module', r.get('check')) for r in failed]}", flush=True)  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
