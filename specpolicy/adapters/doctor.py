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
    """The SGLang section (a dict; ``problems`` lists what stands in the way)."""
    from .sglang.versions import SUPPORTED, UnsupportedVersion, check_version, installed_version, route_for

    version = installed_version()
    res: dict[str, Any] = {"engine": "sglang", "version": version, "tested": list(SUPPORTED)}
    problems: list[str] = []
    if version is None:
        res["supported"] = False
        res["problems"] = ["not installed"]
        return res
    try:
        check_version(version)
        res["supported"] = True
    except UnsupportedVersion as exc:
        res["supported"] = False
        problems.append(str(exc))
    route = route_for(version)
    res["route"] = route
    eps = importlib.metadata.entry_points(group="sglang.srt.plugins")
    res["entry_point"] = any(ep.value == SGLANG_ENTRY_POINT for ep in eps)
    if route == "adaptive":
        from .sglang import v0_5_23

        res["paths"] = ["adaptive-controller (EAGLEWorkerV2, overlap and non-overlap)"]
        res["targets"] = check_targets(v0_5_23.HOOK_TARGETS)
        if not res["entry_point"]:
            problems.append("the sglang.srt.plugins entry point is not registered: reinstall specpolicy")
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
    problems += [f"{t}: {why}" for t, why in res["targets"].items() if why != "ok"]
    res["gpu"] = _gpu_name()
    if smoke:
        if not res["gpu"]:
            problems.append("smoke test skipped: it needs a CUDA GPU")
        elif not model:
            problems.append("smoke test skipped: give the target model (--model) and its drafter (--draft)")
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
                    problems.append("smoke test: " + res["smoke"]["verdict"])
            except Exception as exc:
                problems.append(f"smoke test failed to run: {exc}")
    res["problems"] = problems
    return res


def _print_sglang(res: dict[str, Any], out: TextIO) -> None:
    v = res.get("version") or "not installed"
    state = "supported" if res.get("supported") else "NOT supported"
    print(f"SGLang: {v} ({state}; tested: {', '.join(res['tested'])})", file=out)
    if res.get("version") is None:
        return
    print(f"  route: {res['route']}; worker paths: {', '.join(res['paths'])}", file=out)
    print(f"  plugin entry point: {'registered' if res['entry_point'] else 'MISSING'}", file=out)
    for t, why in res.get("targets", {}).items():
        print(f"  hook {t}: {why}", file=out)
    print(f"  GPU: {res.get('gpu') or 'none (smoke test unavailable)'}", file=out)
    if "smoke" in res:
        sm = res["smoke"]
        print(f"  smoke: {sm['verdict']}", file=out)
        for name, sp in sm["speed"].items():
            rel = sp["vs_reference"]
            print(
                f"    {name:10s} {sp['tokens_per_s']:9.1f} tok/s"
                + (f"  ({rel:.2f}x reference)" if rel else ""),
                file=out,
            )
    for p in res.get("problems", []):
        print(f"  PROBLEM: {p}", file=out)


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
            sections["vllm"] = {"engine": "vllm", "problems": [f"vLLM section unavailable: {exc}"]}
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
            "no supported engine is installed (pip install 'specpolicy[sglang]' or 'specpolicy[vllm]')",
            file=text_out,
        )
        return 1
    return 0 if all(not s.get("problems") for s in relevant) else 1


class _Null:
    def write(self, s: str) -> int:
        return len(s)

    def flush(self) -> None:
        pass
