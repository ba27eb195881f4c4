"""Who won each scenario, and the report's verdict: three lines a reader can act on.

Rows are compared within a scenario by one metric: output tokens/s (higher is better) on a closed loop, where
the engine's speed sets the throughput, and TPOT p50 (lower is better) on an open loop, where the arrivals set
it and every policy serves the same tokens. A row's *score* is its metric relative to the scenario's best row
(1 = the best; ``oracle`` and ``lookahead`` know the future and are references, never candidates). Rows
whose score is within ``TIE`` (0.5%) of the best tie for best: a difference that small is within what another
seed moves (docs/getting-started/simulator.md, "Verdict").

Fixed choices, what an engine runs without specpolicy, are ``never`` (a speculation-free engine) and
``static-1`` .. ``static-K``; ``static-0`` (speculation off inside the speculative engine) is fixed too. A
*policy* is every other row except the oracles: the registered policies and the engines' own rules
(``schedule-vllm``, ``sglang-adaptive``). The verdict:

1. ``speculation:`` where the best fixed depth beats ``never``, and by how much;
2. ``policies:`` the policy whose worst score over the scenarios is highest (called "best" only when it
   ties for best everywhere), against ``never`` and the best fixed depth;
3. ``deploy:`` what to run at which load: the rows tied for best, never one that a shown row beats.

The report prints each statement wrapped to its layout's width (``wrap``; ``unwrap`` reads them back).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "TIE",
    "ORACLES",
    "Standing",
    "standings",
    "verdict",
    "verdict_lines",
    "is_fixed",
    "wrap",
    "unwrap",
]

#: Rows whose score is this close (relative) to the best row's tie for best.
TIE = 0.005

#: Rows with perfect knowledge: references, never a candidate.
ORACLES = ("oracle", "lookahead")


class _Row(Protocol):
    @property
    def policy(self) -> str: ...

    @property
    def concurrency(self) -> int | None: ...

    @property
    def output_tok_s(self) -> float: ...

    @property
    def tpot_ms_p50(self) -> float: ...

    @property
    def ttft_ms_p50(self) -> float: ...

    @property
    def open_loop(self) -> bool: ...

    @property
    def extrapolated(self) -> bool: ...


def is_fixed(label: str) -> bool:
    """``never`` and ``static-k``: one choice for every step."""
    return label == "never" or label.startswith("static-")


def _value(r: _Row) -> float:
    """The scenario's metric, oriented so that larger is better (nan where the row has none)."""
    if r.open_loop:
        t = r.tpot_ms_p50
        return 1.0 / t if t > 0 and math.isfinite(t) else math.nan
    return r.output_tok_s


@dataclass(frozen=True)
class Standing:
    """One scenario's comparison."""

    concurrency: int | None
    #: "tok/s" (closed loop) or "TPOT p50" (open loop)
    metric: str
    #: every candidate row (not an oracle) within TIE of the best, in report order
    best: tuple[str, ...]
    #: each candidate's score: its metric over the best row's, in the direction of better (<= 1)
    score: dict[str, float]
    #: the best static-k (k >= 0), and the best with k >= 1: what the "x static-k" column divides by
    best_static: str | None
    best_depth: str | None
    #: the best fixed choice (never or a static-k)
    best_fixed: str | None
    #: metric of each row over never's, in the direction of better (> 1: better than no speculation)
    vs_never: dict[str, float]
    #: the scenario ran steps outside the profile's measured range
    extrapolated: bool
    #: TTFT p50 (ms) of each row: open-loop verdicts report it beside TPOT
    ttft_ms: dict[str, float] = field(default_factory=dict)

    @property
    def speculation_gain(self) -> float | None:
        """The best depth (k >= 1) over ``never``: > 1 when speculation pays."""
        return self.vs_never.get(self.best_depth) if self.best_depth else None


def _top(rows: Sequence[_Row]) -> _Row | None:
    good = [r for r in rows if math.isfinite(_value(r))]
    # max keeps the first of equals: the shallowest depth, or the first row in report order.
    return max(good, key=_value, default=None)


