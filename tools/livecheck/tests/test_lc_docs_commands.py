"""The documented ``specpolicy-livecheck`` commands are ones the tool takes: every subcommand the docs name
exists, every option they pass is in that subcommand's ``--help``, and every paired variant they list is one
``paired`` accepts (the variants the tool no longer has are named nowhere in the present-tense docs).

The pages are the README, docs/ and the tool's README; results/<run>/notes.md keep the commands as they
were run. A command continued over lines (``\\`` at the end) is read as one line.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from lc_env import REPO
from specpolicy_livecheck import ab_static, cli

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), REPO / "tools/livecheck/README.md"]
#: the console command, or ``python3 -m specpolicy_livecheck``, then the subcommand
MARK = re.compile(r"(?:specpolicy-livecheck|python3 -m specpolicy_livecheck)\s+([a-z][\w-]*)(.*)")
#: the install script run from a checkout (``bundle run-live`` where the tool is installed)
RUN_LIVE = re.compile(r"specpolicy_livecheck/sh/run_live\.sh\s(.*)")
#: the paired script run from a checkout (``bundle paired-live`` where the tool is installed)
PAIRED_LIVE = re.compile(r"specpolicy_livecheck/sh/paired_live\.sh\s(.*)")
#: where a command ends inside a line: a shell operator, a comment, the end of inline code or a table cell
END = re.compile(r"\s(?:&&|\|\|?|>|2>&1|;|#)\s|`|\s\|\s|$")
#: paired variants the tool once had; a page that names one documents a command that fails
REMOVED = (
    "on_verify", "on_host", "on_check", "off_check_v1", "off_check_info_v1", "off_check_v2",
    "off_eagle3_v1_w512", "off_eagle3_v2_w512", "mixed_check_v1", "mixed_check_v2", "mixed_timed_v1",
    "mixed_timed_v2",
)  # fmt: skip

Command = tuple[str, tuple[str, ...], list[str]]


def commands_in(text: str, where: str) -> list[Command]:
    """(where:line, subcommand path, its arguments) of every command in one page's text."""
    out = []
    for n, line in enumerate(text.replace("\\\n", " ").splitlines(), 1):
        found = [(m.group(1), m.group(2)) for m in MARK.finditer(line)]
        found += [("bundle", " run-live " + m.group(1)) for m in RUN_LIVE.finditer(line)]
        found += [("bundle", " paired-live " + m.group(1)) for m in PAIRED_LIVE.finditer(line)]
        for first, rest in found:
            end = END.search(rest)
            rest = rest[: end.start()] if end else rest
            try:
                args = shlex.split(rest)
            except ValueError:  # an unbalanced quote in prose: read the words as they are
                args = rest.split()
            sub: tuple[str, ...] = (first,)
            if first == "bundle" and args[:1] == ["paired-live"]:
                # LIMIT_S VARIANTS, then `paired` options: read as the `paired` command it runs ("-": none)
                variants = ["--variants", args[2]] if args[2:3] not in ([], ["-"]) else []
                sub, args = ("paired",), [*variants, *args[3:]]
            elif first == "bundle" and args and args[0] in cli.BUNDLE:
                sub, args = ("bundle", args[0]), args[1:]
            elif first == "vllm" and args[:1] in (["doctor"], ["report"]):
                sub, args = ("vllm", args[0]), args[1:]
            out.append((f"{where}:{n}", sub, args))
    return out


COMMANDS = [c for page in PAGES for c in commands_in(page.read_text(), str(page.relative_to(REPO)))]


