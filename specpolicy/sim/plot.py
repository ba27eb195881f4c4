"""``--plot``: throughput against concurrency for a sweep; depth and throughput over time otherwise.

matplotlib comes with the optional ``plot`` extra; ``require_matplotlib`` fails early, before any simulation
runs, saying how to install it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import MissingExtraError
from .report import rows
from .run import Simulation

__all__ = ["require_matplotlib", "plot"]

#: Policies drawn over time (the rest would crowd the figure): references plus every non-static policy.
_SKIP_OVER_TIME = ("static-",)


def require_matplotlib() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtraError(
            "--plot needs matplotlib, which comes with the 'plot' extra: pip install '.[plot]' in a "
            "specpolicy checkout (or pip install matplotlib)"
        ) from None
    return plt


def plot(sim: Simulation, path: str | Path) -> Path:
    """Write the figure for ``sim`` to ``path`` (format from the suffix, e.g. .png, .svg)."""
    plt = require_matplotlib()
    out = Path(path)
    sweep = any(o.scenario.concurrency is not None for o in sim.outcomes)
    if sweep:
        fig, ax = plt.subplots(figsize=(9, 5.5))
        by_policy: dict[str, list[tuple[int, float]]] = {}
        for r in rows(sim):
            if r.concurrency is not None:
                by_policy.setdefault(r.policy, []).append((r.concurrency, r.output_tok_s))
        colors = plt.get_cmap("tab20").colors
        for i, (label, pts) in enumerate(by_policy.items()):
            pts.sort()
            style = "--" if label.startswith("static-") or label == "never" else "-"
            ax.plot(
                [c for c, _ in pts],
                [v for _, v in pts],
                style,
                marker="o",
                ms=3,
                label=label,
                color=colors[i % len(colors)],
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel("output tokens/s")
        ax.set_title(f"{sim.workload} on {sim.profile.name}")
        ax.legend(fontsize=7, ncol=2)
        ax.grid(True, alpha=0.3)
    else:
        fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
        colors = plt.get_cmap("tab10").colors
        drawn = 0
        for o in sim.outcomes:
            tl = o.result.timeline
            label = o.comparator.label
            if tl is None or label.startswith(_SKIP_OVER_TIME):
                continue
            # Whole bins inside the simulated duration only (the last step may end past it).
            n = min(len(tl.tok_s), max(1, int(o.scenario.duration_s / tl.bin_s)))
            t = [(i + 0.5) * tl.bin_s for i in range(n)]
            color = colors[drawn % len(colors)]
            drawn += 1
            ax1.plot(t, tl.tok_s[:n], lw=1, label=label, color=color)
            ax2.plot(t, tl.mean_depth[:n], lw=1, label=label, color=color)
            if label == "oracle":
                ax3.plot(t, tl.mean_batch[:n], color="k", lw=1, label="batch size")
        ax1.set_ylabel("output tokens/s")
        ax2.set_ylabel("mean draft depth")
        ax3.set_ylabel("running batch")
        ax3.set_xlabel("simulated time (s)")
        ax1.set_title(f"{sim.workload} on {sim.profile.name}")
        ax1.legend(fontsize=7, ncol=3)
        for ax in (ax1, ax2, ax3):
            ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
