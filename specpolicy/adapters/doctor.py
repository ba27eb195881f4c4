"""``specpolicy doctor``: is specpolicy usable with the engines installed here, and (on a GPU) does it work?

Each engine's doctor (``sglang/doctor.py``, ``vllm/doctor.py``) fills one section of the same shape
(``doctor_section``); this module runs the chosen ones and sets the exit status. Without ``--smoke`` no GPU
is needed: the installed version and whether it is a tested one, the route and worker paths, the plugin
entry point, and every engine name the adapter hooks. With ``--smoke --model PATH [--draft PATH]`` short
offline engines also run on the GPU and report token agreement and tokens/s.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from .doctor_section import REINSTALL_FIX, finish, new_section, problem

__all__ = ["report", "check_targets"]


def check_targets(targets: tuple[str, ...]) -> dict[str, str]:
    """``{dotted target: "ok" | why it is missing}`` (``_support.check_targets`` says None for "ok")."""
    from ._support import check_targets as check

    return {name: why or "ok" for name, why in check(targets).items()}


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
        from .sglang import doctor as sglang_doctor

        res = sglang_doctor.report(
            smoke=smoke,
            model=model,
            draft=draft,
            algorithm=algorithm or "EAGLE3",
            num_steps=num_steps,
            engine_kw=engine_kw,
            out=text_out,
        )
        sections["sglang"] = res
        installed_any |= res.get("version") is not None
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
            "no engine is installed here: install SGLang or vLLM with specpolicy; from a specpolicy "
            "checkout: pip install '.[sglang]' or '.[vllm]' (README.md, Installing on a serving machine)",
            file=text_out,
        )
        return 1
    return 0 if all(not s.get("problems") for s in relevant) else 1


class _Null:
    def write(self, s: str) -> int:
        return len(s)

    def flush(self) -> None:
        pass
