"""Checks and tables from the live GPU check's raw results. Pure Python; runs anywhere.

Input folder layout (what ``gpu_check.py device`` packs): ``models-meta.json`` (the bigram maps), one
folder per engine, ``<path>/<backend>`` (``v2/triton``, ``base_v2/flashinfer``; results of the first runs
have ``<path>`` alone, read as triton), holding ``phases.jsonl`` (one line per request batch or ramp),
``engine.log``, ``run.json`` (the plan), and for engines with the adapter ``trace.jsonl`` (the adapter's step
trace) and ``dispatch.jsonl``; and ``doctor/<backend>/`` with the output of ``specpolicy doctor --smoke``.

Every expected value comes from the bigram oracle (scripts/gpu/bigram_model.py) or from SGLang's own counters,
never from specpolicy.
"""

from __future__ import annotations

import bisect
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
    "median",
    "percentile",
    "spread_table",
    "ramp_summary",
    "resume_cost",
    "engine_folders",
    "load_doctor",
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


# ----------------------------------------------------------------------------------------------- statistics
def median(xs: Sequence[float]) -> float:
    """The middle value (mean of the two middle ones for an even count)."""
    s = sorted(xs)
    if not s:
        raise ValueError("median of no values")
    m = len(s) // 2
    return float(s[m]) if len(s) % 2 else (s[m - 1] + s[m]) / 2


def percentile(xs: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0-100): a value that occurred, no interpolation between requests."""
    s = sorted(xs)
    if not s:
        raise ValueError("percentile of no values")
    return float(s[max(0, min(len(s) - 1, int(np.ceil(q / 100 * len(s))) - 1))])


def spread_table(
    samples: dict[str, dict[str, dict[int, list[float]]]],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per engine key, policy and concurrency: the median, and [min, max], of the repeated measurements."""
    med: dict[str, Any] = {}
    spread: dict[str, Any] = {}
    for key, table in samples.items():
        for pol, row in table.items():
            for c in sorted(row):
                vals = row[c]
                med.setdefault(key, {}).setdefault(pol, {})[c] = round(median(vals), 1)
                spread.setdefault(key, {}).setdefault(pol, {})[c] = [min(vals), max(vals)]
    return med, spread


# ----------------------------------------------------------------------------------------------- ramp
def _in_flight_peak(reqs: Sequence[dict[str, Any]]) -> int:
    events = sorted([(r["arrival_s"], 1) for r in reqs] + [(r["finish_s"], -1) for r in reqs])
    peak = n = 0
    for _, d in events:
        n += d
        peak = max(peak, n)
    return peak


