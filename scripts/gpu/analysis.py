"""Checks and tables from the live GPU check's raw results. Pure Python; runs anywhere.

Input folder layout (what ``gpu_check.py device`` packs): ``models-meta.json`` (the bigram maps) and one
folder per engine (``v1``, ``v2``, ``base_v1``, ``base_v2``) holding ``phases.jsonl`` (one line per request
batch), ``engine.log``, and for speculative engines ``trace.jsonl`` (the adapter's step trace) and
``dispatch.jsonl``.

Every expected value comes from the bigram oracle (scripts/gpu/bigram_model.py) or from SGLang's own counters,
never from specpolicy.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from bigram_model import greedy_chain

__all__ = [
    "RequestCheck",
    "check_request",
    "oracle_verifies",
    "load_jsonl",
    "phase_trace",
    "trace_summary",
    "analyze_engine",
    "analyze_dir",
    "render_markdown",
]

#: A token map: a list or a numpy array of ints.
IntSeq = Sequence[int] | np.ndarray[Any, Any]

LIVE_PATH_RE = re.compile(r"specpolicy.*(v1 worker|v2 worker|adaptive controller)", re.IGNORECASE)
POLICY_ERROR_RE = re.compile(r"specpolicy rank \d+: policy error")


def oracle_verifies(pi: IntSeq, pi_draft: IntSeq, start: int, n: int, depth: int) -> int:
    """Verify cycles chain speculation ``depth`` deep needs to emit n tokens after token ``start``."""
    t, produced, verifies = int(start), 0, 0
    while produced < n:
        verifies += 1
        d, accepted = t, 0
        for _ in range(depth):
            nxt = int(pi_draft[d])
            if nxt != int(pi[d]):
                break
            accepted += 1
            d = nxt
        for _ in range(accepted + 1):
            t = int(pi[t])
        produced += accepted + 1
    return verifies


class RequestCheck:
    """Outcome of the per-request checks (plain attributes, JSON-ready through ``as_dict``)."""

    __slots__ = ("count_ok", "lossless", "first_mismatch", "bookkeeping_ok", "bookkeeping_note")

    def __init__(self) -> None:
        self.count_ok = False
        self.lossless = False
        self.first_mismatch: int | None = None
        self.bookkeeping_ok: bool | None = None
        self.bookkeeping_note = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


def check_request(
    req: dict[str, Any], max_new: int, last_prompt_token: int, pi: IntSeq, depth: int | None
) -> RequestCheck:
    """Exact token count, tokens equal to the bigram oracle, and SGLang's own accept counters consistent.

    Bookkeeping (speculative engines, ``depth`` given): the histogram of accepted drafts sums to the verify
    count and weighs up to the accepted-draft total; tokens = 1 (from prefill) + verifies + accepted drafts,
    less at most ``depth`` drafts accepted past the request's end in its last step.
    """
    rc = RequestCheck()
    ids = req.get("output_ids") or []
    rc.count_ok = req.get("completion_tokens") == max_new and len(ids) == max_new
    want = greedy_chain(np.asarray(pi), last_prompt_token, max_new)
    rc.lossless = list(ids) == want
    if not rc.lossless:
        rc.first_mismatch = next(
            (i for i, (a, b) in enumerate(zip(ids, want, strict=False)) if a != b), min(len(ids), len(want))
        )
    if depth is not None:
        v, c, h = req.get("verify_ct"), req.get("correct_drafts"), req.get("histogram")
        if v is None or c is None:
            rc.bookkeeping_ok = False
            rc.bookkeeping_note = "no spec counters in meta_info"
        else:
            notes = []
            if h is not None:
                if sum(h) != v:
                    notes.append(f"sum(histogram)={sum(h)} != verify_ct={v}")
                if sum(i * x for i, x in enumerate(h)) != c:
                    notes.append(
                        f"weighted histogram {sum(i * x for i, x in enumerate(h))} != correct_drafts={c}"
                    )
            over = 1 + v + c - (req.get("completion_tokens") or 0)
            if not 0 <= over <= depth:
                notes.append(f"1 + verify_ct + correct_drafts - tokens = {over}, outside [0, {depth}]")
            rc.bookkeeping_ok = not notes
            rc.bookkeeping_note = "; ".join(notes)
    return rc


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a kill
    return out


def load_trace(folder: Path) -> list[dict[str, Any]]:
    """Step records of the trace and its rotated files, oldest first (headers dropped)."""
    files = sorted(
        folder.glob("trace.jsonl.*"), key=lambda p: -int(p.suffix[1:]) if p.suffix[1:].isdigit() else 0
    )
    recs: list[dict[str, Any]] = []
    for f in [*files, folder / "trace.jsonl"]:
        recs.extend(r for r in load_jsonl(f) if r.get("kind") != "header")
    return recs


def phase_trace(trace: Iterable[dict[str, Any]], t_start: float, t_end: float) -> list[dict[str, Any]]:
    """The trace records whose decision time falls inside a phase's wall-clock window."""
    return [r for r in trace if r.get("ts") is not None and t_start <= r["ts"] <= t_end]


