"""Write or check generated pages: one loop for every generator in scripts/ (reference_docs.py,
results_summary.py), so that `--write` and `--check` mean the same everywhere."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def parse_mode(description: str, root: Path, argv: Sequence[str] | None) -> argparse.Namespace:
    """``--write`` or ``--check`` (one is required) and ``--root``, the checkout the pages belong to."""
    ap = argparse.ArgumentParser(description=description)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the generated pages")
    mode.add_argument("--check", action="store_true", help="exit 1 when a page is out of date")
    ap.add_argument("--root", type=Path, default=root, help="the checkout (default: this one)")
    return ap.parse_args(argv)


def write_or_check(pages: Mapping[Path, str], root: Path, *, write: bool, command: str) -> int:
    """Write every page under ``root`` (``write``) or report the ones whose file differs; 1 when any
    does, naming ``command``, the one that brings them up to date."""
    stale = []
    for rel, text in pages.items():
        path = root / rel
        if write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        elif not path.is_file() or path.read_text() != text:
            stale.append(str(rel))
    if stale:
        print(f"out of date: {', '.join(stale)}; run {command}", file=sys.stderr)
        return 1
    return 0