def ramp_summary(reqs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Output tokens/s over the ramp (schedule start to last finish), TPOT and TTFT percentiles in ms.

    TPOT of a request: (finish - first token) / (tokens - 1). Lateness: how far the driver fell behind the
    arrival schedule (an open loop must not, or the load was not the planned one).
    """
    done = [
        r
        for r in reqs
        if r.get("finish_s") is not None and r.get("first_token_s") is not None and r.get("completion_tokens")
    ]
    if not done:
        return {"requests": len(reqs), "finished": 0}
    span = max(r["finish_s"] for r in done)
    tokens = sum(r["completion_tokens"] for r in done)
    tpot = [
        1e3 * (r["finish_s"] - r["first_token_s"]) / (r["completion_tokens"] - 1)
        for r in done
        if r["completion_tokens"] > 1
    ]
    ttft = [1e3 * (r["first_token_s"] - r["arrival_s"]) for r in done]
    late = [r["arrival_s"] - r.get("scheduled_s", r["arrival_s"]) for r in done]
    return {
        "tokens_per_s": round(tokens / span, 1) if span else None,
        "tpot_p50": round(percentile(tpot, 50), 3) if tpot else None,
        "tpot_p99": round(percentile(tpot, 99), 3) if tpot else None,
        "ttft_p50": round(percentile(ttft, 50), 3),
        "ttft_p99": round(percentile(ttft, 99), 3),
        "requests": len(reqs),
        "finished": len(done),
        "tokens": tokens,
        "span_s": round(span, 3),
        "peak_in_flight": _in_flight_peak(done),
        "mean_in_flight": round(sum(r["finish_s"] - r["arrival_s"] for r in done) / span, 1)
        if span
        else None,
        "max_lateness_s": round(max(late), 4),
    }


# ----------------------------------------------------------------------------------------------- resume
def _run_lengths_before(depths: Sequence[int]) -> list[int]:
    """For every step: how many off steps (depth 0) ran right before it."""
    out, n = [], 0
    for d in depths:
        out.append(n)
        n = n + 1 if d == 0 else 0
    return out


def resume_cost(recs: Sequence[dict[str, Any]], k: int, batch_size: int) -> dict[str, Any]:
    """The first on step after exactly ``k`` off steps against a normal on step, at one batch size.

    ``recs``: one phase's trace records in step order. A normal on step has two on steps before it (so no
    catch-up can land in it); the second on step after the stretch is reported too, because an engine that
    overlaps steps can show a step's cost one step late. Times in ms, medians over the off/on cycles.
    """
    depths = [r["num_steps"] for r in recs]
    before = _run_lengths_before(depths)
    first, second, normal, off = [], [], [], []
    other = 0
    for i, r in enumerate(recs):
        t = r.get("step_time_s")
        if r["batch_size"] != batch_size or t is None:
            continue
        if depths[i] == 0:
            off.append(t)
        elif before[i] == k:
            first.append(t)
            nxt = recs[i + 1] if i + 1 < len(recs) else None
            if nxt and nxt["num_steps"] and nxt["batch_size"] == batch_size and nxt.get("step_time_s"):
                second.append(nxt["step_time_s"])
        elif before[i] > 0:
            other += 1
        elif i >= 2 and depths[i - 1] and depths[i - 2]:
            normal.append(t)
    out: dict[str, Any] = {"k": k, "batch_size": batch_size, "samples": len(first), "other_resumes": other}
    for name, xs in (
        ("first_on_ms", first),
        ("second_on_ms", second),
        ("normal_on_ms", normal),
        ("off_ms", off),
    ):
        out[name] = round(1e3 * median(xs), 3) if xs else None
    if out["first_on_ms"] is not None and out["normal_on_ms"]:
        out["first_over_normal"] = round(out["first_on_ms"] / out["normal_on_ms"], 3)
        out["excess_ms"] = round(out["first_on_ms"] - out["normal_on_ms"], 3)
    return out


RESUME_LABEL_RE = re.compile(r"resume-(\d+)$")


# ----------------------------------------------------------------------------------------------- engines
def _engine_record(folder: Path) -> dict[str, Any] | None:
    return next((r for r in load_jsonl(folder / "phases.jsonl") if r.get("kind") == "engine"), None)


def engine_folders(folder: Path) -> list[tuple[str, Path]]:
    """(``<path>/<backend>``, folder) of every engine under ``folder``; a folder of the first runs
    (``<path>/phases.jsonl``) gets the backend its engine record names, else triton."""
    out = []
    for d in sorted(p for p in folder.iterdir() if p.is_dir() and p.name != "doctor"):
        if (d / "phases.jsonl").exists():
            rec = _engine_record(d) or {}
            backend = rec.get("backend") or (rec.get("kw") or {}).get("attention_backend") or "triton"
            out.append((f"{d.name}/{backend}", d))
        for sub in sorted(p for p in d.iterdir() if p.is_dir() and (p / "phases.jsonl").exists()):
            out.append((f"{d.name}/{sub.name}", sub))
    return out


class _Window:
    """The trace sorted by decision time, for cheap per-phase windows (the trace has ~10^5 steps)."""

    def __init__(self, trace: Sequence[dict[str, Any]]) -> None:
        self.recs = sorted((r for r in trace if r.get("ts") is not None), key=lambda r: r["ts"])
        self.ts = [r["ts"] for r in self.recs]

    def __call__(self, t0: float, t1: float) -> list[dict[str, Any]]:
        return self.recs[bisect.bisect_left(self.ts, t0) : bisect.bisect_right(self.ts, t1)]


def _label(path: str, policy: str | None) -> str:
    return policy or ("sglang-static" if path.startswith("plain") else "never")


def _spec_fields(
    ph: dict[str, Any], checks: list[RequestCheck], meta: dict[str, Any], depth: int
) -> dict[str, Any]:
    """Bookkeeping, tokens per verify, and verify counts against the oracle where every step speculated."""
    pi = meta["pi"]
    reqs = ph["requests"]
    verifies = sum(r.get("verify_ct") or 0 for r in reqs)
    gen = sum((r.get("completion_tokens") or 0) - 1 for r in reqs)
    item: dict[str, Any] = {
        "bookkeeping_ok": sum(bool(c.bookkeeping_ok) for c in checks),
        "bookkeeping_notes": [c.bookkeeping_note for c in checks if not c.bookkeeping_ok][:4],
        "tokens_per_verify": round(gen / verifies, 3) if verifies else None,
        "correct_drafts": sum(r.get("correct_drafts") or 0 for r in reqs),
    }
    if ph["policy"] in ("always-on", "static", None):  # None: SGLang's own static speculation
        want = [
            oracle_verifies(pi, meta["pi_draft"], int(pi[last]), n - 1, depth)
            for n, last in zip(ph["max_new_tokens"], ph["prompt_last"], strict=True)
        ]
        got = [r.get("verify_ct") for r in reqs]
        item["oracle_verifies_equal"] = sum(1 for a, b in zip(got, want, strict=False) if a == b)
        item["oracle_tokens_per_verify"] = (
            round(sum(n - 1 for n in ph["max_new_tokens"]) / sum(want), 3) if want else None
        )
    return item


def _phase_item(
    ph: dict[str, Any], path: str, meta: dict[str, Any], depth: int, window: _Window | None
) -> dict[str, Any]:
    spec = not path.startswith("base")
    checks = [
        check_request(r, n, last, meta["pi"], depth if spec else None)
        for r, n, last in zip(ph["requests"], ph["max_new_tokens"], ph["prompt_last"], strict=False)
    ]
    passes = ph.get("passes", 1)
    served = len(ph["requests"]) == ph["concurrency"] * passes and not ph.get("error")
    item: dict[str, Any] = {
        "name": ph["name"],
        "kind": ph["phase_kind"],
        "policy": _label(path, ph["policy"]),
        "concurrency": ph["concurrency"],
        "repeat": ph.get("repeat", 0),
        "passes": passes,
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
        item.update(_spec_fields(ph, checks, meta, depth))
    if ph["phase_kind"] == "ramp":
        item["ramp"] = ramp_summary(ph["requests"])
    if window is not None:
        win = window(ph["t_start"], ph["t_end"])
        item["trace"] = trace_summary(win)
        # Requests the engine did not run together with the others (admitted late): the phase's tail.
        item["trace"]["max_batch"] = max((r["batch_size"] for r in win), default=None)
        item["trace"]["tail_steps"] = sum(1 for r in win if r["batch_size"] * 2 < ph["concurrency"])
        m = RESUME_LABEL_RE.search(ph["policy"] or "")
        if ph["phase_kind"] == "resume" and m:
            item["resume"] = resume_cost(
                sorted(win, key=lambda r: r["step"]), int(m.group(1)), ph["concurrency"]
            )
    return item


def analyze_engine(folder: Path, meta: dict[str, Any], depth: int, path: str | None = None) -> dict[str, Any]:
    """Every phase of one engine checked against the oracle, with its trace summary where there is one."""
    path = path or folder.name
    recs = load_jsonl(folder / "phases.jsonl")
    engine = next((r for r in recs if r.get("kind") == "engine"), None)
    log = (folder / "engine.log").read_text(errors="replace") if (folder / "engine.log").exists() else ""
    trace = load_trace(folder) if not path.startswith("base") else []
    window = _Window(trace) if trace or path in ("v1", "v2") else None
    phases = [_phase_item(ph, path, meta, depth, window) for ph in recs if ph.get("kind") == "phase"]
    perf_walls = [p["wall_s"] for p in phases if p["kind"] == "perf" and p["served"]]
    run = json.loads((folder / "run.json").read_text()) if (folder / "run.json").exists() else {}
    return {
        "path": path,
        "backend": (engine or {}).get("backend") or ((engine or {}).get("kw") or {}).get("attention_backend"),
        "speculative": not path.startswith("base"),
        "init_s": engine.get("init_s") if engine else None,
        "policies": run.get("policies", {}),  # what each label meant in this run (thresholds change)
        "phases": phases,
        "skipped": [r["name"] for r in recs if r.get("kind") == "skip"],
        "perf_min_wall_s": min(perf_walls) if perf_walls else None,
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
    resumes = [p for p in real if p["kind"] == "resume"]
    v["resume_measured"] = None if not resumes else all(p.get("resume", {}).get("samples") for p in resumes)
    return v


def _side_key(engine_id: str) -> str:
    """``base_v2/triton`` -> ``v2/triton``: the speculation-free and plain engines join their path's table."""
    path, backend = engine_id.split("/", 1)
    return f"{'v1' if path.endswith('v1') else 'v2'}/{backend}"