def trace_summary(recs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Steps by depth, switches, fallbacks, decide() cost and the accepted drafts the adapter observed."""
    depths = [r["num_steps"] for r in recs]
    switches = sum(1 for a, b in zip(depths, depths[1:], strict=False) if a != b)
    dus = sorted(r["decide_us"] for r in recs if r.get("decide_us") is not None)
    accepted = sum(sum(r["accepted_draft_tokens"]) for r in recs if r.get("accepted_draft_tokens"))
    times = defaultdict(list)
    for r in recs:
        if r.get("step_time_s") is not None:
            times[r["num_steps"]].append(r["step_time_s"])
    return {
        "steps": len(recs),
        "by_depth": dict(sorted(Counter(depths).items())),
        "switches": switches,
        "fallbacks": sum(1 for r in recs if r.get("fallback")),
        "fallback_depths": sorted({r["num_steps"] for r in recs if r.get("fallback")}),
        "decide_us_p50": dus[len(dus) // 2] if dus else None,
        "accepted_drafts_seen": accepted,
        "step_ms_p50_by_depth": {k: round(1e3 * sorted(v)[len(v) // 2], 3) for k, v in sorted(times.items())},
    }


def analyze_engine(folder: Path, meta: dict[str, Any], depth: int) -> dict[str, Any]:
    path = folder.name
    spec = not path.startswith("base")
    recs = load_jsonl(folder / "phases.jsonl")
    engine = next((r for r in recs if r.get("kind") == "engine"), None)
    phases = [r for r in recs if r.get("kind") == "phase"]
    log = (folder / "engine.log").read_text(errors="replace") if (folder / "engine.log").exists() else ""
    trace = load_trace(folder) if spec else []
    pi = meta["pi"]
    out_phases = []
    for ph in phases:
        checks = [
            check_request(r, n, last, pi, depth if spec else None)
            for r, n, last in zip(ph["requests"], ph["max_new_tokens"], ph["prompt_last"], strict=False)
        ]
        served = len(ph["requests"]) == ph["concurrency"] and not ph.get("error")
        item: dict[str, Any] = {
            "name": ph["name"],
            "kind": ph["phase_kind"],
            "policy": ph["policy"] or ("sglang-static" if path.startswith("plain") else "never"),
            "concurrency": ph["concurrency"],
            "tok_per_s": ph["tok_per_s"],
            "wall_s": ph["wall_s"],
            "served": served,
            "error": ph.get("error"),
            "count_ok": sum(c.count_ok for c in checks),
            "lossless": sum(c.lossless for c in checks),
            "requests": len(checks),
            "first_mismatch": [c.first_mismatch for c in checks if not c.lossless][:8],
        }
        if spec:
            item["bookkeeping_ok"] = sum(bool(c.bookkeeping_ok) for c in checks)
            item["bookkeeping_notes"] = [c.bookkeeping_note for c in checks if not c.bookkeeping_ok][:4]
            verifies = sum(r.get("verify_ct") or 0 for r in ph["requests"])
            gen = sum((r.get("completion_tokens") or 0) - 1 for r in ph["requests"])
            item["tokens_per_verify"] = round(gen / verifies, 3) if verifies else None
            item["correct_drafts"] = sum(r.get("correct_drafts") or 0 for r in ph["requests"])
            if ph["policy"] in ("always-on", "static", None):  # None: SGLang's own static speculation
                want = [
                    oracle_verifies(pi, meta["pi_draft"], int(pi[last]), n - 1, depth)
                    for n, last in zip(ph["max_new_tokens"], ph["prompt_last"], strict=True)
                ]
                got = [r.get("verify_ct") for r in ph["requests"]]
                item["oracle_verifies_equal"] = sum(1 for a, b in zip(got, want, strict=False) if a == b)
                item["oracle_tokens_per_verify"] = (
                    round(sum(n - 1 for n in ph["max_new_tokens"]) / sum(want), 3) if want else None
                )
            window = phase_trace(trace, ph["t_start"], ph["t_end"])
            item["trace"] = trace_summary(window)
            # Requests the engine did not run together with the others (admitted late): the phase's tail.
            item["trace"]["max_batch"] = max((r["batch_size"] for r in window), default=None)
            item["trace"]["tail_steps"] = sum(1 for r in window if r["batch_size"] * 2 < ph["concurrency"])
        out_phases.append(item)
    return {
        "path": path,
        "speculative": spec,
        "init_s": engine.get("init_s") if engine else None,
        "phases": out_phases,
        "live_path_lines": [line for line in log.splitlines() if LIVE_PATH_RE.search(line)][:4],
        "policy_error_logs": len(POLICY_ERROR_RE.findall(log)),
        "tracebacks": log.count("Traceback"),
        "trace_steps": len(trace),
        "finished": "GC DONE" in log,
    }


def _verdicts(eng: dict[str, Any], raise_count: int, depth: int) -> dict[str, bool | None]:
    real = [p for p in eng["phases"] if p["kind"] != "warmup"]
    v: dict[str, bool | None] = {
        "all_served": bool(real) and all(p["served"] for p in real),
        "exact_token_counts": bool(real) and all(p["count_ok"] == p["requests"] for p in real),
        "lossless_all_phases": bool(real) and all(p["lossless"] == p["requests"] for p in real),
        "finished": eng["finished"],
    }
    if not eng["speculative"]:
        return v
    v["bookkeeping"] = bool(real) and all(p["bookkeeping_ok"] == p["requests"] for p in real)
    by = {p["policy"]: p for p in real if p["kind"] == "check"}
    on = by.get("always-on", by.get("sglang-static"))
    v["oracle_verify_counts"] = None if on is None else on.get("oracle_verifies_equal") == on["requests"]
    if eng["path"].startswith("plain"):
        v["adapter_silent_when_unconfigured"] = not eng["live_path_lines"] and eng["trace_steps"] == 0
        return v
    v["live_path_logged"] = bool(eng["live_path_lines"])
    sw = by.get("switch")
    v["switching_ran_both_modes"] = (
        None if sw is None else set(sw["trace"]["by_depth"]) >= {0, depth} and sw["trace"]["switches"] > 0
    )
    r = by.get("raise")
    v["raise_contained"] = (
        None
        if r is None
        else (
            r["trace"]["fallbacks"] == raise_count
            and r["trace"]["fallback_depths"] == [depth]
            and r["served"]
            and r["lossless"] == r["requests"]
        )
    )
    v["raise_logged_once"] = None if r is None else eng["policy_error_logs"] == 1
    return v


def analyze_dir(folder: Path, depth: int = 3, raise_count: int = 20) -> dict[str, Any]:
    """Every engine folder under ``folder`` (files extracted from the results tarballs)."""
    meta = json.loads((folder / "models-meta.json").read_text())
    engines = {}
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and (p / "phases.jsonl").exists()):
        eng = analyze_engine(sub, meta, depth)
        eng["verdicts"] = _verdicts(eng, raise_count, depth)
        engines[sub.name] = eng
    perf: dict[str, dict[str, dict[int, float]]] = {}
    for name, eng in engines.items():
        side = "v1" if name.endswith("v1") else "v2"
        for p in eng["phases"]:
            if p["kind"] == "perf" and p["served"]:
                perf.setdefault(side, {}).setdefault(p["policy"], {})[p["concurrency"]] = p["tok_per_s"]
    ok = bool(engines) and all(v is not False for e in engines.values() for v in e["verdicts"].values())
    return {
        "ok": ok,
        "model": {
            k: meta.get(k)
            for k in ("target", "draft", "target_params", "draft_params", "agree", "chain_vocab")
        },
        "engines": engines,
        "perf": perf,
    }


def render_markdown(report: dict[str, Any]) -> str:
    lines = [f"overall: {'PASS' if report['ok'] else 'FAIL'}", ""]
    for name, eng in report["engines"].items():
        lines.append(f"## engine {name} (init {eng['init_s']} s, trace steps {eng['trace_steps']})")
        for k, v in eng["verdicts"].items():
            lines.append(f"- {k}: {v}")
        for line in eng["live_path_lines"][:2]:
            lines.append(f"- log: `{line.strip()[:240]}`")
        lines.append("")
        lines.append(
            "| phase | requests | tok/s | exact counts | lossless | bookkeeping | tokens/verify | "
            "steps by depth | switches | fallbacks | decide us p50 |"
        )
        lines.append("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
        for p in eng["phases"]:
            t = p.get("trace", {})
            lines.append(
                f"| {p['name']} | {p['requests']} | {p['tok_per_s']} | {p['count_ok']} | {p['lossless']} | "
                f"{p.get('bookkeeping_ok', '-')} | {p.get('tokens_per_verify', '-')} | "
                f"{t.get('by_depth', '-')} | {t.get('switches', '-')} | {t.get('fallbacks', '-')} | "
                f"{t.get('decide_us_p50', '-')} |"
            )
        lines.append("")
    for side, table in sorted(report["perf"].items()):
        levels = sorted({c for row in table.values() for c in row})
        lines.append(f"## throughput, {side} path (output tokens/s)")
        lines.append("| policy | " + " | ".join(str(c) for c in levels) + " |")
        lines.append("|---|" + "---:|" * len(levels))
        for pol, row in table.items():
            lines.append(
                f"| {pol} | " + " | ".join(f"{row.get(c, float('nan')):,.0f}" for c in levels) + " |"
            )
        lines.append("")
    return "\n".join(lines)
