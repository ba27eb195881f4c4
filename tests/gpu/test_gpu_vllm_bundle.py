"""The offline vLLM bundle (scripts/gpu/vllm_bundle.py) against vLLM 0.26.0's source and the GPU image.

What the bundle carries must be what the offline speculative path imports and the image lacks: every
third-party module that path imports at module level (or under a module-level ``if``) has a provider
(the image, a pin, or a condition false on the host); every pin is imported by the path or required by
another pin; every requirement ``bundle_plan.py`` finds missing is pinned or left out with a reason;
nothing is bundled over a package the image holds; the cut kernels are imported only behind guards. The
source-reading tests need the vLLM 0.26.0 engine venv (``scripts/engine-envs.sh vllm-0.26.0``) and skip
without it; the install round trip runs anywhere.
"""

from __future__ import annotations

import fnmatch
import io
import json
import lzma
import subprocess
import tarfile
from pathlib import Path

import bundle_plan
import pytest
import vllm_bundle
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from vllm_imports import ImportGraph

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / ".venvs" / "vllm-0.26.0" / "lib" / "python3.11" / "site-packages"
METADATA = SITE / "vllm-0.26.0.dist-info" / "METADATA"
IMAGE = ROOT / "results" / "2026-12-02-sglang-0.5.12.post1-run7" / "gpu-image-packages-2026-12-02.txt"
needs_source = pytest.mark.skipif(
    not METADATA.is_file(), reason="needs the vLLM 0.26.0 engine venv (scripts/engine-envs.sh vllm-0.26.0)"
)
VLLM_ROOTS = [m for m in vllm_bundle.PROBE_MODULES if m.startswith("vllm")]


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    return ImportGraph(SITE)


@pytest.fixture(scope="module")
def image() -> dict[str, str]:
    return bundle_plan.read_freeze(IMAGE.read_text())


def test_pins_are_exact_unique_and_not_in_the_image(image: dict[str, str]) -> None:
    names = [canonicalize_name(p.name) for p in vllm_bundle.PINS]
    assert len(names) == len(set(names))
    imports = [m for p in vllm_bundle.PINS for m in p.imports]
    assert len(imports) == len(set(imports))
    for p in vllm_bundle.PINS:
        Version(p.version)  # an exact, valid version
        assert p.why.strip()
        # nothing bundled over a package the image holds (it would shadow the image's on PYTHONPATH)
        assert canonicalize_name(p.name) not in image, f"{p.name} is in the image ({image.get(p.name)})"
        if p.needed_by != "vllm":
            assert canonicalize_name(p.needed_by) in names, f"{p.name}: needed by unknown {p.needed_by}"
    assert vllm_bundle.pip_specs()[0] == vllm_bundle.VLLM == "vllm==0.26.0"


@needs_source
def test_every_missing_requirement_is_pinned_or_left_out_with_a_reason(image: dict[str, str]) -> None:
    plan = bundle_plan.plan(bundle_plan.read_requirements(METADATA), image, "3.12.3")
    missing = {canonicalize_name(Requirement(r).name): Requirement(r) for r in plan.missing}
    pinned = {canonicalize_name(p.name): p for p in vllm_bundle.PINS}
    left_out = {canonicalize_name(n) for n in vllm_bundle.LEFT_OUT}
    assert len(missing) == 45
    undecided = sorted(set(missing) - set(pinned) - left_out)
    assert not undecided, f"missing from the image, neither bundled nor left out with a reason: {undecided}"
    assert not set(pinned) & left_out
    stale = sorted(left_out - set(missing))
    assert not stale, f"LEFT_OUT names requirements the image does not lack: {stale}"
    for name, req in missing.items():
        if name in pinned:
            inside = req.specifier.contains(pinned[name].version, prereleases=True)
            assert inside != (name in vllm_bundle.OUTSIDE_REQUIREMENT), (
                f"{pinned[name].spec} against vLLM's requirement {req}: outside it only with a reason in "
                "OUTSIDE_REQUIREMENT, and listed there only when outside"
            )
    # held at another version: each has a note, none is bundled over the image's
    held = {canonicalize_name(Requirement(r).name) for r in plan.conflicting}
    assert held == {canonicalize_name(n) for n in vllm_bundle.HELD}
    assert not held & set(pinned)


