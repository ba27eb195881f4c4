"""Who won: the best fixed choice and the best policy of each scenario, and the report's one-line verdict.

Fixed choices are ``never`` (a speculation-free engine) and ``static-0`` .. ``static-K``; policies are every
other row except the oracles, ``oracle`` and ``lookahead`` (registered policies and the engines' own rules).
"Speculation pays" at a level when the best ``static-k`` with k > 0 beats ``never`` there. The best policy
overall has the highest geometric mean, over the levels, of its throughput over the best fixed depth, so no
single level dominates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Standing", "standings", "verdict"]


class _Row(Protocol):
    @property
    def policy(self) -> str: ...

    @property
    def concurrency(self) -> int | None: ...

    @property
    def output_tok_s(self) -> float: ...

    @property
    def vs_best_static(self) -> float | None: ...


@dataclass(frozen=True)
class Standing:
    """One scenario's winners by output tokens/s (empty or ``None`` where the report has no such row)."""

    concurrency: int | None
    #: every row within ``TIE`` of the best (policies that decide alike tie exactly)
    best_fixed: tuple[str, ...]
    best_policy: tuple[str, ...]
    #: output tok/s of the best ``static-k`` (k > 0) over ``never``'s: > 1 when speculation pays
    speculation_gain: float | None
    best_depth: str | None


#: Rows with perfect knowledge: references, never the best policy.
ORACLES = ("oracle", "lookahead")


def _is_fixed(label: str) -> bool:
    return label == "never" or label.startswith("static-")


def _best(rows: Sequence[_Row]) -> _Row | None:
    return max(rows, key=lambda r: r.output_tok_s, default=None)


#: Rows this close (relative) to the best count as tied for best.
TIE = 1e-4


def _ties(rows: Sequence[_Row]) -> tuple[str, ...]:
    best = _best(rows)
    if best is None:
        return ()
    return tuple(r.policy for r in rows if r.output_tok_s >= best.output_tok_s * (1 - TIE))


def standings(rows: Sequence[_Row]) -> list[Standing]:
    """One Standing per scenario, in report order."""
    groups: dict[int | None, list[_Row]] = {}
    for r in rows:
        groups.setdefault(r.concurrency, []).append(r)
    out = []
    for level, group in groups.items():
        fixed = _ties([r for r in group if _is_fixed(r.policy)])
        policy = _ties([r for r in group if not _is_fixed(r.policy) and r.policy not in ORACLES])
        never = next((r for r in group if r.policy == "never"), None)
        depth = _best([r for r in group if r.policy.startswith("static-") and r.policy != "static-0"])
        gain = None
        if never is not None and depth is not None and never.output_tok_s > 0:
            gain = depth.output_tok_s / never.output_tok_s
        out.append(Standing(level, fixed, policy, gain, depth.policy if depth else None))
    return out


def _levels(values: Sequence[int | None]) -> str:
    return ", ".join(str(v) for v in values)


def _speculation(stands: Sequence[Standing]) -> str:
    known = [s for s in stands if s.speculation_gain is not None]
    if not known:
        return ""
    gains = [s.speculation_gain or 0.0 for s in known]
    if all(g > 1 for g in gains) or all(g <= 1 for g in gains):
        verb = "pays" if gains[0] > 1 else "does not pay"
        where = " at every level" if len(known) > 1 else ""
        return f"speculation {verb}{where} (best depth {_span(known)} over no speculation)"
    wins = [s for s in known if (s.speculation_gain or 0.0) > 1]
    losses = [s for s in known if (s.speculation_gain or 0.0) <= 1]
    return (
        f"speculation pays at concurrency {_levels([s.concurrency for s in wins])} (best depth "
        f"{_span(wins)} over no speculation) and loses at {_levels([s.concurrency for s in losses])} "
        f"(best depth only {_span(losses)})"
    )


def _span(stands: Sequence[Standing]) -> str:
    gains = [s.speculation_gain or 0.0 for s in stands]
    lo, hi = min(gains), max(gains)
    return f"x{lo:.2f}" if math.isclose(lo, hi, abs_tol=5e-3) else f"x{lo:.2f}-{hi:.2f}"


def _best_policy(rows: Sequence[_Row]) -> str:
    ratios: dict[str, list[tuple[float, int | None]]] = {}
    for r in rows:
        if not _is_fixed(r.policy) and r.policy not in ORACLES and r.vs_best_static:
            ratios.setdefault(r.policy, []).append((r.vs_best_static, r.concurrency))
    if not ratios:
        return ""

    def geomean(items: list[tuple[float, int | None]]) -> float:
        return math.exp(sum(math.log(x) for x, _ in items) / len(items))

    name, items = max(ratios.items(), key=lambda kv: geomean(kv[1]))
    text = f"best policy: {name}, x{geomean(items):.3f} of the best fixed depth"
    if len(items) > 1:
        worst, level = min(items)
        text += f" on average (worst x{worst:.3f}, at concurrency {level})"
    return text


def verdict(rows: Sequence[_Row]) -> str:
    """The report's last line: where speculation pays, which policy comes closest to the best fixed depth."""
    parts = [p for p in (_speculation(standings(rows)), _best_policy(rows)) if p]
    return "verdict: " + "; ".join(parts) if parts else ""
