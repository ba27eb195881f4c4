"""Turning runs into the report: one row per (policy, concurrency), the JSON document and the text table.

Ratios compare a row with rows of the same scenario: ``vs_best_fixed`` (also ``vs_best_static``, its older
name) divides its output tokens/s by best-fixed's, the best of ``static-0`` .. ``static-K`` on that scenario
in hindsight (per level for a sweep, over the whole run for a time-varying workload), ``vs_oracle`` by the
per-step oracle's, ``vs_lookahead`` by the lookahead oracle's, ``vs_never`` by the speculation-free
engine's. The JSON's ``references`` names best-fixed and gives the references' throughput per scenario.
The JSON shape is fixed by the simulator's documentation (``docs/getting-started/simulator.md``); extra fields
may be added, never renamed. The table marks each scenario's winners and ends with the verdict
(``verdict.py``).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .comparators import REFERENCE_KINDS
from .run import RunOutcome, Simulation
from .scenario import Scenario
from .verdict import TIE, standings, verdict_lines
from .workloads import WORKLOADS

__all__ = ["Row", "Reference", "rows", "references", "to_json", "format_table", "REQUIRED_RUN_KEYS"]

REQUIRED_RUN_KEYS = (
    "policy",
    "concurrency",
    "output_tok_s",
    "tpot_ms_p50",
    "tpot_ms_p99",
    "ttft_ms_p50",
    "switches",
    "spec_step_share",
)


@dataclass(frozen=True)
class Row:
    policy: str
    concurrency: int | None
    output_tok_s: float
    tpot_ms_p50: float
    tpot_ms_p99: float
    ttft_ms_p50: float
    switches: int
    spec_step_share: float
    vs_best_static: float | None
    vs_oracle: float | None
    decide_cost_us: float | None
    goodput_tok_s: float | None
    mean_batch: float
    mean_accept_len: float | None
    decode_steps: int
    prefill_steps: int
    completed: int
    extrapolated: bool
    sim_steps_per_s: float
    vs_never: float | None = None
    vs_lookahead: float | None = None
    #: an open-loop scenario (arrivals set the throughput): compared by latency
    open_loop: bool = False

    @property
    def vs_best_fixed(self) -> float | None:
        """Throughput over best-fixed's: the best fixed depth (static-0..K) of this scenario in hindsight."""
        return self.vs_best_static


@dataclass(frozen=True)
class Reference:
    """One scenario's references: best-fixed (which static-k, its tok/s), the per-step oracle's and the
    lookahead oracle's tok/s (None where the report has no such row)."""

    concurrency: int | None
    best_fixed: str | None
    best_fixed_tok_s: float | None
    oracle_tok_s: float | None
    lookahead_tok_s: float | None = None


