#!/bin/bash
# Build the offline SGLang 0.5.12.post1 bundle that scripts/gpu/run_live.sh installs on a GPU host with no
# package index (run it where pip can download). The host's image must already hold torch 2.11 (CUDA 13),
# triton and the other common packages; this bundle adds the exact set below (about 140 MB): sglang, a
# slimmed sglang-kernel (FA3 and the sm100 ops dropped: 322 MB -> 20 MB), transformers 5.6.0 (5.17 breaks
# sglang 0.5.12.post1) and the small pure-Python wheels sglang needs.
# Usage: bash scripts/gpu/make_bundle.sh OUT_DIR [SPLIT_SIZE, e.g. 48M, to also write part.* pieces]
set -e
OUT=${1:?out dir}; SPLIT=${2:-}
W=$(mktemp -d)
P="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
 --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 \
 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64"
PKGS="sglang==0.5.12.post1 sglang-kernel==0.4.2.post2 transformers==5.6.0 tokenizers==0.22.2
 flashinfer_python==0.6.11.post1 apache-tvm-ffi==0.1.9 cuda-tile==1.7.0 xgrammar==0.2.0 llguidance==0.7.30
 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
 fastapi==0.118.0 starlette==0.48.0 uvicorn==0.54.0 python-multipart==0.0.34
 orjson==3.13.0 pybase64==1.5.1 pyzmq==27.3.0 msgspec==0.23.0 setproctitle==1.3.8 partial_json_parser==0.2.1.1.post7
 compressed-tensors==0.20.1 loguru==0.7.3 gguf==0.19.0 interegular==0.3.3 torchao==0.17.0 torch_memory_saver==0.0.10
 openai==2.6.1 distro==1.9.0 jiter==0.19.0 sniffio==1.3.1 openai-harmony==0.0.4 easydict==1.14 dill==0.4.1
 ipython==9.18.1 decorator==5.3.1 jedi==0.20.1 parso==0.8.7 matplotlib-inline==0.2.2 pexpect==4.9.0 ptyprocess==0.7.0
 prompt_toolkit==3.0.53 wcwidth==0.9.4 stack_data==0.6.3 executing==2.3.0 asttokens==3.0.2 pure_eval==0.2.4 traitlets==5.16.1"
mkdir -p "$W/dl" "$W/bundle/wheels" "$W/sk" "$W/kslim"
for p in $PKGS; do python3 -m pip download $P -q -d "$W/dl" "$p"; done
(cd "$W/sk" && unzip -q "$W"/dl/sglang_kernel-0.4.2.post2-*.whl)
cp -r "$W"/sk/sgl_kernel "$W"/sk/triton_kernels "$W"/sk/sglang_kernel-0.4.2.post2.dist-info "$W/kslim/"
rm -rf "$W/kslim/sgl_kernel/flash_ops.abi3.so" "$W/kslim/sgl_kernel/sm100"
tar czf "$W/bundle/kslim.tar.gz" -C "$W/kslim" .
for f in "$W"/dl/*.whl; do case $(basename "$f") in sglang_kernel-*) ;; *) cp "$f" "$W/bundle/wheels/" ;; esac; done
mkdir -p "$OUT"
tar cf "$OUT/sglang-bundle.tar" -C "$W/bundle" .
[ -n "$SPLIT" ] && (cd "$OUT" && split -b "$SPLIT" -d sglang-bundle.tar part.)
sha256sum "$OUT/sglang-bundle.tar"
rm -rf "$W"