def _help(sub: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> str:
    """The subcommand's ``--help`` (``bundle run-live`` passes its options on to ``run``)."""
    if sub == ("bundle", "run-live"):
        sub = ("run",)
    try:
        cli.main([*sub, "--help"])
    except SystemExit as exc:  # argparse exits after printing the help
        assert exc.code == 0, sub
    return capsys.readouterr().out


def wrong_options(commands: list[Command], capsys: pytest.CaptureFixture[str]) -> list[str]:
    """``where: subcommand --option`` for every option a command passes that its subcommand does not take."""
    helps: dict[tuple[str, ...], set[str]] = {}
    wrong = []
    for where, sub, args in commands:
        if sub[0] not in {*cli.COMMANDS, "bundle"}:
            continue
        if sub not in helps:
            helps[sub] = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", _help(sub, capsys)))
        flags = {a.split("=", 1)[0] for a in args if a.startswith("--")}
        wrong += [f"{where}: {' '.join(sub)} {f}" for f in sorted(flags - helps[sub])]
    return wrong


def wrong_variants(commands: list[Command]) -> list[str]:
    """``where: variant`` for every variant a ``paired`` command lists that ``paired`` does not accept."""
    wrong = []
    for where, sub, args in commands:
        if sub == ("paired",) and "--variants" in args[:-1]:
            given = args[args.index("--variants") + 1]
            if given.startswith("$"):  # a shell variable set on the line before
                continue
            wrong += [f"{where}: {v}" for v in given.split(",") if v not in ab_static.VARIANTS]
    return wrong


def test_the_docs_give_the_commands() -> None:
    subs = {c[1] for c in COMMANDS}
    assert {("plan",), ("run",), ("paired",), ("report",), ("vllm",), ("bundle", "run-live")} <= subs, subs


def test_every_documented_subcommand_exists() -> None:
    known = {*cli.COMMANDS, "bundle"}
    unknown = [(where, sub) for where, sub, _ in COMMANDS if sub[0] not in known]
    assert not unknown, f"subcommands the tool does not have: {unknown}"


def test_every_documented_option_is_in_the_subcommands_help(capsys: pytest.CaptureFixture[str]) -> None:
    wrong = wrong_options(COMMANDS, capsys)
    assert not wrong, "options the subcommand does not take:\n" + "\n".join(wrong)


def test_every_documented_paired_variant_exists() -> None:
    wrong = wrong_variants(COMMANDS)
    assert not wrong, "variants paired does not accept:\n" + "\n".join(wrong)


def test_the_checks_find_a_wrong_command(capsys: pytest.CaptureFixture[str]) -> None:
    """A dropped option, a removed variant, an option passed through the install script: each is found."""
    text = (
        "prose, then `specpolicy-livecheck run --work W --dry-run` and\n"
        "    specpolicy-livecheck paired --paired --work /tmp/gc --out O \\\n"
        "        --variants base_v1,off_eagle3_v1_w512 --trace-dir T --verify-window 512 > log 2>&1\n"
        "    GC_OUT=/o bash tools/livecheck/src/specpolicy_livecheck/sh/run_live.sh v2,base_v2 570"
        " --attn triton --no-such-option\n"
        "    PYTHONPATH=/tmp/vsite:tools/livecheck/src python3 -m specpolicy_livecheck vllm doctor"
        " --budget-s 9\n"
        "    GC_PARTS=p4 bash tools/livecheck/src/specpolicy_livecheck/sh/paired_live.sh 590"
        " never_ov,on_verify --min-s 2 --no-such-option\n"
    )
    cmds = commands_in(text, "page")
    assert [c[1] for c in cmds] == [
        ("run",), ("paired",), ("bundle", "run-live"), ("vllm", "doctor"), ("paired",)
    ]
    assert wrong_options(cmds, capsys) == [
        "page:2: paired --verify-window",
        "page:3: bundle run-live --no-such-option",
        "page:4: vllm doctor --budget-s",
        "page:5: paired --no-such-option",
    ]
    assert wrong_variants(cmds) == ["page:2: off_eagle3_v1_w512", "page:5: on_verify"]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_no_page_names_a_removed_variant(page: Path) -> None:
    assert not set(REMOVED) & set(ab_static.VARIANTS)  # the list names variants the tool no longer has
    found = [v for v in REMOVED if re.search(rf"(?<!\w){v}(?!\w)", page.read_text())]
    assert not found, f"{page.relative_to(REPO)} names removed paired variants: {found}"