def standings(rows: Sequence[_Row]) -> list[Standing]:
    """One Standing per scenario, in report order."""
    groups: dict[int | None, list[_Row]] = {}
    for r in rows:
        groups.setdefault(r.concurrency, []).append(r)
    out = []
    for level, group in groups.items():
        cands = [r for r in group if r.policy not in ORACLES]
        top = _top(cands)
        score: dict[str, float] = {}
        if top is not None:
            best_v = _value(top)
            score = {r.policy: _value(r) / best_v for r in cands if math.isfinite(_value(r))}
        best = tuple(name for name, s in score.items() if s >= 1 - TIE)
        static = _top([r for r in group if r.policy.startswith("static-")])
        depth = _top([r for r in group if r.policy.startswith("static-") and r.policy != "static-0"])
        fixed = _top([r for r in group if is_fixed(r.policy)])
        never = next((r for r in group if r.policy == "never"), None)
        vs_never: dict[str, float] = {}
        if never is not None and math.isfinite(_value(never)) and _value(never) > 0:
            vs_never = {r.policy: _value(r) / _value(never) for r in group if math.isfinite(_value(r))}
        out.append(
            Standing(
                concurrency=level,
                metric="TPOT p50" if group[0].open_loop else "tok/s",
                best=best,
                score=score,
                best_static=static.policy if static else None,
                best_depth=depth.policy if depth else None,
                best_fixed=fixed.policy if fixed else None,
                vs_never=vs_never,
                extrapolated=any(r.extrapolated for r in group),
                ttft_ms={r.policy: r.ttft_ms_p50 for r in group},
            )
        )
    return out


def _levels(stands: Sequence[Standing]) -> str:
    return ", ".join(str(s.concurrency) for s in stands)


def _span(values: Sequence[float]) -> str:
    lo, hi = min(values), max(values)
    return f"x{lo:.3f}" if math.isclose(lo, hi, abs_tol=5e-4) else f"x{lo:.3f}-{hi:.3f}"


def _where(stands: Sequence[Standing], n_all: int) -> str:
    """"at concurrency 1, 10" for a subset of a sweep; "" for a single scenario."""
    if n_all == 1 or stands[0].concurrency is None:
        return ""
    return f" at concurrency {_levels(stands)}"


def _speculation(stands: Sequence[Standing]) -> str:
    known = [s for s in stands if s.speculation_gain is not None]
    if not known:
        return ""
    n = len(stands)
    metric = known[0].metric
    wins = [s for s in known if (s.speculation_gain or 0.0) > 1 + TIE]
    rest = [s for s in known if s not in wins]

    def part(group: Sequence[Standing]) -> str:
        depths = sorted({s.best_depth or "" for s in group})
        return f"{'/'.join(depths)} {_span([s.speculation_gain or 0.0 for s in group])} of never"

    head = f"speculation ({metric}, best depth): "
    outside = [s for s in stands if s.extrapolated]
    tail = ""
    if outside:
        where = f"at {_levels(outside)} " if n > 1 and outside[0].concurrency is not None else ""
        tail = f" [{where}OUTSIDE the profile's measured range: extrapolated]"
    if not wins:
        every = " at any level" if n > 1 else ""
        return head + f"pays nowhere{every} ({part(rest)})" + tail
    if not rest:
        return head + f"pays{' at every level' if n > 1 else ''} ({part(wins)})" + tail
    return head + f"pays{_where(wins, n)} ({part(wins)}); not at {_levels(rest)} ({part(rest)})" + tail


def _policies(stands: Sequence[Standing]) -> list[str]:
    names: list[str] = []
    for s in stands:
        names.extend(n for n in s.score if not is_fixed(n) and n not in names)
    return names


def _nearest(stands: Sequence[Standing]) -> str | None:
    """The policy with the highest worst score over the scenarios (the first of equals)."""
    best: tuple[float, str] | None = None
    for name in _policies(stands):
        scores = [s.score.get(name) for s in stands]
        if any(x is None for x in scores):
            continue
        worst = min(x for x in scores if x is not None)
        if best is None or worst > best[0]:
            best = (worst, name)
    return best[1] if best else None


