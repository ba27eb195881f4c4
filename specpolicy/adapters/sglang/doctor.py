"""The SGLang part of ``specpolicy doctor``: is the adapter usable with the installed SGLang, and (on a GPU)
does switching keep its outputs and at what speed.

Without a GPU: the installed release and whether it is tested, the route and worker paths specpolicy would
use, whether the plugin entry point is registered, and whether every SGLang name the release's row in
``releases.RELEASES`` lists exists with the expected shape. ``smoke=True`` also runs ``smoke.smoke_test``.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from .._support import check_targets, entry_point_registered, gpu_name
from ..doctor_section import (
    REINSTALL_FIX,
    SMOKE_REPORT_FIX,
    SMOKE_RUN_FIX,
    finish,
    install_fix,
    new_section,
    print_section,
    problem,
    target_problems,
)
from . import releases, versions

__all__ = ["report", "section", "ENTRY_POINT"]

ENTRY_POINT = "specpolicy.adapters.sglang.plugin:register"
_PATHS = {
    "adaptive": ["adaptive-controller (EAGLEWorkerV2, overlap and non-overlap)"],
    "v2": ["v2 (EAGLEWorkerV2 / StandaloneWorkerV2, overlap and non-overlap; off = target decode)"],
    "legacy": ["v1 (EAGLEWorker, non-overlap)", "v2 (EAGLEWorkerV2, overlap)"],
}


def section(
    *,
    smoke: bool = False,
    model: str | None = None,
    draft: str | None = None,
    algorithm: str = "EAGLE3",
    num_steps: int = 3,
    max_new_tokens: int = 128,
    engine_kw: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The SGLang section (``doctor_section`` keys; ``problems`` lists what stands in the way, with fixes)."""
    version = versions.installed_version()
    tested = releases.tested()
    res = new_section("sglang", version, tested)
    problems: list[str] = []
    if version is None:
        return finish(res, [problem("SGLang is not installed", install_fix("sglang", tested))])
    try:
        versions.check_version(version)
        res["supported"] = True
    except versions.UnsupportedVersion as exc:
        problems.append(problem(str(exc), install_fix("sglang", tested)))
    route = versions.route_for(version)
    res["route"] = route
    res["paths"] = list(_PATHS[route])
    res["entry_point"] = entry_point_registered("sglang.srt.plugins", ENTRY_POINT)
    if route in ("adaptive", "v2") and not res["entry_point"]:
        problems.append(problem("the sglang.srt.plugins entry point is not registered", REINSTALL_FIX))
    row = releases.layout_for(version)
    if row is None:
        res["targets"] = {}
    else:
        try:
            res["targets"] = {name: why or "ok" for name, why in check_targets(row.hooks).items()}
        except Exception as exc:
            res["targets"] = {f"hook table of {row.version}": f"cannot check: {type(exc).__name__}: {exc}"}
    problems += target_problems(res["targets"], "sglang", tested)
    res["gpu"] = gpu_name()
    if smoke:
        problems += _smoke(res, model, draft, algorithm, num_steps, max_new_tokens, engine_kw)
    return finish(res, problems)


def _smoke(
    res: dict[str, Any],
    model: str | None,
    draft: str | None,
    algorithm: str,
    num_steps: int,
    max_new_tokens: int,
    engine_kw: dict[str, Any] | None,
) -> list[str]:
    if not res["gpu"]:
        return [problem("smoke test skipped: it needs a CUDA GPU", "run it on a GPU machine")]
    if not model:
        return [problem("smoke test skipped: no model", "give --model and --draft")]
    from .smoke import smoke_test

    try:
        res["smoke"] = smoke_test(
            model,
            draft,
            algorithm=algorithm,
            num_steps=num_steps,
            max_new_tokens=max_new_tokens,
            engine_kw=engine_kw,
        )
    except Exception as exc:
        return [problem(f"smoke test failed to run: {exc}", SMOKE_RUN_FIX)]
    if not res["smoke"]["ok"]:
        return [problem("smoke test: " + res["smoke"]["verdict"], SMOKE_REPORT_FIX)]
    return []


def _print(res: dict[str, Any], out: TextIO) -> None:
    details = [f"hook {t}: {why}" for t, why in res["targets"].items()]
    sm = res.get("smoke")
    if sm:
        details.append(f"smoke: {sm['verdict']}")
        for name, sp in sm["speed"].items():
            rel = sp["vs_reference"]
            details.append(
                f"  {name:10s} {sp['tokens_per_s']:9.1f} tok/s" + (f"  ({rel:.2f}x reference)" if rel else "")
            )
    print_section(res, "SGLang", out, details)


def report(*, out: TextIO | None = None, **kw: Any) -> dict[str, Any]:
    """Check the installation (and run the smoke test when asked); print a summary to ``out``, return it.

    ``kw`` are ``section``'s arguments; the same shape as the vLLM doctor's ``report``.
    """
    res = section(**kw)
    _print(res, out or sys.stdout)
    return res
