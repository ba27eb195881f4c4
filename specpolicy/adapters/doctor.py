"""``specpolicy doctor``: is specpolicy usable with the engines installed here, and (on a GPU) does it work?

Without ``--smoke`` it needs no GPU: for each engine, the installed version and whether it is a tested one,
the
route and worker paths specpolicy would use, whether the plugin entry point is registered, and whether every
engine attribute the adapter hooks exists. With ``--smoke --model PATH [--draft PATH]`` it also runs short
offline engines on the GPU and reports token agreement and tokens/s (see ``adapters/sglang/smoke.py`` and the
vLLM adapter's doctor).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import pkgutil
import sys
from typing import Any, TextIO

from .doctor_section import (
    REINSTALL_FIX,
    SMOKE_REPORT_FIX,
    SMOKE_RUN_FIX,
    finish,
    install_fix,
    internals_fix,
    new_section,
    print_section,
    problem,
)

__all__ = ["report", "sglang_report", "check_targets"]

SGLANG_ENTRY_POINT = "specpolicy.adapters.sglang.plugin:register"


def check_targets(targets: tuple[str, ...]) -> dict[str, str]:
    """``{dotted target: "ok" | why it is missing}``, importing what it must."""
    out: dict[str, str] = {}
    for target in targets:
        owner, attr = target.rsplit(".", 1)
        try:
            obj = _resolve(owner)
            out[target] = "ok" if hasattr(obj, attr) else f"{owner} has no attribute {attr}"
        except Exception as exc:
            out[target] = f"cannot import: {type(exc).__name__}: {exc}"
    return out


def _resolve(dotted: str) -> Any:
    """Like pkgutil.resolve_name, but a failing import reports its own error (a missing dependency, say)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        module_name = ".".join(parts[:i])
        if importlib.util.find_spec(parts[0]) is None:
            raise ModuleNotFoundError(f"No module named {parts[0]!r}")
        try:
            spec = importlib.util.find_spec(module_name)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            continue
        obj: Any = importlib.import_module(module_name)  # raises the real error
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    return pkgutil.resolve_name(dotted)


def _gpu_name() -> str | None:
    try:
        import torch

        return str(torch.cuda.get_device_name(0)) if torch.cuda.is_available() else None
    except Exception:
        return None


