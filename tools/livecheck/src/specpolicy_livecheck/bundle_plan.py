#!/usr/bin/env python3
"""What an engine wheel needs that the GPU host's image lacks: the first list of an offline bundle.

The GPU host has no package index, so an engine goes there as a bundle of the exact wheels its image does
not hold (sh/make_bundle.sh does it for SGLang). This reads the engine's declared requirements
(``Requires-Dist`` in its wheel's METADATA, or the wheel itself) and the image's ``pip list
--format=freeze``, evaluates each requirement's environment marker for the host (its Python, Linux,
x86_64; no extras), and sorts the requirements into those the image lacks, those it holds at a version
the requirement excludes, and those it satisfies. It says what is declared, not what the CUDA code path
imports: an import probe on the host decides what the bundle can leave out (for SGLang the image lacked
48 small wheels besides the engine and its kernel). Usage::

    specpolicy-livecheck bundle plan \\
        .venvs/vllm-0.26.0/lib/python3.11/site-packages/vllm-0.26.0.dist-info/METADATA \\
        results/2026-12-02-sglang-0.5.12.post1-run7/gpu-image-packages-2026-12-02.txt [--python 3.12.3]
        [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

__all__ = ["Plan", "host_environment", "plan", "read_freeze", "read_requirements"]


@dataclass(frozen=True)
class Plan:
    """Requirement strings by what the image holds; ``held`` maps a conflicting name to its version."""

    missing: list[str]
    conflicting: list[str]
    held: dict[str, str]
    satisfied: list[str]
    skipped: list[str]  # markers false on the host (another platform, an extra)


def host_environment(python: str) -> dict[str, str]:
    """Marker environment of the GPU host: Linux x86_64 with CPython ``python`` (e.g. "3.12.3")."""
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    major_minor = ".".join(python.split(".")[:2])
    env.update(
        python_version=major_minor,
        python_full_version=python,
        implementation_version=python,
        implementation_name="cpython",
        platform_python_implementation="CPython",
        platform_machine="x86_64",
        platform_system="Linux",
        sys_platform="linux",
        os_name="posix",
    )
    return env


def read_requirements(source: Path) -> list[str]:
    """``Requires-Dist`` lines of a METADATA file, or of the METADATA inside a wheel."""
    if source.suffix == ".whl":
        with zipfile.ZipFile(source) as wheel:
            name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
            text = wheel.read(name).decode()
    else:
        text = source.read_text()
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def read_freeze(text: str) -> dict[str, str]:
    """``name==version`` lines (``pip list --format=freeze``) as canonical name -> version."""
    held: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and name and not name.startswith("#"):
            held[canonicalize_name(name)] = version.strip()
    return held


def plan(requirements: list[str], image: dict[str, str], python: str) -> Plan:
    """Sort ``requirements`` against ``image`` (canonical name -> version) for a host running ``python``."""
    env = host_environment(python)
    out = Plan([], [], {}, [], [])
    for text in requirements:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
            out.skipped.append(text)
            continue
        have = image.get(canonicalize_name(req.name))
        if have is None:
            out.missing.append(text)
            continue
        try:
            ok = req.specifier.contains(Version(have), prereleases=True)
        except InvalidVersion:
            ok = False
        if ok:
            out.satisfied.append(text)
        else:
            out.conflicting.append(text)
            out.held[req.name] = have
    return out


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("requirements", type=Path, help="the engine's METADATA file or wheel")
    ap.add_argument("image", type=Path, help="the image's pip list --format=freeze")
    ap.add_argument("--python", default="3.12.3", help="the host's Python (default 3.12.3)")
    ap.add_argument("--json", type=Path, help="also write the plan as JSON")
    args = ap.parse_args(argv)
    for path in (args.requirements, args.image):
        if not path.is_file():
            print(f"bundle_plan: {path}: no such file", file=sys.stderr)
            return 2
    result = plan(read_requirements(args.requirements), read_freeze(args.image.read_text()), args.python)
    print(f"missing from the image ({len(result.missing)}):")
    for r in result.missing:
        print(f"  {r}")
    print(f"held at another version ({len(result.conflicting)}):")
    for r in result.conflicting:
        print(f"  {r}  (image: {result.held[Requirement(r).name]})")
    print(f"satisfied: {len(result.satisfied)}; not for this host (markers, extras): {len(result.skipped)}")
    if args.json:
        args.json.write_text(json.dumps(asdict(result), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
