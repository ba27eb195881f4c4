"""Checks and tables from the live GPU check's raw results. Pure Python; runs anywhere.

Input folder layout (what ``specpolicy-livecheck run`` packs): ``models-meta.json`` (the bigram maps), one
folder per engine, ``<path>/<backend>`` (``v2/triton``, ``base_v2/flashinfer``; results of the first runs
have ``<path>`` alone, read as triton), holding ``phases.jsonl`` (one line per request batch or ramp),
``engine.log``, ``run.json`` (the plan), and for engines with the adapter ``trace.jsonl`` (the adapter's step
trace) and ``dispatch.jsonl``; and ``doctor/<backend>/`` with the output of ``specpolicy doctor --smoke``.

Every expected value comes from the bigram oracle (bigram_model.py), the EAGLE-3 head's computed
proposals (eagle3_model.py, in ``models-meta.json`` under ``eagle3``) or from SGLang's own
counters, never from specpolicy.

EAGLE-3 engines add the acceptance pairs (plan._pairs): a batch that is off for its first k steps, then on,
against an always-on batch whose prompts stand k tokens further along the chain. Once the off stretch is
over both verify from the same tokens, so with the drafter's hidden states caught up exactly every request
must show the reference's accepted drafts, and k more verifies that accepted none. The phase that hands the
drafter zero hidden states while off (``gpucheck_skip_catch_up``) must fail that comparison.
"""

from __future__ import annotations

import bisect
import json
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from specpolicy_livecheck import plan as planmod
from specpolicy_livecheck.bigram_model import greedy_chain

