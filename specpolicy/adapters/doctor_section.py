"""One report shape for every engine in ``specpolicy doctor``: the same JSON keys, the same text lines.

Each engine's doctor fills a section from ``new_section`` and records what stands in the way with
``problem(what, fix)``, so every problem carries its fix; ``print_section`` renders any engine the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TextIO

__all__ = [
    "new_section",
    "problem",
    "install_fix",
    "internals_fix",
    "target_problems",
    "finish",
    "print_section",
    "REINSTALL_FIX",
    "SMOKE_REPORT_FIX",
    "SMOKE_RUN_FIX",
]

#: Fixes every engine's doctor gives.
REINSTALL_FIX = (
    "reinstall specpolicy into this Python, which registers its entry points: pip install --force-reinstall "
    "--no-deps <specpolicy checkout or wheel> (README.md, Installing on a serving machine)"
)
SMOKE_REPORT_FIX = "please report it, with the output of the same command with --json"
SMOKE_RUN_FIX = "check that the model and drafter load in the engine on their own; the error is above"


def new_section(engine: str, version: str | None, tested: Sequence[str]) -> dict[str, Any]:
    """Every key, for every engine; the fields that need the engine installed start empty."""
    return {
        "engine": engine,
        "version": version,
        "tested": list(tested),
        "supported": False,
        "route": None,
        "paths": [],
        "entry_point": None,
        "targets": {},
        "gpu": None,
        "smoke": None,
        "problems": [],
        "ok": False,
    }


def problem(what: str, fix: str) -> str:
    """A problem line: what is wrong, then what to do about it."""
    return f"{what}; fix: {fix}"


def install_fix(package: str, tested: Sequence[str]) -> str:
    """How to get a tested release of an engine into this Python."""
    return f"pip install '{package}=={tested[-1]}' into this Python (tested releases: {', '.join(tested)})"


def internals_fix(why: str, package: str, tested: Sequence[str]) -> str:
    """The fix when an engine internal the adapter hooks cannot be found: ``why`` says how it failed."""
    if "import" in why or "ModuleNotFoundError" in why:
        fix = "install the module the import error names, or the engine with its dependencies: "
        return fix + install_fix(package, tested)
    return "install a tested release (the adapter knows its internals): " + install_fix(package, tested)


def target_problems(targets: dict[str, str], package: str, tested: Sequence[str]) -> list[str]:
    """A problem, with its fix, for each hooked engine name that is not ``"ok"``."""
    return [
        problem(f"{name}: {why}", internals_fix(why, package, tested))
        for name, why in targets.items()
        if why != "ok"
    ]


def finish(section: dict[str, Any], problems: Iterable[str]) -> dict[str, Any]:
    section["problems"] = list(problems)
    section["ok"] = not section["problems"]
    return section


def print_section(section: dict[str, Any], label: str, out: TextIO, details: Iterable[str] = ()) -> None:
    """``LABEL: VERSION, supported (tested: ...)``, the installation, ``details``, one line per problem."""
    version = section["version"]
    if version is None:
        state = "not installed"
    else:
        state = f"{version}, {'supported' if section['supported'] else 'not a tested release'}"
    print(f"{label}: {state} (tested: {', '.join(section['tested'])})", file=out)
    if version is not None:
        if section["route"]:
            print(f"  route: {section['route']}; worker paths: {', '.join(section['paths'])}", file=out)
        entry = section["entry_point"]
        print(f"  plugin entry point: {'registered' if entry else 'MISSING'}", file=out)
        targets = section["targets"]
        missing = sum(why != "ok" for why in targets.values())
        print(f"  hooked engine internals: {len(targets) - missing} ok, {missing} missing", file=out)
        print(f"  GPU: {section['gpu'] or 'none (smoke test unavailable)'}", file=out)
    for line in details:
        print(f"  {line}", file=out)
    for p in section["problems"]:
        print(f"  PROBLEM: {p}", file=out)