def _collect(engines: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """perf (medians), perf_spread ([min, max]), perf_samples, ramp and resume, keyed ``<path>/<backend>``."""
    samples: dict[str, dict[str, dict[int, list[float]]]] = {}
    ramp: dict[str, dict[str, Any]] = {}
    resume: dict[str, dict[int, Any]] = {}
    for eid, eng in engines.items():
        key = _side_key(eid)
        for p in eng["phases"]:
            if p["kind"] == "perf" and p["served"] and p["tok_per_s"]:
                row = samples.setdefault(key, {}).setdefault(p["policy"], {})
                row.setdefault(p["concurrency"], []).append(p["tok_per_s"])
            elif p["kind"] == "ramp" and "ramp" in p:
                ramp.setdefault(key, {})[p["policy"]] = {
                    **p["ramp"],
                    "lossless": p["lossless"] == p["requests"],
                }
            elif p["kind"] == "resume" and "resume" in p:
                resume.setdefault(key, {})[p["resume"]["k"]] = p["resume"]
    perf, spread = spread_table(samples)
    return {"perf": perf, "perf_spread": spread, "perf_samples": samples, "ramp": ramp, "resume": resume}


def load_doctor(folder: Path) -> dict[str, Any]:
    """``specpolicy doctor --smoke`` per backend: exit status, seconds, and its JSON report (or its tail)."""
    out: dict[str, Any] = {}
    root = folder / "doctor"
    for d in sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []:
        rc = json.loads((d / "doctor.rc").read_text()) if (d / "doctor.rc").exists() else {}
        text = (d / "doctor.json").read_text(errors="replace") if (d / "doctor.json").exists() else ""
        try:
            parsed: Any = json.loads(text)
        except json.JSONDecodeError:
            parsed = None
        out[d.name] = {
            "rc": rc.get("rc"),
            "seconds": rc.get("seconds"),
            "report": parsed,
            "output_tail": None if parsed is not None else text[-2000:],
        }
    return out


def analyze_dir(folder: Path, depth: int = 3, raise_count: int = 20) -> dict[str, Any]:
    """Every engine folder under ``folder`` (files extracted from the results tarballs)."""
    meta = json.loads((folder / "models-meta.json").read_text())
    engines = {}
    for eid, sub in engine_folders(folder):
        eng = analyze_engine(sub, meta, depth, path=eid.split("/", 1)[0])
        eng["verdicts"] = _verdicts(eng, raise_count, depth)
        engines[eid] = eng
    doctor = load_doctor(folder)
    ok = bool(engines) and all(v is not False for e in engines.values() for v in e["verdicts"].values())
    ok = ok and all(d["rc"] == 0 for d in doctor.values())
    return {
        "ok": ok,
        "model": {
            k: meta.get(k)
            for k in ("target", "draft", "target_params", "draft_params", "agree", "chain_vocab")
        },
        "engines": engines,
        **_collect(engines),
        "doctor": doctor,
    }


# ----------------------------------------------------------------------------------------------- markdown
def _engine_md(name: str, eng: dict[str, Any]) -> list[str]:
    lines = [f"## engine {name} (init {eng['init_s']} s, trace steps {eng['trace_steps']})"]
    lines += [f"- {k}: {v}" for k, v in eng["verdicts"].items()]
    lines += [f"- log: `{line.strip()[:240]}`" for line in eng["live_path_lines"][:2]]
    if eng.get("skipped"):
        lines.append(f"- skipped (budget): {', '.join(eng['skipped'])}")
    lines += [
        "",
        "| phase | requests | tok/s | exact counts | lossless | bookkeeping | tokens/verify | "
        "steps by depth | switches | fallbacks | decide us p50 |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for p in eng["phases"]:
        t = p.get("trace", {})
        lines.append(
            f"| {p['name']} | {p['requests']} | {p['tok_per_s']} | {p['count_ok']} | {p['lossless']} | "
            f"{p.get('bookkeeping_ok', '-')} | {p.get('tokens_per_verify', '-')} | "
            f"{t.get('by_depth', '-')} | {t.get('switches', '-')} | {t.get('fallbacks', '-')} | "
            f"{t.get('decide_us_p50', '-')} |"
        )
    return [*lines, ""]


def _perf_md(report: dict[str, Any]) -> list[str]:
    lines = []
    for key, table in sorted(report["perf"].items()):
        spread = report.get("perf_spread", {}).get(key, {})
        levels = sorted({int(c) for row in table.values() for c in row})
        lines.append(f"## throughput, {key} (output tokens/s, median and min-max of the repeats)")
        lines.append("| policy | " + " | ".join(str(c) for c in levels) + " |")
        lines.append("|---|" + "---:|" * len(levels))
        for pol, row in table.items():
            cells = []
            for c in levels:
                v = row.get(c, row.get(str(c)))
                lo_hi = spread.get(pol, {}).get(c, spread.get(pol, {}).get(str(c)))
                rng = f" ({lo_hi[0]:,.0f}-{lo_hi[1]:,.0f})" if lo_hi and lo_hi[0] != lo_hi[1] else ""
                cells.append("-" if v is None else f"{v:,.0f}{rng}")
            lines.append(f"| {pol} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _ramp_md(report: dict[str, Any]) -> list[str]:
    lines = []
    for key, table in sorted(report.get("ramp", {}).items()):
        lines += [
            f"## ramp, {key}",
            "| policy | tok/s | TPOT p50 ms | TPOT p99 ms | TTFT p50 ms | TTFT p99 ms | requests | span s | "
            "peak in flight | max lateness s | lossless |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for pol, r in table.items():
            lines.append(
                f"| {pol} | {r.get('tokens_per_s')} | {r.get('tpot_p50')} | {r.get('tpot_p99')} | "
                f"{r.get('ttft_p50')} | {r.get('ttft_p99')} | {r.get('finished')}/{r.get('requests')} | "
                f"{r.get('span_s')} | {r.get('peak_in_flight')} | {r.get('max_lateness_s')} | "
                f"{r.get('lossless')} |"
            )
        lines.append("")
    return lines


def _resume_md(report: dict[str, Any]) -> list[str]:
    lines = []
    for key, table in sorted(report.get("resume", {}).items()):
        lines += [
            f"## resume cost, {key} (step ms, medians; batch of {next(iter(table.values()))['batch_size']})",
            "| off steps k | samples | first on | second on | normal on | off | first / normal |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for k, r in sorted(table.items(), key=lambda kv: int(kv[0])):
            lines.append(
                f"| {k} | {r['samples']} | {r['first_on_ms']} | {r['second_on_ms']} | {r['normal_on_ms']} | "
                f"{r['off_ms']} | {r.get('first_over_normal', '-')} |"
            )
        lines.append("")
    return lines


def _doctor_md(report: dict[str, Any]) -> list[str]:
    lines = []
    for backend, d in sorted(report.get("doctor", {}).items()):
        lines.append(f"## specpolicy doctor --smoke ({backend}): rc {d['rc']} in {d['seconds']} s")
        body = json.dumps(d["report"], indent=1) if d["report"] is not None else (d["output_tail"] or "")
        lines += ["```", body[:6000], "```", ""]
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    lines = [f"overall: {'PASS' if report['ok'] else 'FAIL'}", ""]
    for name, eng in report["engines"].items():
        lines += _engine_md(name, eng)
    lines += _perf_md(report) + _ramp_md(report) + _resume_md(report) + _doctor_md(report)
    return "\n".join(lines)