__all__ = [
    "RequestCheck",
    "check_request",
    "OracleCounts",
    "oracle_counts",
    "draft_model_accepts",
    "accepts_for",
    "pair_check",
    "off_ratio",
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


#: Accepted drafts of a verify rooted at a token (before the cap at the verify's depth).
Accepts = Callable[[int], int]


def draft_model_accepts(pi: IntSeq, pi_draft: IntSeq, depth: int) -> Accepts:
    """A draft model's verify rooted at b accepts the run of tokens from b on where the draft agrees with
    the target, at most ``depth``."""

    def accepts(b: int) -> int:
        d, n = int(b), 0
        while n < depth and int(pi_draft[d]) == int(pi[d]):
            n, d = n + 1, int(pi[d])
        return n

    return accepts


def accepts_for(meta: dict[str, Any], path: str, depth: int) -> Accepts | None:
    """Per-root accepted drafts of a topk-1 engine on ``path``: the draft model's agreement runs, or the
    EAGLE-3 head's computed table (``root_accepts``); None for the draft tree, whose acceptance is only
    compared with its own always-on batches (the pairs)."""
    shape = planmod.spec_shape(path, depth)
    if shape is None or shape.topk != 1:
        return None
    if shape.algorithm == "STANDALONE":
        return draft_model_accepts(meta["pi"], meta["pi_draft"], depth)
    table = (meta.get("eagle3") or {}).get("accept")
    return None if table is None else _capped(table, depth)


def _capped(table: Sequence[int], depth: int) -> Accepts:
    return lambda b: min(int(table[b]), depth)


class OracleCounts(NamedTuple):
    """What SGLang's per-request counters must read: verifies (off steps count as verifies of none),
    accepted drafts, their histogram, and the tokens the last verify produced past the request's end."""

    verifies: int
    correct: int
    histogram: list[int]
    overshoot: int


def oracle_counts(
    pi: IntSeq,
    accepts: Accepts,
    root: int,
    n: int,
    depth: int,
    off_first: int = 0,
    first_on: Accepts | None = None,
) -> OracleCounts:
    """A request whose first output token (the prefill's) is ``root`` and that emits ``n`` >= 1 tokens: off
    for its first ``off_first`` steps (one token each), then speculating ``depth`` deep, each verify rooted
    at the last emitted token b accepting ``accepts(b)`` drafts, at most ``depth``. ``first_on`` replaces
    ``accepts`` for the first verify after the off stretch (the skipped catch-up)."""
    b, produced, verifies, correct = int(root), 1, 0, 0
    hist = [0] * (depth + 1)
    for _ in range(off_first):
        if produced >= n:
            break
        b, produced, verifies = int(pi[b]), produced + 1, verifies + 1
        hist[0] += 1
    first = True
    while produced < n:
        fn = first_on if first and first_on is not None and off_first else accepts
        a = min(fn(b), depth)
        first = False
        verifies, correct = verifies + 1, correct + a
        hist[a] += 1
        for _ in range(a + 1):
            b = int(pi[b])
        produced += a + 1
    return OracleCounts(verifies, correct, hist, produced - n)


def oracle_verifies(pi: IntSeq, pi_draft: IntSeq, start: int, n: int, depth: int) -> int:
    """Verify cycles chain speculation ``depth`` deep needs to emit n tokens after token ``start``."""
    return oracle_counts(pi, draft_model_accepts(pi, pi_draft, depth), start, n + 1, depth).verifies


def _counters_match(req: dict[str, Any], want: OracleCounts) -> bool:
    """SGLang's counters against the oracle: verifies exactly; accepted drafts exactly, or less by at most
    what the last verify produced past the request's end (should SGLang count only the tokens kept)."""
    v, c = req.get("verify_ct"), req.get("correct_drafts")
    if v is None or c is None:
        return False
    return bool(v == want.verifies and want.correct - want.overshoot <= c <= want.correct)


def pair_check(
    reqs: Sequence[dict[str, Any]],
    refs: Sequence[dict[str, Any]],
    k: int,
    margins: Sequence[float] | None = None,
) -> dict[str, Any]:
    """Request i of a batch off for its first k steps against request i of its always-on reference (k
    tokens further along the chain, k tokens shorter): equal accepted drafts and histogram of accepted
    drafts 1 and up, k more verifies and k more verifies of none. A difference lists the counters and,
    given the head's first-proposal ``margins``, the smallest along the reference's tokens (a near tie
    there could flip on the target's tiny context terms rather than on a missed catch-up)."""
    equal = 0
    diffs: list[dict[str, Any]] = []
    for i, (x, r) in enumerate(zip(reqs, refs, strict=False)):
        hx, hr = x.get("histogram"), r.get("histogram")
        same = (
            x.get("correct_drafts") is not None
            and x.get("correct_drafts") == r.get("correct_drafts")
            and x.get("verify_ct") is not None
            and r.get("verify_ct") is not None
            and x["verify_ct"] == r["verify_ct"] + k
        )
        if same and hx is not None and hr is not None:
            same = list(hx[1:]) == list(hr[1:]) and hx[0] == hr[0] + k
        if same:
            equal += 1
        elif len(diffs) < 4:
            diff: dict[str, Any] = {
                "request": i,
                "correct_drafts": [x.get("correct_drafts"), r.get("correct_drafts")],
                "verify_ct": [x.get("verify_ct"), r.get("verify_ct")],
            }
            ids = r.get("output_ids") or []
            if margins is not None and ids:
                diff["min_margin"] = min(float(margins[t]) for t in ids)
            diffs.append(diff)
    return {"k": k, "requests": min(len(reqs), len(refs)), "equal": equal, "diffs": diffs}


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


def load_trace(folder: Path, name: str = "trace.jsonl") -> list[dict[str, Any]]:
    """Step records of a trace (rank 0's by default) and its rotated files, oldest first (headers
    dropped)."""
    files = sorted(
        folder.glob(f"{name}.*"), key=lambda p: -int(p.suffix[1:]) if p.suffix[1:].isdigit() else 0
    )
    recs: list[dict[str, Any]] = []
    for f in [*files, folder / name]:
        recs.extend(r for r in load_jsonl(f) if r.get("kind") != "header")
    return recs


def rank_agreement(folder: Path) -> dict[str, Any] | None:
    """Under tensor parallelism every rank writes its own trace (``trace.rank<N>.jsonl`` beside rank 0's
    ``trace.jsonl``); every rank must have run the same depth at every step. None with one rank.

    ``agree``: every rank's steps carry rank 0's depth, step for step, and none is missing more than the
    last 2 steps (a rank's final flush may lose them); ``first_differences``: up to 5 (rank, step, depth,
    rank 0's depth)."""
    ranks = sorted(
        int(m.group(1))
        for f in folder.glob("trace.rank*.jsonl")
        if (m := re.match(r"trace\.rank(\d+)\.jsonl$", f.name))
    )
    if not ranks:
        return None
    base = {r["step"]: r["num_steps"] for r in load_trace(folder)}
    diffs: list[list[int]] = []
    steps: dict[int, int] = {0: len(base)}
    missing = 0
    for rank in ranks:
        other = {r["step"]: r["num_steps"] for r in load_trace(folder, f"trace.rank{rank}.jsonl")}
        steps[rank] = len(other)
        missing = max(missing, len(set(base) ^ set(other)))
        diffs += [[rank, s, k, base[s]] for s, k in sorted(other.items()) if s in base and base[s] != k]
    return {
        "ranks": [0, *ranks],
        "steps": steps,
        "differences": len(diffs),
        "first_differences": diffs[:5],
        "agree": bool(base) and not diffs and missing <= 2,
    }


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
def engine_phases(folder: Path) -> list[dict[str, Any]]:
    """The records of the last engine start in ``phases.jsonl``: a results folder reused by a later
    command on the same host holds the earlier start's records before it, and a median over both would
    mix two engines' measurements."""
    recs = load_jsonl(folder / "phases.jsonl")
    starts = [i for i, r in enumerate(recs) if r.get("kind") == "engine"]
    return recs[starts[-1] :] if starts else recs


def _engine_record(folder: Path) -> dict[str, Any] | None:
    return next((r for r in engine_phases(folder) if r.get("kind") == "engine"), None)


TP_DIR_RE = re.compile(r"tp\d+$")


def split_engine_id(engine_id: str) -> tuple[str, str, str]:
    """``tp2/v2/triton`` -> (``tp2/``, ``v2``, ``triton``); ``v2/triton`` -> (``""``, ``v2``, ``triton``)."""
    head, rest = engine_id.split("/", 1)
    tp = ""
    if TP_DIR_RE.match(head):
        tp, (head, rest) = f"{head}/", rest.split("/", 1)
    return tp, head, rest


def engine_folders(folder: Path) -> list[tuple[str, Path]]:
    """(``<path>/<backend>``, folder) of every engine under ``folder`` (``tp<N>/<path>/<backend>`` for the
    tensor-parallel engines); a folder of the first runs (``<path>/phases.jsonl``) gets the backend its
    engine record names, else triton."""
    out = []
    for d in sorted(p for p in folder.iterdir() if p.is_dir() and p.name != "doctor"):
        if TP_DIR_RE.match(d.name):
            out += [(f"{d.name}/{eid}", sub) for eid, sub in engine_folders(d)]
            continue
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


ONCE_RE = re.compile(r"(resume-once|skip-catch-up)-(\d+)$")


def _off_first(policy: str | None) -> tuple[int, bool] | None:
    """(k, skipped catch-up) for the policies of the acceptance pairs, whose schedule is known: off for the
    first k steps, then on for good; (0, False) for always-on; None for every other policy."""
    if policy in ("always-on", "static", None):  # None: SGLang's own static speculation
        return 0, False
    m = ONCE_RE.search(policy)
    return None if m is None else (int(m.group(2)), m.group(1) == "skip-catch-up")


def _spec_fields(
    ph: dict[str, Any],
    checks: list[RequestCheck],
    meta: dict[str, Any],
    depth: int,
    accepts: Accepts | None,
    eagle3: bool,
) -> dict[str, Any]:
    """Bookkeeping, tokens per verify, and SGLang's counters against the oracle where the schedule is
    known (always on; off for the first k steps, then on): verify counts, and for EAGLE-3 the accepted
    drafts too (for the skipped catch-up, against the head with a zero hidden state after the stretch)."""
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
    sched = _off_first(ph["policy"])
    if accepts is None or sched is None:
        return item
    k, skipped = sched
    no_hidden = (meta.get("eagle3") or {}).get("accept_no_hidden")
    first_on = _capped(no_hidden, depth) if skipped and no_hidden is not None else None
    lens_lasts = list(zip(ph["max_new_tokens"], ph["prompt_last"], strict=True))
    want = [oracle_counts(pi, accepts, int(pi[last]), n, depth, k, first_on) for n, last in lens_lasts]
    if not skipped:
        got = [r.get("verify_ct") for r in reqs]
        item["oracle_verifies_equal"] = sum(1 for a, w in zip(got, want, strict=False) if a == w.verifies)
        item["oracle_tokens_per_verify"] = (
            round(sum(n - 1 for n, _ in lens_lasts) / sum(w.verifies for w in want), 3) if want else None
        )
    if eagle3:
        item["oracle_counts_equal"] = sum(_counters_match(r, w) for r, w in zip(reqs, want, strict=False))
        if skipped:  # requests whose counters the skipped catch-up must change
            normal = [oracle_counts(pi, accepts, int(pi[last]), n, depth, k) for n, last in lens_lasts]
            item["oracle_skip_changes"] = sum(a != b for a, b in zip(want, normal, strict=True))
    return item


def _phase_item(
    ph: dict[str, Any],
    path: str,
    meta: dict[str, Any],
    depth: int,
    window: _Window | None,
    accepts: Accepts | None = None,
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
        item.update(_spec_fields(ph, checks, meta, depth, accepts, path in planmod.EAGLE3_PATHS))
    if ph["phase_kind"] == "ramp":
        item["ramp"] = ramp_summary(ph["requests"])
    if window is not None:
        win = window(ph["t_start"], ph["t_end"])
        item["trace"] = trace_summary(win)
        # Requests the engine did not run together with the others (admitted late): the phase's tail.
        item["trace"]["max_batch"] = max((r["batch_size"] for r in win), default=None)
        item["trace"]["tail_steps"] = sum(1 for r in win if r["batch_size"] * 2 < ph["concurrency"])
        # The pairs assume every request's first decode step is the batch's first (one prefill batch).
        item["trace"]["first_batch"] = min(win, key=lambda r: r["step"])["batch_size"] if win else None
        m = RESUME_LABEL_RE.search(ph["policy"] or "")
        if ph["phase_kind"] == "resume" and m:
            item["resume"] = resume_cost(
                sorted(win, key=lambda r: r["step"]), int(m.group(1)), ph["concurrency"]
            )
    return item


SKIP_LOG_RE = re.compile(r"gpucheck_skip_catch_up: (zeroing|cannot)")


def _pairs(phases: list[dict[str, Any]], recs: Sequence[dict[str, Any]], meta: dict[str, Any]) -> None:
    """Attach to every phase that names a reference its pair check (``pair``)."""
    by_name = {r["name"]: r for r in recs}
    items = {p["name"]: p for p in phases}
    margins = (meta.get("eagle3") or {}).get("margin")
    for rec in recs:
        ref = by_name.get(rec.get("reference") or "")
        if ref is None or rec["name"] not in items:
            continue
        pair = pair_check(rec["requests"], ref["requests"], int(ref.get("chain_shift") or 0), margins)
        items[rec["name"]]["pair"] = {"reference": ref["name"], **pair}


def analyze_engine(folder: Path, meta: dict[str, Any], depth: int, path: str | None = None) -> dict[str, Any]:
    """Every phase of one engine checked against the oracle, with its trace summary where there is one."""
    path = path or folder.name
    recs = engine_phases(folder)
    engine = next((r for r in recs if r.get("kind") == "engine"), None)
    log = (folder / "engine.log").read_text(errors="replace") if (folder / "engine.log").exists() else ""
    trace = load_trace(folder) if not path.startswith("base") else []
    window = _Window(trace) if trace or path in planmod.ADAPTER_PATHS else None
    accepts = accepts_for(meta, path, depth)
    phase_recs = [ph for ph in recs if ph.get("kind") == "phase"]
    phases = [_phase_item(ph, path, meta, depth, window, accepts) for ph in phase_recs]
    _pairs(phases, phase_recs, meta)
    perf_walls = [p["wall_s"] for p in phases if p["kind"] == "perf" and p["served"]]
    run = json.loads((folder / "run.json").read_text()) if (folder / "run.json").exists() else {}
    return {
        "path": path,
        "depth": depth,
        "backend": (engine or {}).get("backend") or ((engine or {}).get("kw") or {}).get("attention_backend"),
        "speculative": not path.startswith("base"),
        "init_s": engine.get("init_s") if engine else None,
        "policies": run.get("policies", {}),  # what each label meant in this run (thresholds change)
        "phases": phases,
        "skipped": [r["name"] for r in recs if r.get("kind") == "skip"],
        "perf_min_wall_s": min(perf_walls) if perf_walls else None,
        "live_path_lines": [line for line in log.splitlines() if LIVE_PATH_RE.search(line)][:4],
        "policy_error_logs": len(POLICY_ERROR_RE.findall(log)),
        "skip_catch_up_log": [m.group(0) for m in SKIP_LOG_RE.finditer(log)][:1],
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
    # by the check's name: the pairs' references run the always-on policy too
    by = {p["name"].split(":", 1)[1]: p for p in real if p["kind"] == "check"}
    on = by.get("always-on", by.get("sglang-static"))
    v["oracle_verify_counts"] = (
        None
        if on is None or "oracle_verifies_equal" not in on
        else on["oracle_verifies_equal"] == on["requests"]
    )
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
    if eng["path"] in planmod.EAGLE3_PATHS:
        v.update(_eagle3_verdicts(real))
    return v


def _eagle3_verdicts(real: Sequence[dict[str, Any]]) -> dict[str, bool | None]:
    """The acceptance oracle (topk 1: SGLang's counters equal the head's computed acceptance where the
    schedule is known), the pairs (acceptance after each off stretch equals the always-on reference's),
    and the proof that the pairs can fail: the skipped catch-up must differ from its reference. On the tree
    nothing predicts that the zero state changes an accepted path (other branches can hold the tokens), so
    there a skipped catch-up that went unseen is reported, not failed."""
    counted = [p for p in real if "oracle_counts_equal" in p and not p["policy"].startswith("skip-catch-up")]
    pairs = [p for p in real if "pair" in p and not p["policy"].startswith("skip-catch-up")]
    skips = [p for p in real if "pair" in p and p["policy"].startswith("skip-catch-up")]
    v: dict[str, bool | None] = {
        "oracle_acceptance": None
        if not counted
        else all(p["oracle_counts_equal"] == p["requests"] for p in counted),
        "acceptance_after_resume": None
        if not pairs
        else all(p["pair"]["equal"] == p["pair"]["requests"] > 0 for p in pairs),
    }
    detected = [p["pair"]["equal"] < p["pair"]["requests"] for p in skips]
    predicted = [p.get("oracle_skip_changes") for p in skips]
    flagged = [d for d, n in zip(detected, predicted, strict=True) if n]
    if skips and any(n is None for n in predicted):  # the tree: reported, never failed
        v["skipped_catch_up_detected"] = True if all(detected) else None
    else:  # None where no request's counters were predicted to change
        v["skipped_catch_up_detected"] = all(flagged) if flagged else None
    return v


def _side_key(engine_id: str) -> str:
    """``base_v2/triton`` -> ``v2/triton``: the speculation-free and plain engines join their path's table;
    ``eagle3_v1/triton`` -> ``eagle3/v1/triton``, ``eagle3tree_v1/triton`` -> ``eagle3-tree/v1/triton``;
    ``tp2/v2/triton`` -> ``tp2/v2/triton``."""
    tp, path, backend = split_engine_id(engine_id)
    shape = planmod.spec_shape(path)
    prefix = shape.report_prefix if shape is not None else ""
    return f"{tp}{prefix}{'v1' if path.endswith('v1') else 'v2'}/{backend}"


def _join_never(table: dict[str, dict[str, Any]], base_keys: set[str]) -> None:
    """The speculation-free engine's rows (``never``) also in the EAGLE-3 tables of its side and backend."""
    for key in list(table):
        head, rest = key.split("/", 1)
        tp, rest = (f"{head}/", rest) if TP_DIR_RE.match(head) else ("", key)
        tail = tp + rest.split("/", 1)[1] if rest.startswith(("eagle3/", "eagle3-tree/")) else None
        if tail in base_keys and tail in table:
            for pol, row in table[tail].items():
                if pol == "never":
                    table[key].setdefault(pol, row)


def off_ratio(perf: dict[str, dict[str, dict[int, float]]]) -> dict[str, dict[int, float]]:
    """static-0 over never per key and concurrency (medians): what an off step costs against a step of a
    speculation-free engine."""
    out: dict[str, dict[int, float]] = {}
    for key, table in perf.items():
        off, never = table.get("static-0", {}), table.get("never", {})
        for c in sorted(set(off) & set(never)):
            if never[c]:
                out.setdefault(key, {})[c] = round(off[c] / never[c], 3)
    return out


def _collect(engines: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """perf (medians), perf_spread ([min, max]), perf_samples, off_ratio, ramp and resume, keyed
    ``[eagle3/|eagle3-tree/]<side>/<backend>``."""
    samples: dict[str, dict[str, dict[int, list[float]]]] = {}
    ramp: dict[str, dict[str, Any]] = {}
    resume: dict[str, dict[int, Any]] = {}
    base_keys = {_side_key(eid) for eid, eng in engines.items() if not eng["speculative"]}
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
    _join_never(samples, base_keys)
    _join_never(ramp, base_keys)
    perf, spread = spread_table(samples)
    return {
        "perf": perf,
        "perf_spread": spread,
        "perf_samples": samples,
        "off_ratio": off_ratio(perf),
        "ramp": ramp,
        "resume": resume,
    }


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


def _engine_depth(folder: Path, path: str, depth: int) -> int:
    """The engine's launch depth: its plan's (run.json), else the path's (the tree has its own)."""
    run = folder / "run.json"
    if run.exists():
        d = json.loads(run.read_text()).get("depth")
        if d:
            return int(d)
    shape = planmod.spec_shape(path, depth)
    return depth if shape is None else shape.num_steps


def analyze_dir(folder: Path, depth: int = 3, raise_count: int = 20) -> dict[str, Any]:
    """Every engine folder under ``folder`` (files extracted from the results tarballs); ``depth`` is the
    launch depth of engines whose plan does not record one."""
    meta = json.loads((folder / "models-meta.json").read_text())
    engines = {}
    for eid, sub in engine_folders(folder):
        path = split_engine_id(eid)[1]
        d = _engine_depth(sub, path, depth)
        eng = analyze_engine(sub, meta, d, path=path)
        eng["verdicts"] = _verdicts(eng, raise_count, d)
        ranks = rank_agreement(sub)
        if ranks is not None:
            eng["ranks"] = ranks
            eng["verdicts"]["ranks_agree"] = ranks["agree"]
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
    return [*lines, "", *_acceptance_md(eng)]


def _acceptance_md(eng: dict[str, Any]) -> list[str]:
    """The EAGLE-3 acceptance checks: per phase with a known schedule, SGLang's counters against the head's
    computed acceptance, and per off stretch the pair against its always-on reference."""
    rows = [p for p in eng["phases"] if "pair" in p or "oracle_counts_equal" in p]
    if not rows:
        return []
    lines = [
        "| phase | oracle counts equal | pair: reference | k | equal | first differences |",
        "|---|---:|---|---:|---:|---|",
    ]
    for p in rows:
        pair = p.get("pair") or {}
        oracle = p.get("oracle_counts_equal")
        changes = p.get("oracle_skip_changes")
        cell = "-" if oracle is None else f"{oracle}/{p['requests']}"
        if changes is not None:
            cell += f" (skip changes {changes})"
        equal = f"{pair['equal']}/{pair['requests']}" if pair else "-"
        diffs = json.dumps(pair["diffs"][:2]) if pair.get("diffs") else ""
        ref, k = pair.get("reference", "-"), pair.get("k", "-")
        lines.append(f"| {p['name']} | {cell} | {ref} | {k} | {equal} | {diffs} |")
    if eng.get("skip_catch_up_log"):
        lines.append(f"- skipped catch-up log: `{eng['skip_catch_up_log'][0]}`")
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


def _off_ratio_md(report: dict[str, Any]) -> list[str]:
    ratios = report.get("off_ratio") or {}
    if not ratios:
        return []
    levels = sorted({int(c) for row in ratios.values() for c in row})
    lines = [
        "## off step against a speculation-free step (static-0 / never, medians)",
        "| engine | " + " | ".join(str(c) for c in levels) + " |",
        "|---|" + "---:|" * len(levels),
    ]
    for key, row in sorted(ratios.items()):
        cells = [row.get(c, row.get(str(c))) for c in levels]
        lines.append(f"| {key} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in cells) + " |")
    return [*lines, ""]


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
    lines += _perf_md(report) + _off_ratio_md(report) + _ramp_md(report) + _resume_md(report)
    lines += _doctor_md(report)
    return "\n".join(lines)
