"""``--plot``: throughput and its ratio to the best fixed depth, against concurrency (sweep) or over time.

Every policy gets its own colour, line style and marker, so lines that overlap stay apart; the fixed choices
are drawn as references (``never`` black, best-fixed, the best ``static-k`` in hindsight, grey) rather than as
competitors. The ratio panel is the table's "x best fixed depth": per level for a sweep, and per time bin
against the static depth that is best over the whole run for a time-varying workload.

matplotlib comes with the optional ``plot`` extra; ``require_matplotlib`` fails early, before any simulation
runs, saying how to install it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import MissingExtraError
from .report import rows
from .run import RunOutcome, Simulation

__all__ = ["require_matplotlib", "plot", "figure"]

_NEVER = {"color": "black", "linestyle": "--", "marker": "", "lw": 1.6}
_BEST_FIXED = {"color": "0.55", "linestyle": "-", "marker": "", "lw": 2.5, "alpha": 0.8}


def require_matplotlib() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtraError(
            "--plot needs matplotlib (the 'plot' extra): pip install matplotlib; from a specpolicy "
            "checkout, pip install -e '.[plot]' (without -e, pip replaces the editable install)"
        ) from None
    return plt


def _styles(plt: Any) -> Iterator[dict[str, Any]]:
    """Colour, dash and marker vary at different periods: no two of the first 40 policies look alike."""
    colors = plt.get_cmap("tab10").colors
    dashes = ("-", "--", "-.", ":")
    markers = ("o", "s", "^", "D", "v", "P", "X")
    for i in range(10**6):
        yield {
            "color": colors[i % len(colors)],
            "linestyle": dashes[i % len(dashes)],
            "marker": markers[i % len(markers)],
            "lw": 1.4,
        }


def _is_fixed(label: str) -> bool:
    return label == "never" or label.startswith("static-")


def plot(sim: Simulation, path: str | Path) -> Path:
    """Write the figure for ``sim`` to ``path`` (format from the suffix, e.g. .png, .svg)."""
    plt = require_matplotlib()
    out = Path(path)
    fig = figure(sim)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out


def figure(sim: Simulation) -> Any:
    """The matplotlib figure ``plot`` writes (the caller closes it)."""
    plt = require_matplotlib()
    sweep = any(o.scenario.concurrency is not None for o in sim.outcomes)
    return _sweep(plt, sim) if sweep else _over_time(plt, sim)


def _sweep(plt: Any, sim: Simulation) -> Any:
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 8), sharex=True)
    tok: dict[str, dict[int, float]] = {}
    ratio: dict[str, dict[int, float]] = {}
    for r in rows(sim):
        if r.concurrency is not None:
            tok.setdefault(r.policy, {})[r.concurrency] = r.output_tok_s
            if r.vs_best_static is not None:
                ratio.setdefault(r.policy, {})[r.concurrency] = r.vs_best_static
    levels = sorted({c for pts in tok.values() for c in pts})
    best_fixed = [max(v[c] for k, v in tok.items() if k.startswith("static-") and c in v) for c in levels]
    ax1.plot(levels, best_fixed, label="best-fixed (the best static-k per level)", **_BEST_FIXED)
    ax2.axhline(1.0, label="best-fixed (the best static-k per level)", **_BEST_FIXED)
    styles = _styles(plt)
    for label, pts in tok.items():
        if label.startswith("static-"):
            continue
        style = _NEVER if label == "never" else next(styles)
        xs = sorted(pts)
        ax1.plot(xs, [pts[c] for c in xs], ms=4, label=label, **style)
        rs = ratio.get(label, {})
        ax2.plot(sorted(rs), [rs[c] for c in sorted(rs)], ms=4, label=label, **style)
    ax1.set_xscale("log", base=2)
    ax2.set_xticks(levels, [str(c) for c in levels])
    ax1.set_ylabel("output tokens/s")
    ax2.set_ylabel("x best fixed depth")
    ax2.set_xlabel("concurrency (requests in flight)")
    ax1.set_title(f"{sim.workload} on {sim.profile.name}")
    ax1.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
    return fig


def _bins(o: RunOutcome) -> list[float]:
    tl = o.result.timeline
    if tl is None:
        return []
    # Whole bins inside the simulated duration only (the last step may end past it).
    n = min(len(tl.tok_s), max(1, int(o.scenario.duration_s / tl.bin_s)))
    return [float(x) for x in tl.tok_s[:n]]


def _over_time(plt: Any, sim: Simulation) -> Any:
    fig, (ax1, ax2, ax3, ax4) = plt.subplots(4, 1, figsize=(9, 11), sharex=True)
    timed = [o for o in sim.outcomes if o.result.timeline is not None]
    statics = [o for o in timed if o.comparator.is_static]
    best = max(statics, key=lambda o: o.result.output_tok_s, default=None)
    ref = _bins(best) if best is not None else []
    bin_s = timed[0].result.timeline.bin_s if timed and timed[0].result.timeline else 1.0
    if best is not None:
        t = [(i + 0.5) * bin_s for i in range(len(ref))]
        ax1.plot(t, ref, label=f"best-fixed: {best.comparator.label} (best fixed depth)", **_BEST_FIXED)
        ax2.axhline(1.0, label=f"best-fixed: {best.comparator.label} (best fixed depth)", **_BEST_FIXED)
    styles = _styles(plt)
    for o in timed:
        label = o.comparator.label
        tl = o.result.timeline
        if tl is None or label.startswith("static-"):
            continue
        style = _NEVER if label == "never" else next(styles)
        tok = _bins(o)
        t = [(i + 0.5) * tl.bin_s for i in range(len(tok))]
        every = max(1, len(t) // 12)
        ax1.plot(t, tok, ms=4, markevery=every, label=label, **style)
        if ref:
            n = min(len(tok), len(ref))
            ax2.plot(
                t[:n],
                [a / b if b else float("nan") for a, b in zip(tok[:n], ref[:n], strict=True)],
                ms=4,
                markevery=every,
                label=label,
                **style,
            )
        if not _is_fixed(label):
            ax3.plot(t, tl.mean_depth[: len(t)], ms=4, markevery=every, label=label, **style)
        if label == "oracle":
            ax4.plot(t, tl.mean_batch[: len(t)], color="k", lw=1, label="batch size")
    ax1.set_ylabel("output tokens/s")
    ax2.set_ylabel("x best fixed depth")
    ax3.set_ylabel("mean draft depth")
    ax4.set_ylabel("running batch")
    ax4.set_xlabel("simulated time (s)")
    ax1.set_title(f"{sim.workload} on {sim.profile.name}")
    ax1.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    for ax in (ax1, ax2, ax3, ax4):
        ax.grid(True, alpha=0.3)
    return fig