@needs_source
def test_every_module_level_import_of_the_path_has_a_provider(
    graph: ImportGraph, image: dict[str, str]
) -> None:
    external = graph.external(VLLM_ROOTS, kinds=("top", "cond"))
    unprovided = {
        name: [f"{e.module}:{e.line}" for e in edges[:3]]
        for name, edges in external.items()
        if vllm_bundle.provider(name, image) == "MISSING"
    }
    assert not unprovided, f"imported on the path, provided by neither the image nor the bundle: {unprovided}"
    # the ones the bundle must provide really are imported unconditionally at module level
    unconditional = graph.external(VLLM_ROOTS, kinds=("top",))
    for p in vllm_bundle.PINS:
        if p.needed_by == "vllm":
            assert any(m in unconditional for m in p.imports), f"{p.spec}: no module-level import on the path"
    # and the optional ones are never imported unconditionally
    for name in vllm_bundle.OPTIONAL_IMPORTS:
        assert name not in unconditional, f"{name} is imported unconditionally: bundle it or say why not"


@needs_source
def test_probe_modules_exist_and_cover_the_path(graph: ImportGraph) -> None:
    for m in VLLM_ROOTS:
        ext = list(SITE.glob(m.replace(".", "/") + ".*.so"))  # a compiled module (vllm._C_stable_libtorch)
        assert m in graph.files or ext, f"{m} is not a module of vLLM 0.26.0"
    for m in (
        "vllm.entrypoints.llm",
        "vllm.v1.engine.core",
        "vllm.v1.worker.gpu_model_runner",
        "vllm.v1.attention.backends.triton_attn",
        "vllm.v1.spec_decode.draft_model",
        "vllm.v1.spec_decode.eagle",
        "vllm.v1.metrics.loggers",
    ):
        assert m in vllm_bundle.PROBE_MODULES
    for p in vllm_bundle.PINS:
        assert set(p.imports) <= set(vllm_bundle.PROBE_MODULES)
    # the reason FA3 stays: the path imports vllm.vllm_flash_attn at module level on CUDA
    chain = graph.chain("vllm.vllm_flash_attn", ["vllm.v1.worker.gpu_model_runner"])
    assert chain[0] == "vllm.vllm_flash_attn" and len(chain) > 1, chain


@needs_source
def test_cut_files_exist_and_are_imported_only_behind_guards(graph: ImportGraph) -> None:
    files = [str(p.relative_to(SITE)) for p in (SITE / "vllm").rglob("*")]
    reached = graph.closure(VLLM_ROOTS, kinds=("top", "cond"))
    for pattern, why in vllm_bundle.DROPS:
        assert why.strip()
        hits = [f for f in files if fnmatch.fnmatch(f, pattern) or f.startswith(pattern + "/")]
        assert hits, f"drop {pattern} matches nothing in the vLLM 0.26.0 install"
        if pattern.endswith(".so"):
            module = pattern.removesuffix(".so").split(".")[0].replace("/", ".")
            for m in reached:
                for e in graph.edges(m):
                    assert not (e.target == module and e.kind in ("top", "cond")), (
                        f"{module} is cut but {e.module}:{e.line} imports it unguarded"
                    )
    assert not any("_vllm_fa3_C" in p for p, _ in vllm_bundle.DROPS)


