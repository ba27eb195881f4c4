"""The test command's last lines, from the JUnit XML reports of its pytest runs (one per directory given).

Skips are split in two: those a pinned engine release makes expected (a test meaningful only on another
release: "needs sglang 0.5.12.post1, found 0.5.23", "legacy paths need ..."), and the rest, with their
reasons, which deserve a look. The last line, ``total: N passed, N failed, N skipped``, counts every skip;
CI parses it.
Usage: python scripts/test_summary.py REPORTS_DIR
"""

from __future__ import annotations

import glob
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter

#: A skip that a release makes expected: the test names the engine releases it applies to.
PER_RELEASE = re.compile(r"\bneeds? (sglang|vllm) \S|legacy paths need (sglang|vllm)\b")


def summarise(report_dir: str) -> list[str]:
    tot = Counter[str]()
    expected = Counter[str]()
    other = Counter[str]()
    for f in sorted(glob.glob(report_dir + "/*.xml")):
        for suite in ET.parse(f).getroot().iter("testsuite"):
            for k in ("tests", "failures", "errors", "skipped"):
                tot[k] += int(suite.get(k, 0))
            for case in suite.iter("testcase"):
                skip = case.find("skipped")
                if skip is None:
                    continue
                reason = (skip.get("message") or "").removeprefix("Skipped: ").strip() or "(no reason given)"
                (expected if PER_RELEASE.search(reason) else other)[reason] += 1
    failed = tot["failures"] + tot["errors"]
    passed = tot["tests"] - failed - tot["skipped"]
    n_expected = sum(expected.values())
    lines = [f"skipped, expected on the pinned releases (a test for another release): {n_expected}"]
    lines.append(f"skipped, other: {sum(other.values())}")
    lines += [f"  {n} x {reason}" for reason, n in other.most_common()]
    lines.append(f"total: {passed} passed, {failed} failed, {tot['skipped']} skipped")
    return lines


if __name__ == "__main__":
    print("\n".join(summarise(sys.argv[1])))
