"""The ``specpolicy`` command: argument parsing only; the work lives in the modules each command names."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from typing import NoReturn

from . import __version__
from .errors import ConfigError, MissingExtraError

# Each feature package contributes its subcommands through ``register(subparsers)``; the function it sets as
# ``func`` does the work. One line per package: keep this list sorted by command.
_COMMAND_MODULES: tuple[str, ...] = (
    "specpolicy.commands",
    "specpolicy.runtime.commands_control",
    "specpolicy.adapters.commands_doctor",
    "specpolicy.sim.commands_profile",
    "specpolicy.sim.commands_sim",
    "specpolicy.adapters.vllm.commands_vllm",
)


class _Parser(argparse.ArgumentParser):
    """A bad argument is one line naming it and where the help is, not the whole usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="specpolicy",
        description=(
            "Per-step speculative-decoding policies for SGLang and vLLM: list and validate policies, "
            "simulate and tune them against measured step costs, and check an engine installation."
        ),
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages to stderr")
    parser.add_argument("--version", action="version", version=f"specpolicy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod_name in _COMMAND_MODULES:
        importlib.import_module(mod_name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    import logging

    # specpolicy's own INFO lines are part of its output; other libraries' (matplotlib's font cache, ...)
    # are not, unless asked for with --verbose.
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("specpolicy").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"specpolicy: invalid configuration:\n{exc}", file=sys.stderr)
        return 1
    except MissingExtraError as exc:
        print(f"specpolicy: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0


def print_json(obj: object) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False))


if __name__ == "__main__":
    sys.exit(main())
