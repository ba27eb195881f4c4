#!/usr/bin/env python3
"""The offline SGLang bundles for the GPU host: one row of pins per release, read by ``make_bundle.sh``.

The host (CPython 3.12.3, torch 2.11.0+cu130, triton 3.6.0; its packages:
results/2026-12-02-sglang-0.5.12.post1-run7/gpu-image-packages-2026-12-02.txt) has no package index and takes
at most 64 MiB per command, the repository (~18 MB) included. A release can run there only if it pins torch
2.11 (0.5.11 to 0.5.17) and its kernels are built for CUDA 13. Per release:

- ``pins``: the wheels the offline engine path imports and the image lacks (or holds at a version the
  release refuses), exact versions: the release's own ``==`` pins where it has them, else the versions the
  0.5.12.post1 bundle ran on the host;
- ``kernel``: the ``sglang-kernel`` wheel, unpacked and slimmed (``kernel_drop``: the libraries a Llama
  engine on an H100/H200 with the triton or flashinfer attention backend never loads; ``sm100`` ops are
  for Blackwell, ``flash_ops`` is FA3, ``flashmla_ops`` and ``infllm_ops`` serve MLA and InfLLM models);
- ``held``: the release's requirements the image holds at another version, and why that version stays;
- ``left_out``: requirements the image lacks that the bundle leaves out, each with why the path does
  without it (read from the release's module-level imports of the Engine, scheduler, model runner, v2
  speculative workers, triton and flashinfer attention backends, and the Llama model);
- ``image``: the image's packages the engine path imports, at the image's version;
- ``cuts``: members cut from a pinned wheel (``wheel_cut``), each with why no engine process loads it.

``make_bundle.sh`` asks this module for ``pins``, ``kernel``, ``drops`` and ``cuts``;
``tools/livecheck/tests/test_lc_sglang_bundle.py`` holds the rows to the release's METADATA (where an engine
environment has it) and to the image's list.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

__all__ = ["Release", "RELEASES", "DEFAULT", "release", "PLATFORMS"]

#: The platform tags ``pip download`` asks for (the host: CPython 3.12, glibc manylinux, x86_64).
PLATFORMS = (
    "manylinux_2_34_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
)


@dataclass(frozen=True)
class Release:
    """One release's bundle: ``pins`` as ``name==version`` (the engine first), the kernel wheel and what
    is cut from it, and the reasons for what is held or left out."""

    version: str
    pins: tuple[str, ...]
    kernel: str
    kernel_keep: tuple[str, ...]
    kernel_drop: tuple[str, ...]
    held: dict[str, str] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)
    image: tuple[str, ...] = ()
    cuts: tuple[tuple[str, str, str], ...] = ()  # (pinned name, member glob, why)

    def __post_init__(self) -> None:
        if not self.pins or self.pins[0] != f"sglang=={self.version}":
            raise ValueError(f"Release {self.version}: pins must start with sglang=={self.version}")
        names = [p.split("==")[0].lower().replace("_", "-") for p in self.pins]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup or any("==" not in p for p in self.pins):
            raise ValueError(f"Release {self.version}: pins must be unique name==version, got {dup}")
        stray = sorted({c[0] for c in self.cuts} - set(names))
        if stray:
            raise ValueError(f"Release {self.version}: cuts name wheels it does not pin: {stray}")

    @property
    def kernel_version(self) -> str:
        return self.kernel.split("==")[1]


#: The small pure-Python wheels both bundles carry (the engine path imports them; the image lacks them).
_COMMON = (
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    "fastapi==0.118.0",  # newer ones import opentelemetry at start-up
    "starlette==0.48.0",
    "uvicorn==0.54.0",
    "python-multipart==0.0.34",
    "orjson==3.13.0",
    "pybase64==1.5.1",
    "pyzmq==27.3.0",
    "msgspec==0.23.0",
    "setproctitle==1.3.8",
    "partial_json_parser==0.2.1.1.post7",
    "compressed-tensors==0.20.1",
    "loguru==0.7.3",
    "gguf==0.19.0",
    "interegular==0.3.3",
    "torchao==0.17.0",
    "torch_memory_saver==0.0.10",
    "openai==2.6.1",
    "distro==1.9.0",
    "jiter==0.19.0",
    "sniffio==1.3.1",
    "openai-harmony==0.0.4",
    "easydict==1.14",
    "dill==0.4.1",
    "ipython==9.18.1",
    "decorator==5.3.1",
    "jedi==0.20.1",
    "parso==0.8.7",
    "matplotlib-inline==0.2.2",
    "pexpect==4.9.0",
    "ptyprocess==0.7.0",
    "prompt_toolkit==3.0.53",
    "wcwidth==0.9.4",
    "stack_data==0.6.3",
    "executing==2.3.0",
    "asttokens==3.0.2",
    "pure_eval==0.2.4",
    "traitlets==5.16.1",
)

_KERNEL_KEEP = ("sgl_kernel", "triton_kernels")
#: Image packages the offline engine path imports at module level (both releases), by import name's
#: distribution: the bundle relies on them at the image's version.
_IMAGE = (
    "torch==2.11.0",
    "triton==3.6.0",
    "numpy==2.5.2",
    "huggingface_hub==1.33.0",
    "safetensors==0.8.0",
    "einops==0.8.2",
    "regex==2026.9.3",
    "PyYAML==6.0.3",
    "requests==2.34.2",
    "tqdm==4.70.1",
    "psutil==7.2.2",
    "pillow==12.3.0",
    "torchvision==0.26.0",
    "aiohttp==3.14.3",
    "Jinja2==3.1.6",
    "packaging==26.3",
    "filelock==3.32.5",
    "uvloop==0.23.0",
    "sentencepiece==0.2.2",
    "typing_extensions==4.16.0",
    "prometheus_client==0.26.0",
    "nvidia-ml-py==13.610.43",
    "cuda-bindings==13.3.1",
    "ninja==1.13.2",
    "tabulate==0.10.0",
    "click==8.5.0",
)

#: xgrammar's static library and headers serve C++ builds against it; Python loads its bindings only
_XGRAMMAR_CUTS = (
    ("xgrammar", "xgrammar/lib/*.a", "the static library, for C++ builds against xgrammar"),
    ("xgrammar", "xgrammar/include/*", "C++ headers"),
)

RELEASES: dict[str, Release] = {
    r.version: r
    for r in (
        Release(
            "0.5.12.post1",
            (
                "sglang==0.5.12.post1",
                "transformers==5.6.0",  # the image's 5.17 breaks 0.5.12.post1 ("'qwen3_asr' is already used")
                "tokenizers==0.22.2",
                "flashinfer_python==0.6.11.post1",
                "apache-tvm-ffi==0.1.9",
                "cuda-tile==1.7.0",
                "xgrammar==0.2.0",
                "llguidance==0.7.30",
                *_COMMON,
            ),
            "sglang-kernel==0.4.2.post2",
            _KERNEL_KEEP,
            ("sgl_kernel/flash_ops.abi3.so", "sgl_kernel/sm100"),
            image=_IMAGE,
            cuts=_XGRAMMAR_CUTS,
        ),
        Release(
            "0.5.17",
            (
                "sglang==0.5.17",
                "transformers==5.12.1",  # 0.5.17 pins it; the image holds 5.17.0
                "tokenizers==0.22.2",  # transformers 5.12.1 needs <=0.23.0; the image holds 0.23.2
                "flashinfer_python==0.6.15.post1",
                "apache-tvm-ffi==0.1.11",
                "cuda-tile==1.7.0",  # flashinfer's requirement (>=1.4.0); its cuTile kernels load lazily
                "xgrammar==0.2.1",
                # the draft worker's CUDA-graph capture imports dsa_backend, which imports deep_gemm at
                # module level on CUDA (seen live: every speculative engine failed at start-up without it)
                "sgl-deep-gemm==0.1.5.post1",
                *_COMMON,
            ),
            "sglang-kernel==0.4.5",
            _KERNEL_KEEP,
            (
                "sgl_kernel/flash_ops.abi3.so",
                "sgl_kernel/sm100",
                "sgl_kernel/flashmla_ops.abi3.so",
                "sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so",
            ),
            held={
                "transformers": "5.12.1 from the bundle: 0.5.17 pins it",
                "numba": "the image's 0.68.0: the engine path does not import numba (0.5.17 pins 0.65.1)",
                "timm": "the image's 1.0.29: vision models only (0.5.17 pins 1.0.16)",
            },
            left_out={
                "flash-attn-4": "FA4 (Blackwell); imported only by the fa4 attention backend",
                "nvidia-cutlass-dsl": "CuTe DSL kernels (DSA, FP4 MoE, flashinfer cute_dsl), lazily",
                "quack-kernels": "CuTe DSL kernels, imported lazily",
                "helion": "imported lazily by the helion kernels",
                "tilelang": "imported lazily by DSA / NSA kernels",
                "humming-kernels": "imported lazily by the humming quantization kernels",
                "tokenspeed-mla": "imported only by the tokenspeed_mla attention backend",
                "llguidance": "grammar_backend=none; imported only by the llguidance grammar backend",
                "outlines": "imported only by the outlines grammar backend",
                "anthropic": "the Anthropic-compatible HTTP endpoint only",
                "mistral-common": "Mistral tokenizers only",
                "modelscope": "only with SGLANG_USE_MODELSCOPE",
                "datasets": "benchmarks only",
                "blobfile": "tiktoken / remote files only",
                "smg-grpc-servicer": "the gRPC server only",
                "soundfile": "audio models only",
                "torchcodec": "video inputs only (imported inside try)",
                "kernels": "hub kernels, imported lazily",
                "cuda-python": "meta package; the image's cuda-bindings provides the cuda module",
                "nvidia-mathdx": "CuTe DSL math, lazily",
                "py-spy": "the watchdog's stack dumps only",
                "watchfiles": "the HTTP server's reload only",
                "zstandard": "compressed checkpoints only",
            },
            image=_IMAGE,
            cuts=_XGRAMMAR_CUTS,
        ),
    )
}
DEFAULT = "0.5.12.post1"


def release(version: str) -> Release:
    """The row of ``version``, or a ValueError naming the releases that have one."""
    try:
        return RELEASES[version]
    except KeyError:
        raise ValueError(f"no SGLang bundle row for {version!r}; rows: {', '.join(RELEASES)}") from None


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description="print a release's bundle rows, one item a line")
    ap.add_argument("what", choices=["pins", "kernel", "keep", "drops", "cuts", "platforms", "releases"])
    ap.add_argument("--release", default=DEFAULT)
    args = ap.parse_args(argv)
    if args.what == "platforms":
        print("\n".join(PLATFORMS))
        return 0
    if args.what == "releases":
        print("\n".join(RELEASES))
        return 0
    try:
        r = release(args.release)
    except ValueError as exc:
        print(f"sglang_bundle: {exc}", file=sys.stderr)
        return 2
    cuts = tuple(f"{name} {glob}" for name, glob, _ in r.cuts)
    rows = {
        "pins": r.pins,
        "kernel": (r.kernel,),
        "keep": r.kernel_keep,
        "drops": r.kernel_drop,
        "cuts": cuts,
    }
    print("\n".join(rows[args.what]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
