#!/usr/bin/env python3
"""The offline vLLM 0.26.0 bundle for the GPU host: what goes in, what stays out and why, how it installs.

One place for the download list (``make_vllm_bundle.sh`` reads it with ``pins`` and ``drops``), the
install step (``vllm_probe.py`` and the GPU commands call ``install``) and the modules the probe imports;
``tools/livecheck/tests/test_lc_vllm_bundle.py`` holds them to vLLM's source and to the image's package list.

The host (python 3.12.3, torch 2.11.0+cu130, 197 packages:
results/2026-12-02-sglang-0.5.12.post1-run7/gpu-image-packages-2026-12-02.txt) has no package index and takes
at most 64 MiB per command, the repository included. vLLM 0.26.0 pins torch 2.11.0 and declares 45
requirements the image lacks (``bundle_plan.py``); the offline engine path imports far fewer. The list below
comes from reading that path's imports (``vllm_imports.py``: every module-level import of ``vllm.LLM``, the V1
engine core, the GPU worker and model runner, the triton attention backend, the draft-model and EAGLE
proposers, followed through vLLM's source), not from the declared requirements:

- ``PINS``: the wheels the path imports and the image lacks, each with the import that needs it;
- ``LEFT_OUT``: every other requirement the image lacks, with why the path does without it;
- ``OUTSIDE_REQUIREMENT``: pins outside vLLM's own requirement, each with why;
- ``HELD``: the requirements the image holds at another version, and why that version stays;
- ``DROPS``: what is cut from the 304 MB vLLM wheel (kernels and headers the path never loads);
- ``ENGINE_ENV``: the environment every engine runs with (one switch keeps vLLM from importing FlashInfer).

The bundle is one ``tar.xz`` of an installed tree (the slimmed vLLM plus the pinned wheels installed with
``pip --target``), split into parts of ``PART_MIB`` MiB (``.carry/vllm/p1/part.00``, ...): each part
travels beside the ~17 MB repository in one call of at most 64 MiB. ``install`` joins the parts, unpacks
them into a target directory (put on ``PYTHONPATH``) and installs specpolicy and the test policies from
the repository tree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from specpolicy_livecheck import paths

__all__ = [
    "VLLM",
    "Pin",
    "PINS",
    "DROPS",
    "LEFT_OUT",
    "HELD",
    "OUTSIDE_REQUIREMENT",
    "IMAGE_IMPORTS",
    "OPTIONAL_IMPORTS",
    "ENGINE_ENV",
    "PROBE_MODULES",
    "PART_MIB",
    "BUNDLE",
    "pip_specs",
    "provider",
    "part_files",
    "install",
]

VLLM = "vllm==0.26.0"
#: Each part travels beside the repository (~17 MB) in one call of at most 64 MiB.
PART_MIB = 40
BUNDLE = "vllm-bundle.tar.xz"
#: The platform tags ``pip download`` asks for (the host: CPython 3.12, glibc manylinux, x86_64).
PLATFORMS = (
    "manylinux_2_34_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_26_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
)


@dataclass(frozen=True)
class Pin:
    """One wheel of the bundle: ``imports`` are its top-level module names, ``why`` the import that needs
    it on the path (or the pinned package that requires it: ``needed_by``)."""

    name: str
    version: str
    imports: tuple[str, ...]
    why: str
    needed_by: str = "vllm"

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"


#: The wheels the offline speculative path imports and the image lacks. Versions: the ones the SGLang
#: bundle already ran on this host where it has them (pydantic, msgspec, pyzmq, pybase64,
#: partial-json-parser), else the ones the CPU contract tests import vLLM 0.26.0 with, else the newest
#: release inside vLLM's bounds whose own requirements the image meets (openai 2.x: httpx, not httpx2).
PINS: tuple[Pin, ...] = (
    Pin(
        "pydantic",
        "2.14.4",
        ("pydantic",),
        "vllm.config.* are pydantic dataclasses (vllm.config.utils, module level); specpolicy's configs too",
    ),
    Pin("pydantic-core", "2.50.5", ("pydantic_core",), "pydantic 2.14.4 pins it", "pydantic"),
    Pin("annotated-types", "0.8.0", ("annotated_types",), "required by pydantic", "pydantic"),
    Pin("typing-inspection", "0.4.5", ("typing_inspection",), "required by pydantic", "pydantic"),
    Pin(
        "msgspec",
        "0.23.0",
        ("msgspec",),
        "vllm.sampling_params and vllm.v1.serial_utils (engine-core messages), module level",
    ),
    Pin(
        "pyzmq",
        "27.3.0",
        ("zmq",),
        "vllm.utils.network_utils and the V1 engine-core client/process sockets, module level",
    ),
    Pin(
        "cachetools",
        "8.0.3",
        ("cachetools",),
        "vllm.utils.cache and vllm.v1.structured_output.utils, module level",
    ),
    Pin("cbor2", "6.3.0", ("cbor2",), "vllm.utils.hashing (prefix-cache block hashes), module level"),
    Pin(
        "pybase64",
        "1.5.1",
        ("pybase64",),
        "vllm.multimodal.media / vllm.utils.serial_utils, reached from vllm.entrypoints.chat_utils",
    ),
    Pin(
        "openai",
        "2.54.0",
        ("openai",),
        "openai.types in vllm.entrypoints.chat_utils and vllm.tool_parsers, imported by vllm.entrypoints.llm",
    ),
    Pin("jiter", "0.19.0", ("jiter",), "required by openai", "openai"),
    Pin("distro", "1.9.0", ("distro",), "required by openai", "openai"),
    Pin("sniffio", "1.3.1", ("sniffio",), "required by openai", "openai"),
    Pin(
        "openai-harmony",
        "0.0.8",
        ("openai_harmony",),
        "vllm.entrypoints.mcp.tool_server, reached from vllm.config via vllm.reasoning",
    ),
    Pin(
        "partial-json-parser",
        "0.2.1.1.post7",
        ("partial_json_parser",),
        "vllm.tool_parsers.utils, reached from vllm.entrypoints.llm via the pooling entry points",
    ),
    Pin(
        "fastapi",
        "0.136.3",
        ("fastapi",),
        "vllm.entrypoints.serve.utils.api_utils, imported by vllm.entrypoints.llm (log_non_default_args)",
    ),
    Pin(
        "starlette",
        "1.0.1",
        ("starlette",),
        "the same module imports starlette; vLLM 0.26.0 requires starlette>=1.0.1",
    ),
    # Found missing by the first probe on the host (2026-12-06): the structured-output backends are lazy
    # (LazyLoader) but their grammar dataclasses annotate fields with the backends' types, and the class
    # body evaluates the annotation, which loads the module. vllm.v1.structured_output imports both backends
    # at module level, and vllm.v1.request imports it: every engine needs them.
    Pin(
        "llguidance",
        "1.7.6",
        ("llguidance",),
        "vllm.v1.structured_output.backend_guidance: `ll_matcher: llguidance.LLMatcher` in a class body, "
        "reached from vllm.v1.request",
    ),
    Pin(
        "xgrammar",
        "0.2.8",
        ("xgrammar",),
        "vllm.v1.structured_output.backend_xgrammar: `matcher: xgr.GrammarMatcher` in a class body, likewise",
    ),
    Pin("apache-tvm-ffi", "0.1.11", ("tvm_ffi",), "xgrammar's module-level import of tvm_ffi", "xgrammar"),
)

#: Paths cut from the vLLM wheel (relative to its root; globs allowed), with why nothing on the path loads
#: them. What stays: the Python sources, ``_C_stable_libtorch`` (every custom op of the dense path),
#: ``cumem_allocator``, ``spinloop`` and the FA3 kernels: ``vllm.vllm_flash_attn`` raises ImportError unless
#: FA2 or FA3 loads, and on CUDA ``vllm.v1.attention.backends.fa_utils`` imports it at module level, reached
#: from ``vllm.model_executor.layers.attention`` (the GPU model runner and every model import that). FA3
#: (153 MB, 11 MB as xz) is the Hopper one; FA2 (305 MB, 85 MB as xz) serves pre-Hopper GPUs.
DROPS: tuple[tuple[str, str], ...] = (
    (
        "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",
        "FlashAttention 2 kernels: pre-Hopper GPUs (FA3 loads on H100/H200)",
    ),
    ("vllm/vllm-rs", "the Rust front-end binary: `vllm serve` with VLLM_RUST_FRONTEND_PATH only"),
    (
        "vllm/_moe_C_stable_libtorch.abi3.so",
        "MoE ops (torch.ops._moe_C.* in _custom_ops/fused_moe only); its import is suppressed when absent",
    ),
    ("vllm/_flashmla_C.abi3.so", "FlashMLA (MLA models); try-guarded in vllm/v1/attention/ops/flashmla.py"),
    ("vllm/_flashmla_extension_C.abi3.so", "FlashMLA extension; try-guarded likewise"),
    ("vllm/_qutlass_C.abi3.so", "QuTLASS FP4 kernels; imported under contextlib.suppress(ImportError)"),
    ("vllm/_rust_tool_parser.abi3.so", "tool-call parsing for the API server, imported lazily by importlib"),
    ("vllm/fs_io_C.abi3.so", "KV offload to files (vllm.v1.kv_offload), not configured"),
    ("vllm/third_party/deep_gemm/include", "CUTLASS/CuTe headers for DeepGEMM's JIT (FP8 GEMMs)"),
    ("vllm/third_party/deep_gemm/_C.cpython-31[0134]-*.so", "DeepGEMM bindings for other Pythons than 3.12"),
    ("vllm/third_party/fmha_sm100/cutlass", "CUTLASS headers of the sm100 (Blackwell) attention JIT"),
)

#: Every requirement vLLM 0.26.0 declares that the image lacks and the bundle does not carry, with why
#: the offline path does without it (names as in its METADATA).
LEFT_OUT: dict[str, str] = {
    "blake3": "hash of multimodal inputs only (vllm.multimodal.hasher, lazy)",
    "prometheus-fastapi-instrumentator": "the API server's /metrics middleware",
    "lm-format-enforcer": "structured-output backend: imported when a request asks for structured output",
    "outlines_core": "structured-output backend, likewise",
    "lark": "structured-output grammars and the Mistral tool parser",
    "jsonschema": "not imported by vLLM's own modules",
    "mistral_common": "Mistral tokenizers and models (vllm.tokenizers.hf imports it lazily for them)",
    "compressed-tensors": "compressed-tensors quantized checkpoints (lazy)",
    "depyf": "torch.compile debug dumps, only with a compile debug dump path set (lazy)",
    "watchfiles": "the API server's SSL certificate reload",
    "python-json-logger": "not imported by vLLM's own modules",
    "ijson": "the Mistral tool parser",
    "setproctitle": "process titles: vllm.utils.system_utils.set_process_title returns when it is missing",
    "anthropic": "the Anthropic-compatible API endpoints",
    "model-hosting-container-standards": "the API server's SageMaker routes",
    "mcp": "the API server's tool servers (lazy)",
    "opentelemetry-sdk": "tracing: try-guarded in vllm.tracing.otel",
    "opentelemetry-api": "tracing, likewise",
    "opentelemetry-exporter-otlp": "tracing, likewise",
    "opentelemetry-semantic-conventions-ai": "tracing, likewise",
    "torchcodec": "video inputs (lazy)",
    "PyNvVideoCodec": "video inputs (lazy)",
    "flashinfer-python": (
        "FlashInfer attention, sampling and fusions: every use checks find_spec('flashinfer') first, except "
        "the top-k/top-p sampler's check, which imports the FlashInfer backend unless "
        "VLLM_USE_FLASHINFER_SAMPLER=0 (ENGINE_ENV sets it; greedy decoding never uses that sampler)"
    ),
    "tilelang": "DeepSeek-V4 mHC kernels (vllm.model_executor.kernels.mhc), lazy",
    "nvidia-cudnn-frontend": "cuDNN paths of the vision encoders and the Ray executors",
    "nvtx": "profiling scopes with VLLM_NVTX_SCOPES_FOR_PROFILING only (lazy)",
    "fastsafetensors": "the fastsafetensors load format (lazy)",
    "nvidia-cutlass-dsl": "CuTe DSL kernels (FA4, the ll_bf16 router GEMM): their is_available() catches"
    " ImportError",
    "quack-kernels": "CuTe DSL kernels of the DeepSeek sparse-attention indexer",
    "tokenspeed-mla": "MLA decode kernels",
    "humming-kernels": "FP4 linear kernels (vllm.model_executor.kernels.linear.*/humming), lazy",
}

#: Requirements the image holds at another version than vLLM 0.26.0 asks for, and why that version stays.
HELD: dict[str, str] = {
    "setuptools": "image 81.0.0 against <81: vLLM imports neither setuptools nor pkg_resources",
    "numba": (
        "image 0.68.0 against ==0.65.0: only the ngram proposer and two model processors import numba; "
        "this path runs the draft-model and EAGLE proposers"
    ),
}

#: Pins outside vLLM 0.26.0's own requirement, and why (the versions that ran live on the host).
OUTSIDE_REQUIREMENT: dict[str, str] = {
    "apache-tvm-ffi": (
        "0.1.11 against ==0.1.10: xgrammar 0.2.8 (the version the CPU contract tests import) requires "
        ">=0.1.11; vLLM pins 0.1.10 for FlashInfer, which this path leaves out"
    ),
}

#: Import names of image packages whose distribution name differs (for ``provider``).
IMAGE_IMPORTS: dict[str, str] = {
    "PIL": "pillow",
    "yaml": "PyYAML",
    "cpuinfo": "py-cpuinfo",
    "cv2": "opencv-python-headless",
    "google": "protobuf",
    "sklearn": "scikit-learn",
    "skimage": "scikit-image",
    "jinja2": "Jinja2",
    "pynvml": "nvidia-ml-py",
    "cuda": "cuda-bindings",
}

#: Third-party names vLLM imports at module level (or under a module-level ``if``) on the path, that
#: neither the image nor the bundle provides: each behind a condition that is false on this host and
#: configuration.
OPTIONAL_IMPORTS: dict[str, str] = {
    "flash_attn": "upstream flash-attn, imported in fa_utils only on ROCm",
    "flashinfer": "imported under `if has_flashinfer()`-style conditions (all-reduce fusion, all2all)",
    "modelscope": "only with VLLM_USE_MODELSCOPE=1",
    "torchao": "torchao quantization, under a version check of an installed torchao",
    "triton_kernels": "MoE mxfp4 kernels, under has_triton_kernels()",
    "vllm_xpu_kernels": "Intel XPU platform only",
    "deep_ep": "MoE all-to-all, under has_deep_ep()",
    "mori": "ROCm MoE all-to-all, under a ROCm check",
    "nixl_ep": "MoE all-to-all over NIXL, under has_nixl_ep()",
    "aiter": "ROCm kernels",
    "amdsmi": "ROCm platform detection",
    "pandas": "try-guarded in vllm._aiter_ops (ROCm)",
}

#: The environment every vLLM engine of the check runs with (and the probe imports under).
ENGINE_ENV: dict[str, str] = {
    # On CUDA TopKTopPSampler.__init__ calls flashinfer_sampler_supported(), which imports
    # vllm.v1.attention.backends.flashinfer (module-level `from flashinfer import ...`) unless this is 0.
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
    # 0.26.0 runs the draft-model method on the V1 model runner only, and would pick V2 for a
    # speculation-free Llama: every engine of a comparison on the same runner.
    "VLLM_USE_V2_MODEL_RUNNER": "0",
    # vLLM's default puts the engine core in a process of its own; on the GPU host (2026-12-06) such an
    # engine made no progress in 240 s and printed nothing but c10d's "hostname of the client socket cannot
    # be retrieved", while the same engine in-process started in 14 s. Every engine of the check runs its
    # core in-process (the offline LLM loop is synchronous either way).
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}

#: What the probe imports on the host, cheapest first: the bundle's own wheels, then vLLM's modules along
#: the path (module-level imports are followed by ``vllm_imports.ImportGraph``; the lazily imported ones
#: that run at every start are listed too), then specpolicy's adapter and the test policies.
PROBE_MODULES: tuple[str, ...] = (
    "torch",
    "triton",
    *(m for p in PINS for m in p.imports),
    "vllm",
    "vllm.envs",
    "vllm._C_stable_libtorch",
    "vllm.platforms.cuda",
    "vllm.vllm_flash_attn",
    "vllm.config",
    "vllm.engine.arg_utils",
    "vllm.entrypoints.llm",
    "vllm.v1.engine.llm_engine",
    "vllm.v1.engine.core",
    "vllm.v1.engine.core_client",
    "vllm.v1.executor.uniproc_executor",
    "vllm.v1.executor.multiproc_executor",
    "vllm.v1.core.sched.scheduler",
    "vllm.v1.core.sched.async_scheduler",
    "vllm.v1.structured_output",
    "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu_model_runner",
    "vllm.v1.worker.gpu.model_runner",
    "vllm.v1.attention.selector",
    "vllm.v1.attention.backends.triton_attn",
    "vllm.v1.spec_decode.draft_model",
    "vllm.v1.spec_decode.eagle",
    "vllm.v1.spec_decode.metrics",
    "vllm.v1.spec_decode.dynamic.utils",
    "vllm.v1.sample.sampler",
    "vllm.v1.sample.rejection_sampler",
    "vllm.v1.sample.ops.topk_topp_sampler",
    "vllm.v1.metrics.loggers",
    "vllm.model_executor.models.registry",
    "vllm.model_executor.models.llama",
    "vllm.model_executor.models.llama_eagle",
    "vllm.model_executor.models.llama_eagle3",
    "vllm.model_executor.model_loader.default_loader",
    "vllm.compilation.backends",
    "vllm.compilation.cuda_graph",
    "vllm.compilation.piecewise_backend",
    "vllm.model_executor.warmup.kernel_warmup",
    "vllm.model_executor.warmup.minimax_m3_msa_warmup",
    "vllm.model_executor.kernels.linear.cute_dsl.ll_bf16",
    "vllm.tokenizers.hf",
    "vllm.device_allocator.cumem",
    "specpolicy.adapters.vllm.scheduler",
    "specpolicy.adapters.vllm.plugin",
    "specpolicy_gpucheck",
)


def pip_specs() -> list[str]:
    """``name==version`` of every wheel to download, vLLM first."""
    return [VLLM, *(p.spec for p in PINS)]


def provider(import_name: str, image: dict[str, str] | None = None) -> str:
    """Who provides a top-level import on the host: ``bundle: <pin>``, ``image: <dist>``, ``optional:
    <why>`` or ``MISSING``. ``image`` is the freeze (canonical name -> version); default: the 2026-12-02
    list in results/2026-12-02-sglang-0.5.12.post1-run7."""
    for p in PINS:
        if import_name in p.imports:
            return f"bundle: {p.spec}"
    image = _image() if image is None else image
    dist = IMAGE_IMPORTS.get(import_name, import_name)
    key = dist.lower().replace("_", "-").replace(".", "-")
    if key in image:
        return f"image: {dist}=={image[key]}"
    if import_name in OPTIONAL_IMPORTS:
        return "optional: " + OPTIONAL_IMPORTS[import_name][:34]
    return "MISSING"


def _image() -> dict[str, str]:
    from specpolicy_livecheck.bundle_plan import read_freeze

    return read_freeze(paths.IMAGE_PACKAGES.read_text())


# ----------------------------------------------------------------------------------------------- install
def part_files(folders: Sequence[Path]) -> list[Path]:
    """The bundle's parts (``part.NN``) found in ``folders``, in order; each name once (a part carried
    again in a later call and already stashed is the same file)."""
    found: dict[str, Path] = {}
    for folder in folders:
        if folder.is_dir():
            for f in sorted(folder.glob("part.*")):
                found.setdefault(f.name, f)
    return [found[k] for k in sorted(found)]


class _Joined:
    """The parts read back to back as one binary stream (for tarfile's streaming mode)."""

    def __init__(self, parts: Sequence[Path]) -> None:
        self._files: Iterator[Path] = iter(parts)
        self._cur: IO[bytes] | None = None
        self.digest = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        while True:
            if self._cur is None:
                nxt = next(self._files, None)
                if nxt is None:
                    return b""
                self._cur = open(nxt, "rb")  # noqa: SIM115  (closed when exhausted)
            data = self._cur.read(n)
            if data:
                self.digest.update(data)
                return data
            self._cur.close()
            self._cur = None


def install(
    folders: Sequence[Path], site: Path, tree: Path = paths.REPO, manifest: Path | None = None
) -> dict[str, Any]:
    """Unpack the bundle (parts in ``folders``) into ``site``, then install specpolicy and the test
    policies from the repository ``tree`` (no index, no dependencies: the bundle has them). Returns what it
    did; raises RuntimeError naming what is missing. Safe to call again: a site holding vllm is kept."""
    out: dict[str, Any] = {"site": str(site)}
    t0 = time.time()
    site.mkdir(parents=True, exist_ok=True)
    if not (site / "vllm" / "__init__.py").exists():
        parts = part_files(folders)
        if not parts:
            raise RuntimeError(f"no bundle parts (part.NN) in {[str(f) for f in folders]}")
        want = json.loads(manifest.read_text()) if manifest and manifest.exists() else None
        if want and len(parts) != len(want["parts"]):
            raise RuntimeError(
                f"bundle has {len(want['parts'])} parts, found {len(parts)}: {[p.name for p in parts]}"
            )
        stream = _Joined(parts)
        with tarfile.open(fileobj=stream, mode="r|xz") as tar:  # type: ignore[call-overload]
            tar.extractall(site, filter="tar")
        while stream.read(1 << 20):  # the xz index and padding after the archive: the digest covers all
            pass
        out["sha256"] = stream.digest.hexdigest()
        if want and out["sha256"] != want["sha256"]:
            raise RuntimeError(f"bundle sha256 {out['sha256']} != manifest {want['sha256']}")
        out["parts"] = [p.name for p in parts]
    out["unpack_s"] = round(time.time() - t0, 1)
    t1 = time.time()
    if not (site / "specpolicy" / "__init__.py").exists():
        with tempfile.TemporaryDirectory() as tmp:
            # Built from copies: a build leaves metadata in its source folder, and the test policies'
            # entry points must not register from the repository for anything but this site.
            for name, src in (
                ("specpolicy", tree),
                ("gpucheck", tree / paths.POLICIES_PROJECT.relative_to(paths.REPO)),
            ):
                dst = Path(tmp) / name
                ignore = shutil.ignore_patterns(
                    ".git", ".venvs", ".carry", "build", "*.egg-info", "docs", "results", "tests", "tools"
                )
                shutil.copytree(src, dst, ignore=ignore)
                cmd = [
                    sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--no-build-isolation",
                    "--no-compile", "--disable-pip-version-check", "--target", str(site), str(dst),
                ]  # fmt: skip
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if proc.returncode:
                    raise RuntimeError(f"pip install {name} failed:\n{proc.stdout}\n{proc.stderr}")
    out["specpolicy_s"] = round(time.time() - t1, 1)
    out["install_s"] = round(time.time() - t0, 1)
    return out


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("pins", help="print the wheels to download (name==version), one a line")
    sub.add_parser("platforms", help="print the --platform tags for pip download")
    sub.add_parser("drops", help="print the paths cut from the vLLM wheel, one a line")
    sub.add_parser("env", help="print the engine environment as shell exports")
    sub.add_parser("why", help="print every decision with its reason")
    i = sub.add_parser("install", help="unpack the bundle parts into a site folder and install specpolicy")
    i.add_argument("--site", type=Path, default=Path("/tmp/vsite"))
    i.add_argument("--manifest", type=Path, help="manifest.json written beside the parts")
    i.add_argument("folders", type=Path, nargs="+", help="folders holding part.NN files")
    args = ap.parse_args(argv)
    if args.cmd == "pins":
        print("\n".join(pip_specs()))
    elif args.cmd == "platforms":
        print(" ".join(PLATFORMS))
    elif args.cmd == "drops":
        print("\n".join(path for path, _ in DROPS))
    elif args.cmd == "env":
        print("\n".join(f"export {k}={v}" for k, v in ENGINE_ENV.items()))
    elif args.cmd == "why":
        print(f"in:   {VLLM}  (slimmed: {len(DROPS)} cuts)")
        for p in PINS:
            print(f"in:   {p.spec:34s} {p.why}")
        for name, why in LEFT_OUT.items():
            print(f"out:  {name:34s} {why}")
        for name, why in HELD.items():
            print(f"held: {name:34s} {why}")
        for path, why in DROPS:
            print(f"cut:  {path:34s} {why}")
    else:
        print(json.dumps(install(args.folders, args.site, manifest=args.manifest)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