@needs_source
def test_the_engine_environment_switches_what_the_source_says() -> None:
    sampler = (SITE / "vllm" / "v1" / "sample" / "ops" / "topk_topp_sampler.py").read_text()
    assert "VLLM_USE_FLASHINFER_SAMPLER" in sampler
    assert "from vllm.v1.attention.backends.flashinfer import" in sampler
    assert vllm_bundle.ENGINE_ENV["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    assert vllm_bundle.ENGINE_ENV["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    envs = (SITE / "vllm" / "envs.py").read_text()
    for key in vllm_bundle.ENGINE_ENV:
        if key.startswith("VLLM_"):
            assert f'"{key}"' in envs, f"{key} is not one of vLLM 0.26.0's environment variables"


def test_make_script_reads_the_lists_and_splits_at_part_mib() -> None:
    script = (ROOT / "scripts" / "gpu" / "make_vllm_bundle.sh").read_text()
    assert '"${B[@]}" pins' in script and '"${B[@]}" drops' in script and '"${B[@]}" platforms' in script
    assert f"split -b {vllm_bundle.PART_MIB}M" in script
    assert "--no-deps --only-binary=:all: --python-version 3.12" in script
    assert (
        subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu" / "make_vllm_bundle.sh")]).returncode == 0
    )
    # a part beside the ~17 MB repository stays under one call's 64 MiB
    assert vllm_bundle.PART_MIB * 2**20 + 17_500_000 < 64 * 2**20


def test_cli_prints_the_lists(capsys: pytest.CaptureFixture[str]) -> None:
    assert vllm_bundle.main(["pins"]) == 0
    assert capsys.readouterr().out.split() == vllm_bundle.pip_specs()
    assert vllm_bundle.main(["drops"]) == 0
    assert capsys.readouterr().out.split("\n")[0] == vllm_bundle.DROPS[0][0]
    assert vllm_bundle.main(["why"]) == 0
    text = capsys.readouterr().out
    assert all(p.spec in text for p in vllm_bundle.PINS) and all(n in text for n in vllm_bundle.LEFT_OUT)


def _bundle(tmp: Path, files: dict[str, bytes], split_at: int) -> tuple[list[Path], str]:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    blob = lzma.compress(raw.getvalue())
    import hashlib

    folders = []
    for i, start in enumerate(range(0, len(blob), split_at)):
        folder = tmp / f"p{i + 1}"
        folder.mkdir()
        (folder / f"part.{i:02d}").write_bytes(blob[start : start + split_at])
        folders.append(folder)
    return folders, hashlib.sha256(blob).hexdigest()


def test_install_joins_parts_checks_the_digest_and_is_idempotent(tmp_path: Path) -> None:
    files = {
        "vllm/__init__.py": b"__version__ = '0.26.0'\n",
        "pydantic/__init__.py": b"",
        "x/" + "y" * 9: b"z",
    }
    folders, sha = _bundle(tmp_path, files, split_at=40)
    assert len(folders) > 1
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"sha256": sha, "parts": [f"part.{i:02d}" for i in range(len(folders))]}))
    site = tmp_path / "site"
    (site / "specpolicy").mkdir(parents=True)  # specpolicy already there: the tree build is skipped
    (site / "specpolicy" / "__init__.py").write_text("")
    # parts stashed in an earlier call and carried again are one file each
    stash = tmp_path / "stash"
    stash.mkdir()
    (stash / "part.00").write_bytes((folders[0] / "part.00").read_bytes())
    out = vllm_bundle.install([stash, *folders], site, manifest=manifest)
    assert out["sha256"] == sha and out["parts"] == [f"part.{i:02d}" for i in range(len(folders))]
    assert (site / "vllm" / "__init__.py").read_text().startswith("__version__")
    again = vllm_bundle.install([], site)  # vllm present: nothing to unpack
    assert "parts" not in again


