"""The test command's last lines, from the JUnit XML reports of its pytest runs, one report per group.

First one line per group (the report's name: core, harness, network, an engine env): its counts and time.
Then the skips, split in two: those a pinned engine release makes expected (a test meaningful only on another
release: "needs sglang 0.5.12.post1, found 0.5.23", "legacy paths need ..."), and the rest, with their
reasons, which deserve a look. The last line, ``total: N passed, N failed, N skipped``, counts every skip;
CI parses it.
Usage: python scripts/test_summary.py REPORTS_DIR
"""

from __future__ import annotations

import glob
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter

#: A skip that a release makes expected: the test names the engine releases it applies to.
PER_RELEASE = re.compile(r"\bneeds? (sglang|vllm) \S|legacy paths need (sglang|vllm)\b")


def _counts(c: Counter[str]) -> tuple[int, int, int]:
    """passed, failed (errors included), skipped"""
    failed = c["failures"] + c["errors"]
    return c["tests"] - failed - c["skipped"], failed, c["skipped"]


def summarise(report_dir: str) -> list[str]:
    tot = Counter[str]()
    expected = Counter[str]()
    other = Counter[str]()
    groups: list[str] = []
    for f in sorted(glob.glob(report_dir + "/*.xml")):
        mine = Counter[str]()
        seconds = 0.0
        for suite in ET.parse(f).getroot().iter("testsuite"):
            for k in ("tests", "failures", "errors", "skipped"):
                mine[k] += int(suite.get(k, 0))
            seconds += float(suite.get("time", 0) or 0)
            for case in suite.iter("testcase"):
                skip = case.find("skipped")
                if skip is None:
                    continue
                reason = (skip.get("message") or "").removeprefix("Skipped: ").strip() or "(no reason given)"
                (expected if PER_RELEASE.search(reason) else other)[reason] += 1
        tot.update(mine)
        p, x, s = _counts(mine)
        name = os.path.basename(f).removesuffix(".xml")
        groups.append(f"group {name}: {p} passed, {x} failed, {s} skipped in {seconds:.0f} s")
    passed, failed, _ = _counts(tot)
    n_expected = sum(expected.values())
    lines = groups + [f"skipped, expected on the pinned releases (a test for another release): {n_expected}"]
    lines.append(f"skipped, other: {sum(other.values())}")
    lines += [f"  {n} x {reason}" for reason, n in other.most_common()]
    lines.append(f"total: {passed} passed, {failed} failed, {tot['skipped']} skipped")
    return lines


if __name__ == "__main__":
    print("\n".join(summarise(sys.argv[1])))