def sglang_report(
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
    from .sglang.versions import SUPPORTED, UnsupportedVersion, check_version, installed_version, route_for

    version = installed_version()
    res = new_section("sglang", version, SUPPORTED)
    problems: list[str] = []
    if version is None:
        return finish(res, [problem("SGLang is not installed", install_fix("sglang", SUPPORTED))])
    try:
        check_version(version)
        res["supported"] = True
    except UnsupportedVersion as exc:
        problems.append(problem(str(exc), install_fix("sglang", SUPPORTED)))
    route = route_for(version)
    res["route"] = route
    eps = importlib.metadata.entry_points(group="sglang.srt.plugins")
    res["entry_point"] = any(ep.value == SGLANG_ENTRY_POINT for ep in eps)
    if route == "adaptive":
        from .sglang import v0_5_23

        res["paths"] = ["adaptive-controller (EAGLEWorkerV2, overlap and non-overlap)"]
        res["targets"] = check_targets(v0_5_23.HOOK_TARGETS)
        if not res["entry_point"]:
            problems.append(problem("the sglang.srt.plugins entry point is not registered", REINSTALL_FIX))
    else:
        res["paths"] = ["v1 (EAGLEWorker, non-overlap)", "v2 (EAGLEWorkerV2, overlap)"]
        try:
            from .sglang.legacy.targets import check_targets as legacy_check

            table = (
                version
                if version in SUPPORTED
                else ("0.5.12.post1" if version >= "0.5.11" else "0.5.10.post1")
            )
            missing = legacy_check(table)
            res["targets"] = {"legacy hook table " + table: "ok" if not missing else "; ".join(missing)}
        except Exception as exc:
            res["targets"] = {"legacy hook table": f"cannot check: {type(exc).__name__}: {exc}"}
    problems += [
        problem(f"{t}: {why}", internals_fix(why, "sglang", SUPPORTED))
        for t, why in res["targets"].items()
        if why != "ok"
    ]
    res["gpu"] = _gpu_name()
    if smoke:
        if not res["gpu"]:
            problems.append(problem("smoke test skipped: it needs a CUDA GPU", "run it on a GPU machine"))
        elif not model:
            problems.append(
                problem("smoke test skipped: no model", "give --model and --draft")
            )
        else:
            from .sglang.smoke import smoke_test

            try:
                res["smoke"] = smoke_test(
                    model,
                    draft,
                    algorithm=algorithm,
                    num_steps=num_steps,
                    max_new_tokens=max_new_tokens,
                    engine_kw=engine_kw,
                )
                if not res["smoke"]["ok"]:
                    problems.append(problem("smoke test: " + res["smoke"]["verdict"], SMOKE_REPORT_FIX))
            except Exception as exc:
                problems.append(problem(f"smoke test failed to run: {exc}", SMOKE_RUN_FIX))
    return finish(res, problems)


def _print_sglang(res: dict[str, Any], out: TextIO) -> None:
    details: list[str] = []
    for t, why in res["targets"].items():
        details.append(f"hook {t}: {why}")
    sm = res.get("smoke")
    if sm:
        details.append(f"smoke: {sm['verdict']}")
        for name, sp in sm["speed"].items():
            rel = sp["vs_reference"]
            details.append(
                f"  {name:10s} {sp['tokens_per_s']:9.1f} tok/s" + (f"  ({rel:.2f}x reference)" if rel else "")
            )
    print_section(res, "SGLang", out, details)


def report(
    *,
    engine: str = "all",
    smoke: bool = False,
    model: str | None = None,
    draft: str | None = None,
    algorithm: str | None = None,
    num_steps: int = 3,
    engine_kw: dict[str, Any] | None = None,
    as_json: bool = False,
    out: TextIO | None = None,
) -> int:
    """Print the report for the chosen engines; exit status 0 when nothing stands in the way."""
    out = out or sys.stdout
    text_out: TextIO = out if not as_json else _Null()  # type: ignore[assignment]
    sections: dict[str, Any] = {}
    installed_any = False
    if engine in ("all", "sglang"):
        res = sglang_report(
            smoke=smoke,
            model=model,
            draft=draft,
            algorithm=algorithm or "EAGLE3",
            num_steps=num_steps,
            engine_kw=engine_kw,
        )
        sections["sglang"] = res
        installed_any |= res.get("version") is not None
        _print_sglang(res, text_out)
    if engine in ("all", "vllm"):
        try:
            from .vllm import doctor as vllm_doctor
        except ImportError as exc:
            what = f"vLLM section unavailable: {exc}"
            sections["vllm"] = finish(new_section("vllm", None, ()), [problem(what, REINSTALL_FIX)])
        else:
            kw: dict[str, Any] = {
                "smoke": smoke,
                "model": model,
                "draft_model": draft,
                "out": text_out,
                "num_speculative_tokens": num_steps,
            }
            if algorithm:
                kw["method"] = algorithm.lower()
            res_v = vllm_doctor.report(**kw)
            sections["vllm"] = res_v
            installed_any |= res_v.get("version") is not None
    if as_json:
        print(json.dumps(sections, indent=2, default=str), file=out)
    relevant = [s for s in sections.values() if s.get("version") is not None]
    if not installed_any:
        print(
            "no engine is installed here: install SGLang or vLLM with specpolicy, from a specpolicy checkout "
            "pip install '.[sglang]' or '.[vllm]' (README.md, Installing on a serving machine)",
            file=text_out,
        )
        return 1
    return 0 if all(not s.get("problems") for s in relevant) else 1


class _Null:
    def write(self, s: str) -> int:
        return len(s)

    def flush(self) -> None:
        pass
