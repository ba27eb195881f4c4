"""The docs describe the present: no dated jargon, no commit hashes, no issue numbers, no broken links.

History belongs in CHANGELOG.md and results/<run>/notes.md. Under docs/ and in README.md there is no
"sitting" (any case), no commit hash (a 7-40 digit hex word with both digits and letters) and no issue
number of this project ("issue 33", "#33"; an upstream reference such as "vLLM #49548" or "SGLang PR
#123" names its project just before). Every relative link resolves to a file (and a heading, for an
anchor into a Markdown page), and every results/ run a page names exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
IDS = [str(p.relative_to(ROOT)) for p in PAGES]

SITTING = re.compile(r"sitting", re.I)
HEX = re.compile(r"(?<![\w/.-])([0-9a-f]{7,40})(?![\w/-])")
ISSUE = re.compile(r"\bissues? #?\d+|(?<![\w&])#\d+\b", re.I)
UPSTREAM = re.compile(r"(vllm|sglang|tensorrt|pytorch|flashinfer|upstream|\bPR\b|pull)", re.I)
LINK = re.compile(r"\]\(([^)\s]+)\)")
RUN = re.compile(
    r"(?<![\w-])(\d{4}-\d\d-\d\d-(?:sglang|vllm|cpu)-[A-Za-z0-9._-]+?)(?=[/)`'\s,;:]|\.(?:\s|$)|$)"
)


def _prose(text: str) -> str:
    """The page without its fenced code blocks' contents: a command may carry a hash-like word."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _is_hash(word: str) -> bool:
    return any(c.isdigit() for c in word) and any(c.isalpha() for c in word)


def violations(text: str) -> list[str]:
    """Every forbidden word of one page, as ``line N: word``."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        out += [f"line {n}: {m.group(0)!r}" for m in SITTING.finditer(line)]
        out += [f"line {n}: hash {m.group(1)!r}" for m in HEX.finditer(line) if _is_hash(m.group(1))]
        for m in ISSUE.finditer(line):
            if not UPSTREAM.search(line[max(0, m.start() - 40) : m.start()]):
                out.append(f"line {n}: issue number {m.group(0)!r}")
    return out


def test_a_run_name_is_found_in_prose_and_links() -> None:
    text = (
        "see `2026-12-01-sglang-0.5.12.post1-run3`'s notes and "
        "[x](../../results/2026-12-06-vllm-0.26.0-v1-runner/notes.md)."
    )
    assert RUN.findall(text) == ["2026-12-01-sglang-0.5.12.post1-run3", "2026-12-06-vllm-0.26.0-v1-runner"]


def test_the_rules_catch_what_they_should() -> None:
    bad = "the ninth Sitting at 3b7256f fixed issue 33 (see #12)"
    assert len(violations(bad)) == 4, violations(bad)
    good = "vLLM #49548 reports it; SGLang PR #123; 1764470000 s; added 0.96x; `abcdef0` in code"
    assert violations(good.replace("`abcdef0` in code", "")) == []


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_a_page_has_no_history_words(page: Path) -> None:
    text = page.read_text()
    found = violations(text)
    found += [f"code: hash {m.group(1)!r}" for m in HEX.finditer(text) if _is_hash(m.group(1))]
    where = "CHANGELOG.md or results/<run>/notes.md"
    assert not found, f"{page.relative_to(ROOT)}: move history to {where}: {found}"


def _anchors(page: Path) -> set[str]:
    out = set()
    for line in _prose(page.read_text()).splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_a_pages_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"^[a-z]+:", target):
            continue
        base, _, anchor = target.partition("#")
        path = (page.parent / base).resolve() if base else page
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: links to nothing: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_a_named_run_exists(page: Path) -> None:
    missing = sorted({r for r in RUN.findall(page.read_text()) if not (ROOT / "results" / r).is_dir()})
    assert not missing, f"{page.relative_to(ROOT)}: names results/ runs that do not exist: {missing}"