def test_install_refuses_a_wrong_or_incomplete_bundle(tmp_path: Path) -> None:
    folders, sha = _bundle(tmp_path, {"vllm/__init__.py": b"x" * 200}, split_at=64)
    manifest = tmp_path / "manifest.json"
    parts = [f"part.{i:02d}" for i in range(len(folders))]
    manifest.write_text(json.dumps({"sha256": "0" * 64, "parts": parts}))
    with pytest.raises(RuntimeError, match="sha256"):
        vllm_bundle.install(folders, tmp_path / "a", manifest=manifest)
    manifest.write_text(json.dumps({"sha256": sha, "parts": parts}))
    with pytest.raises(RuntimeError, match="parts"):
        vllm_bundle.install(folders[:-1], tmp_path / "b", manifest=manifest)
    with pytest.raises(RuntimeError, match="no bundle parts"):
        vllm_bundle.install([tmp_path / "nowhere"], tmp_path / "c")


def test_probe_reports_the_missing_module_name() -> None:
    import vllm_probe

    recs = vllm_probe.probe_imports(("json", "specpolicy_no_such_module_xyz"))
    assert recs[0]["ok"] and not recs[1]["ok"]
    assert recs[1]["missing"] == "specpolicy_no_such_module_xyz"
    # the probe's own engine models have a head size the triton backend serves
    assert vllm_probe.PROBE_SHAPE["head_dim"] in (64, 128)


def test_a_lazy_loader_read_while_importing_is_a_module_level_import(tmp_path: Path) -> None:
    """The first probe on the host failed on llguidance: vLLM loads it through ``LazyLoader``, but a class
    body's annotation reads an attribute of the loader at import time. The graph counts such reads as
    ``top`` imports; reads inside functions, and annotations under ``from __future__ import annotations``,
    stay lazy."""
    pkg = tmp_path / "vllm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    loader = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import {m}\n"
        'else:\n    {n} = LazyLoader("{n}", globals(), "{m}")\n'
    )
    (pkg / "eager.py").write_text(loader.format(n="g", m="gmod") + "class A:\n    x: g.Matcher\n")
    (pkg / "value.py").write_text(loader.format(n="h", m="hmod") + "DEFAULT = h.VERSION\n")
    (pkg / "later.py").write_text(loader.format(n="k", m="kmod") + "def f():\n    return k.Thing()\n")
    (pkg / "future.py").write_text(
        "from __future__ import annotations\n" + loader.format(n="q", m="qmod") + "class B:\n    y: q.T\n"
    )
    g = ImportGraph(tmp_path)
    names = ("eager", "value", "later", "future")
    top = {m: {e.target for e in g.edges(f"vllm.{m}") if e.kind == "top"} for m in names}
    assert "gmod" in top["eager"] and "hmod" in top["value"]
    assert "kmod" not in top["later"] and "qmod" not in top["future"]
    assert g.external(["vllm.eager"], kinds=("top",)).keys() >= {"gmod"}


def test_a_hung_probe_engine_reports_its_output_and_where_it_waits(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The first probe's engine hung and the report held one line of stderr: vLLM logs to stdout, and the
    child had no deadline of its own. Now the child is told to dump its stacks before the timeout, and a
    failed run keeps and prints both streams."""
    import vllm_probe

    seen: dict[str, object] = {}

    def run(cmd: list[str], **kw: object) -> object:
        seen["cmd"] = cmd
        out, err = b"INFO engine core starting\n", b"Thread 0x1 ...\n"
        raise subprocess.TimeoutExpired(cmd, 240.0, output=out, stderr=err)

    monkeypatch.setattr(vllm_probe.subprocess, "run", run)
    rec = vllm_probe.run_engine(tmp_path, 240.0)
    cmd = seen["cmd"]
    assert isinstance(cmd, list) and cmd[cmd.index("--hang-dump-s") + 1] == "220.0"
    assert rec["rc"] == -9 and not rec["ok"]
    assert "engine core starting" in rec["stdout_tail"] and "Thread 0x1" in rec["stderr_tail"]
    printed = capsys.readouterr().out
    assert "engine core starting" in printed and "Thread 0x1" in printed
