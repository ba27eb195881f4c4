"""``specpolicy-livecheck``: one command for the live check, each subcommand run by the module that owns it.

The top level reads the subcommand only; everything after it goes to that module's own parser, so
``specpolicy-livecheck <subcommand> --help`` shows that subcommand's full options.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specpolicy_livecheck._proc import child_env
from specpolicy_livecheck.paths import SCRIPTS

PROG = "specpolicy-livecheck"


@dataclass(frozen=True)
class Command:
    """One subcommand: the module whose ``main(argv, prog)`` runs it, the arguments put before the user's
    (a subcommand of that module's own parser), and the line ``--help`` lists."""

    module: str
    help: str
    lead: tuple[str, ...] = ()

    def run(self, name: str, argv: Sequence[str]) -> int:
        main: Callable[..., int] = importlib.import_module(f"specpolicy_livecheck.{self.module}").main
        if self.lead:
            return main([*self.lead, *argv], prog=PROG)
        return main(list(argv), prog=f"{PROG} {name}")


@dataclass(frozen=True)
class Script:
    """One shell script of the package (``sh/``), run with bash and the user's arguments."""

    file: str
    help: str

    def run(self, name: str, argv: Sequence[str]) -> int:
        if argv[:1] in (["-h"], ["--help"]):
            print(_script_usage(self.file))
            return 0
        return subprocess.call(["bash", str(SCRIPTS / self.file), *argv], env=child_env())


COMMANDS: dict[str, Command] = {
    "plan": Command(
        "sglang_check", "print the SGLang live check's plan and its estimate (any machine)", ("plan",)
    ),
    "run": Command(
        "sglang_check", "the SGLang live check on the GPU machine: models, engines, results", ("run",)
    ),
    "build-models": Command(
        "sglang_check", "write the bigram target, draft and EAGLE-3 test checkpoints", ("build-models",)
    ),
    "analyze": Command(
        "sglang_check", "check and summarise a live check's results (any machine)", ("analyze",)
    ),
    "paired": Command("ab_static", "one engine per variant, served side by side or in turn (ab_static)"),
    "report": Command("paired_report", "the report's tables from a paired run's JSON (any machine)"),
    "compare-sim": Command("compare_sim", "the simulator's ratios beside a live report's (any machine)"),
    "vllm": Command("vllm_check", "the vLLM live check on the GPU machine (also: vllm doctor, vllm report)"),
    "vllm-probe": Command(
        "vllm_probe", "install the offline vLLM bundle and probe its imports on the GPU host"
    ),
}

BUNDLE: dict[str, Command | Script] = {
    "sglang": Command("sglang_bundle", "a release's SGLang bundle rows (pins, kernel, keep, drops, ...)"),
    "vllm": Command("vllm_bundle", "the vLLM bundle's rows, and `install` of its parts on the host"),
    "plan": Command("bundle_plan", "an engine's requirements sorted against the GPU image's packages"),
    "imports": Command("vllm_imports", "the third-party modules vLLM's offline path imports"),
    "make-sglang": Script("make_bundle.sh", "build an offline SGLang bundle (where pip can download)"),
    "make-vllm": Script("make_vllm_bundle.sh", "build the offline vLLM bundle (where pip can download)"),
    "run-live": Script("run_live.sh", "on the GPU host: install the SGLang bundle and wheels, then `run`"),
    "paired-live": Script(
        "paired_live.sh", "on the GPU host: the bundle's parts call by call, then one `paired --paired` run"
    ),
}


def _script_usage(file: str) -> str:
    """The leading comment block of a shell script (its usage), without the ``#`` marks."""
    lines = (SCRIPTS / file).read_text().splitlines()[1:]
    out = []
    for ln in lines:
        if not ln.startswith("#"):
            break
        out.append(ln[2:] if ln.startswith("# ") else ln[1:])
    return "\n".join(out)


def _overview(table: dict[str, Command] | dict[str, Command | Script], usage: str) -> str:
    width = max(len(k) for k in table)
    rows = "\n".join(f"  {k:<{width}}  {c.help}" for k, c in table.items())
    return f"usage: {usage}\n\n{rows}\n"


def usage() -> str:
    """The top-level help: every subcommand and the bundle tools."""
    head = __doc__.split("\n\n")[0] if __doc__ else ""
    text = _overview(COMMANDS | {"bundle": Command("", "offline engine bundles: see `bundle --help`")},
                     f"{PROG} <subcommand> [options]")  # fmt: skip
    return f"{head}\n\n{text}\n{PROG} <subcommand> --help shows that subcommand's options.\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name == "bundle":
        if not rest or rest[0] in ("-h", "--help"):
            print(_overview(BUNDLE, f"{PROG} bundle <tool> [options]"))
            return 0 if rest else 2
        tool = BUNDLE.get(rest[0])
        if tool is None:
            print(f"{PROG} bundle: unknown tool {rest[0]!r}; one of {', '.join(BUNDLE)}", file=sys.stderr)
            return 2
        return tool.run(f"bundle {rest[0]}", rest[1:])
    command = COMMANDS.get(name)
    if command is None:
        print(
            f"{PROG}: unknown subcommand {name!r}; one of {', '.join([*COMMANDS, 'bundle'])}", file=sys.stderr
        )
        return 2
    return command.run(name, rest)