def _pct(values: Any, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else math.nan


def _row(
    o: RunOutcome,
    best_static: float | None,
    oracle: float | None,
    slo_tpot_ms: float | None,
    never: float | None = None,
    lookahead: float | None = None,
) -> Row:
    r = o.result
    tok = r.output_tok_s
    kind = o.comparator.kind
    return Row(
        policy=o.comparator.label,
        concurrency=o.concurrency,
        output_tok_s=tok,
        tpot_ms_p50=_pct(r.tpot_ms, 50),
        tpot_ms_p99=_pct(r.tpot_ms, 99),
        ttft_ms_p50=_pct(r.ttft_ms, 50),
        switches=r.switches,
        spec_step_share=r.spec_step_share,
        vs_best_static=tok / best_static if best_static else None,
        vs_oracle=tok / oracle if oracle else None,
        decide_cost_us=None if kind == "never" or kind in REFERENCE_KINDS else o.decide_cost_s * 1e6,
        goodput_tok_s=None if slo_tpot_ms is None else r.goodput_tok_s(slo_tpot_ms),
        mean_batch=r.mean_batch,
        mean_accept_len=r.mean_accept_len,
        decode_steps=r.decode_steps,
        prefill_steps=r.prefill_steps,
        completed=r.requests_completed,
        extrapolated=r.extrapolated,
        sim_steps_per_s=r.decode_steps_total / r.wall_s if r.wall_s > 0 else 0.0,
        vs_never=tok / never if never else None,
        vs_lookahead=tok / lookahead if lookahead else None,
        open_loop=o.scenario.requests is not None,
    )


def _groups(sim: Simulation) -> list[list[RunOutcome]]:
    groups: dict[int, list[RunOutcome]] = {}
    for o in sim.outcomes:
        groups.setdefault(id(o.scenario), []).append(o)
    return list(groups.values())


def _reference(group: list[RunOutcome]) -> Reference:
    statics = [o for o in group if o.comparator.is_static]
    # The first of equals wins: the shallowest depth among ties.
    best = max(statics, key=lambda o: o.result.output_tok_s, default=None)
    oracle = next((o.result.output_tok_s for o in group if o.comparator.kind == "oracle"), None)
    lookahead = next((o.result.output_tok_s for o in group if o.comparator.kind == "lookahead"), None)
    return Reference(
        group[0].concurrency,
        best.comparator.label if best is not None else None,
        best.result.output_tok_s if best is not None else None,
        oracle,
        lookahead,
    )


def references(sim: Simulation) -> list[Reference]:
    """Per scenario, in report order: best-fixed (the best static-k in hindsight) and the oracle."""
    return [_reference(g) for g in _groups(sim)]


def rows(sim: Simulation, slo_tpot_ms: float | None = None) -> list[Row]:
    """Report rows, scenario by scenario, in comparator order."""
    out: list[Row] = []
    for group in _groups(sim):
        ref = _reference(group)
        never = next((o.result.output_tok_s for o in group if o.comparator.kind == "never"), None)
        out.extend(
            _row(o, ref.best_fixed_tok_s, ref.oracle_tok_s, slo_tpot_ms, never, ref.lookahead_tok_s)
            for o in group
        )
    return out


def _num(x: float | None, digits: int = 4) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return round(x, digits)


def to_json(sim: Simulation, slo_tpot_ms: float | None = None) -> dict[str, Any]:
    """The ``--json`` document: ``{"profile", "workload", "seed", "runs": [...]}`` plus extra fields."""
    runs = []
    for r in rows(sim, slo_tpot_ms):
        d: dict[str, Any] = {
            "policy": r.policy,
            "concurrency": r.concurrency,
            "output_tok_s": _num(r.output_tok_s, 3),
            "tpot_ms_p50": _num(r.tpot_ms_p50),
            "tpot_ms_p99": _num(r.tpot_ms_p99),
            "ttft_ms_p50": _num(r.ttft_ms_p50),
            "switches": r.switches,
            "spec_step_share": _num(r.spec_step_share, 6),
            "vs_best_static": _num(r.vs_best_static),
            "vs_best_fixed": _num(r.vs_best_fixed),
            "vs_oracle": _num(r.vs_oracle),
            "vs_never": _num(r.vs_never),
            "vs_lookahead": _num(r.vs_lookahead),
            "decide_cost_us": _num(r.decide_cost_us, 3),
            "mean_batch": _num(r.mean_batch, 3),
            "mean_accept_len": _num(r.mean_accept_len),
            "decode_steps": r.decode_steps,
            "prefill_steps": r.prefill_steps,
            "completed_requests": r.completed,
            "extrapolated": r.extrapolated,
        }
        if slo_tpot_ms is not None:
            d["goodput_tok_s"] = _num(r.goodput_tok_s, 3)
        runs.append(d)
    spec = sim.spec
    scenario = sim.outcomes[0].scenario if sim.outcomes else None
    return {
        "profile": sim.profile.name,
        "workload": sim.workload,
        "seed": spec.seed,
        "runs": runs,
        "references": [
            {
                "concurrency": ref.concurrency,
                "best_fixed": ref.best_fixed,
                "best_fixed_tok_s": _num(ref.best_fixed_tok_s, 3),
                "oracle_tok_s": _num(ref.oracle_tok_s, 3),
                "lookahead_tok_s": _num(ref.lookahead_tok_s, 3),
            }
            for ref in references(sim)
        ],
        "acceptance": scenario.acceptance.to_json() if scenario is not None else None,
        "request_shape": _shape_json(scenario) if scenario is not None else None,
        "hints": scenario.hints.to_json() if scenario is not None and scenario.hints is not None else None,
        "off_cost": sim.profile.off_cost,
        "feedback_lag": spec.feedback_lag,
        "max_running": spec.max_running,
        "duration_s": spec.duration_s,
        "decide_cost_fixed_us": spec.decide_cost_us,
        "notes": list(sim.notes),
        "swap": None if spec.swap is None else asdict(spec.swap),
        "wall_s": round(sim.wall_s, 3),
        "simulated_decode_steps": _speed(sim)[0],
    }


def _shape_json(sc: Scenario) -> dict[str, Any]:
    """The request shape that ran: a requests file's own lengths (their mean, min and max), else the
    shape the requests were drawn from."""
    req = sc.requests
    if req is None or sc.workload in WORKLOADS or not len(req):
        return {**sc.shape.to_json(), "source": "drawn"}
    out: dict[str, Any] = {"source": "file", "requests": len(req)}
    for key, arr in (("prompt", req.prompt_tokens), ("output", req.output_tokens)):
        out[f"{key}_mean"] = round(float(np.mean(arr)), 3)
        out[f"{key}_min"] = int(np.min(arr))
        out[f"{key}_max"] = int(np.max(arr))
    return out


def _speed(sim: Simulation) -> tuple[int, float]:
    """(decode steps simulated, summed wall time of the runs): the per-process simulation speed."""
    steps = sum(o.result.decode_steps_total for o in sim.outcomes)
    return steps, max(1e-9, sum(o.result.wall_s for o in sim.outcomes))


def _cell(text: str, width: int, left: bool) -> str:
    return text.ljust(width) if left else text.rjust(width)


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, fmt)


