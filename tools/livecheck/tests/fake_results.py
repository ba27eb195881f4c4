"""Result files as the live check's engine runner writes them, for the analysis tests' fake engines.

The phase record is the runner's own (``sglang_check._phase_record``), so a change of its shape reaches these
tests; a fake engine supplies only what it served.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specpolicy_livecheck import plan as P
from specpolicy_livecheck import sglang_check


def phase_line(
    run: P.EngineRun,
    phase: P.Phase,
    prompts: list[list[int]],
    requests: list[dict[str, Any]],
    t_start: float,
    wall_s: float,
    tok_per_s: float,
) -> str:
    """One phases.jsonl line for a phase that served ``requests`` in one pass, at the given rate."""
    served = {
        "t_start": t_start,
        "t_end": t_start + wall_s,
        "wall_s": wall_s,
        "passes": 1,
        "error": None,
        "requests": requests,
    }
    rec = sglang_check._phase_record(run, phase, prompts, served)
    rec["tok_per_s"] = tok_per_s
    return json.dumps(rec)


def engine_line(run: P.EngineRun, init_s: float) -> str:
    return json.dumps({"kind": "engine", "path": run.path, "backend": run.backend, "init_s": init_s})


def write_engine_files(
    folder: Path, run: P.EngineRun, lines: list[str], trace: list[dict[str, Any]], log: str
) -> None:
    """phases.jsonl, the trace (adapter engines only), engine.log and run.json of one engine."""
    (folder / "phases.jsonl").write_text("\n".join(lines) + "\n")
    if run.adapter:
        head = json.dumps({"kind": "header", "format": "specpolicy-trace/1"})
        (folder / "trace.jsonl").write_text("\n".join([head, *map(json.dumps, trace)]) + "\n")
    (folder / "engine.log").write_text((log if run.adapter else "") + "GC DONE\n")
    (folder / "run.json").write_text(run.to_json())