def _ms_span(values: Sequence[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.0f}" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}"


def _policy_line(stands: Sequence[Standing], name: str) -> str:
    worst = min(stands, key=lambda s: s.score[name])
    never = [s.vs_never[name] for s in stands if name in s.vs_never]
    fixed = [
        s.score[name] / s.score[s.best_fixed]
        for s in stands
        if s.best_fixed is not None and s.score.get(s.best_fixed)
    ]
    parts = []
    if never:
        parts.append(f"{_span(never)} of never")
    if fixed:
        parts.append(f"{_span(fixed)} of the best fixed choice")  # never or a static-k
    ttft = [(s.ttft_ms.get(name), s.ttft_ms.get("never")) for s in stands if s.metric == "TPOT p50"]
    known = [(a, b) for a, b in ttft if a is not None and b is not None and math.isfinite(a + b)]
    if known:
        mine, base = (_ms_span([pair[i] for pair in known]) for i in (0, 1))
        parts.append(f"TTFT p50 {mine} ms, never's {base} ms")
    vs = f" ({', '.join(parts)})" if parts else ""
    if all(name in s.best for s in stands):
        where = " at every level" if len(stands) > 1 else ""
        return f"policies: best {name}, tied for best{where}{vs}"
    lead = worst.best[0] if worst.best else "?"
    at = f" at {worst.concurrency}" if worst.concurrency is not None else ""
    return f"policies: none best everywhere; nearest {name}{vs}, worst x{worst.score[name]:.3f} of {lead}{at}"


def _picks(s: Standing, nearest: str | None) -> tuple[str, ...]:
    """What to run in one scenario: of the rows tied for best, never (the simplest) and the nearest policy;
    else the first tied row."""
    picks = tuple(n for n in s.best if n in ("never", nearest))
    return picks or s.best[:1]


def _deploy(stands: Sequence[Standing], nearest: str | None) -> str:
    groups: list[tuple[tuple[tuple[str, ...], bool], list[Standing]]] = []
    for s in stands:
        key = (_picks(s, nearest), s.extrapolated)
        if groups and groups[-1][0] == key:
            groups[-1][1].append(s)
        else:
            groups.append((key, [s]))
    parts = []
    for (picks, outside), group in groups:
        text = " or ".join(picks) + (" (tie)" if len(picks) > 1 else "")
        if nearest is not None and nearest not in picks:
            scores = [s.score[nearest] for s in group if nearest in s.score]
            if scores:
                text += f" ({nearest} {_span(scores)} of it)"
        if outside:
            text += " [OUTSIDE the profile's measured range]"
        if len(groups) > 1:
            text = f"at {_levels(group)}: {text}"
        elif len(stands) > 1:
            text += " at every level"
        parts.append(text)
    return "deploy: " + "; ".join(parts)


#: Where a long verdict line breaks, best first: after a clause, after a list item, at a space.
_BREAKS = ("; ", ", ", " ")


def wrap(line: str, width: int) -> list[str]:
    """``line`` in lines of at most ``width`` columns (continuations indented by two spaces), broken at word
    boundaries: after the last clause (``;``) that fits in the second half of the line, else after the last
    list item (``,``) there, else at the last space. A word longer than the line stays whole."""
    out: list[str] = []
    rest = line
    while len(rest) > width:
        head = 2 if out else 0  # a continuation's indent is no place to break
        cut = -1
        for sep in _BREAKS:
            i = rest.rfind(sep, head, width + 1 - len(sep.rstrip()))
            if i > head and (i >= width // 2 or sep == " "):
                cut = i + len(sep.rstrip())
                break
        if cut < 0:  # one word longer than the line
            cut = rest.find(" ", head + 1)
            if cut < 0:
                break
        out.append(rest[:cut])
        rest = "  " + rest[cut:].lstrip()
    out.append(rest)
    return out


def unwrap(lines: Sequence[str]) -> list[str]:
    """The verdict's statements from its printed lines (a continuation starts with two spaces)."""
    out: list[str] = []
    for line in lines:
        if line.startswith("  ") and out:
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return out


def verdict_lines(rows: Sequence[_Row], width: int | None = None) -> list[str]:
    """The verdict: speculation, the policies, what to deploy (empty when the rows cannot say). ``width``:
    each statement is wrapped to it (``wrap``); None keeps one line per statement."""
    stands = [s for s in standings(rows) if s.score]
    if not stands:
        return []
    out = [line for line in (_speculation(stands),) if line]
    nearest = _nearest(stands)
    if nearest is not None:
        out.append(_policy_line(stands, nearest))
    out.append(_deploy(stands, nearest))
    if width is None:
        return out
    return [part for line in out for part in wrap(line, width)]


def verdict(rows: Sequence[_Row]) -> str:
    """The verdict lines joined by newlines ("" when there is nothing to say)."""
    lines = verdict_lines(rows)
    return "\n".join(lines) if len(lines) > 1 else ""