#: The narrow layout's width: every line fits in it.
NARROW = 100


def _wrap(text: str, width: int | None) -> list[str]:
    if width is None:
        return [text]
    return textwrap.wrap(text, width, subsequent_indent="  ", break_on_hyphens=False) or [""]


def format_table(sim: Simulation, slo_tpot_ms: float | None = None, *, wide: bool = False) -> str:
    """The text report: a header, one table per scenario, the legend, the notes and the verdict (its last
    lines). The narrow layout (default) fits ``NARROW`` columns; ``wide`` adds the oracle and decide() columns
    and does not wrap."""
    all_rows = rows(sim, slo_tpot_ms)
    prof = sim.profile
    spec = sim.spec
    width = None if wide else NARROW
    lines: list[str] = []
    lines += _wrap(
        f"profile {prof.name} (off step: {_off_text(sim)}), workload {sim.workload}, seed {spec.seed}, "
        f"max_running {spec.max_running}, "
        f"feedback {'one step late' if spec.feedback_lag else 'previous step'}",
        width,
    )
    if (spec.acceptance is not None or spec.shape is not None) and sim.outcomes:
        sc = sim.outcomes[0].scenario
        lines += _wrap(f"requests: acceptance {sc.acceptance.describe()}", width)
        lines.append(f"requests: {sc.shape.describe()}")
    stands = {st.concurrency: st for st in standings(all_rows)}
    divisor = {ref.concurrency: ref.best_fixed for ref in references(sim)}
    current: object = object()
    table: list[list[str]] = []
    head: list[str] = []

    def flush() -> None:
        if not table:
            return
        widths = [max(len(r[i]) for r in [head, *table]) for i in range(len(head))]
        for cells in (head, *table):
            pairs = enumerate(zip(cells, widths, strict=True))
            lines.append("  ".join(_cell(c, w, i in (0, len(cells) - 1)) for i, (c, w) in pairs).rstrip())
        table.clear()

    for r in all_rows:
        st = stands[r.concurrency]
        if r.concurrency != current:
            flush()
            current = r.concurrency
            lines.append("")
            title = "" if r.concurrency is None else f"concurrency {r.concurrency}"
            if st.extrapolated:
                title += (" " if title else "") + _outside(sim, r.concurrency)
            if title:
                lines += _wrap(title + ":", width)
            head = ["policy", "tok/s", "TPOT p50", "TPOT p99", "TTFT p50", "switch", "spec", "x never"]
            head.append(f"x {divisor.get(r.concurrency) or 'best static'}")
            if slo_tpot_ms is not None:
                head.insert(2, "goodput")
            if wide:
                head += ["x oracle", "decide us"]
            head.append("")
        cells = [
            r.policy,
            _f(r.output_tok_s, ".1f"),
            _f(r.tpot_ms_p50, ".2f"),
            _f(r.tpot_ms_p99, ".2f"),
            _f(r.ttft_ms_p50, ".1f"),
            str(r.switches),
            _f(r.spec_step_share * 100, ".0f") + "%",
            _f(r.vs_never, ".3f"),
            _f(r.vs_best_static, ".3f"),
        ]
        if slo_tpot_ms is not None:
            cells.insert(2, _f(r.goodput_tok_s, ".1f"))
        if wide:
            cells += [_f(r.vs_oracle, ".3f"), _f(r.decide_cost_us, ".2f")]
        cells.append("<- best" if r.policy in st.best else "")
        table.append(cells)
    flush()
    lines.append("")
    how = (
        f"fixed at {spec.decide_cost_us:g} us"
        if spec.decide_cost_us is not None
        else "measured on this host (median of 400 calls at batch 64), so it varies run to run"
    )
    metric = (
        "TPOT p50 on open-loop scenarios (the arrivals set tok/s), else tok/s"
        if any(r.open_loop for r in all_rows)
        else "tok/s"
    )
    legend = (
        f"tok/s = output tokens per simulated second; TPOT (per request, after its first token) and TTFT "
        f"in ms; spec = share of decode steps that speculated; x never = tok/s over a speculation-free "
        f"engine's, x static-k = over the best fixed depth's (static-0..{prof.max_steps}) of the scenario; "
        f"<- best = within {TIE:.1%} of the best row by {metric} (oracles excluded); "
        f"decide() charge per decode step: {how}"
    )
    lines += _wrap(legend, width)
    for note in sim.notes:
        lines += _wrap(f"note: {note}", width)
    steps, run_wall = _speed(sim)
    lines.append(
        f"simulated {steps:,} decode steps in {sim.wall_s:.1f} s wall "
        f"({steps / run_wall:,.0f} decode steps/s per process)"
    )
    lines += verdict_lines(all_rows, width)
    return "\n".join(lines)


def _off_text(sim: Simulation) -> str:
    off = sim.profile.off_cost
    if off == "lazy":
        return "lazy, the specpolicy adapter's"
    return "catch_up, a draft pass on each"


def _outside(sim: Simulation, level: int | None) -> str:
    """The per-level flag: the profile's measured range, from its ``measured`` field (fitted profiles)
    or its grids."""
    prof = sim.profile
    m = prof.spec.measured
    if m is not None:
        batch = f"batch {m.batch_size[0]:g}-{m.batch_size[1]:g}"
        ctx = f", context {m.seq_len[0]:g}-{m.seq_len[1]:g}" if m.seq_len else ""
    else:
        batch, ctx = f"batch <= {prof.max_batch_size:g}", f", context <= {max(prof.seq_lens):g}"
    return f"(OUTSIDE profile {prof.name}'s measured range, {batch}{ctx}: costs extrapolated)"
