"""The ``control`` subcommand: change the policy of a running engine through its control file
(``specpolicy.runtime.control_file``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..errors import ConfigError
from ..registry import parse_config
from .settings import ENV_VARS

_ENV = ENV_VARS["control_path"]


def register(sub: Any) -> None:
    c = sub.add_parser(
        "control",
        help="change the policy of a running engine (its control file)",
        description="Write or show the control file a running engine checks every control_every steps "
        f"(settings control_path, {_ENV}). The policy is validated before it is written; the file is "
        "replaced atomically, and the engine validates it again before it swaps the policy in.",
    )
    csub = c.add_subparsers(dest="control_command", metavar="ACTION", required=True)
    s = csub.add_parser(
        "set",
        help="validate a policy and write it to the control file",
        description="Validate a policy (name, JSON object, or .json/.yaml/.toml file) and write it, "
        "normalised, to the control file (a temporary file renamed over it). Exit status 1 with the "
        "offending field named on error; the file is then left as it was.",
    )
    s.add_argument("policy", help="policy name, JSON object, or path to a .json/.yaml/.toml file")
    _file_arg(s)
    s.set_defaults(func=cmd_set)
    w = csub.add_parser(
        "show",
        help="print the control file's policy, validated",
        description="Print the control file's policy as JSON. Exit status 1 when the file is missing or "
        "invalid (the reason is printed; a running engine refuses it for the same reason).",
    )
    _file_arg(w)
    w.set_defaults(func=cmd_show)


def _file_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--file",
        metavar="FILE",
        default=None,
        help=f"the control file (default: ${_ENV})",
    )


def _path(args: argparse.Namespace) -> str:
    path: str | None = args.file or os.environ.get(_ENV, "").strip() or None
    if path is None:
        raise ConfigError(f"control file: none given (--file FILE or {_ENV})")
    return path


def cmd_set(args: argparse.Namespace) -> int:
    from .control_file import write_control

    path = _path(args)
    config = parse_config(args.policy)
    try:
        doc = write_control(path, config)
    except OSError as exc:
        print(f"specpolicy: cannot write the control file {path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(json.dumps(doc["policy"], indent=2))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from .control_file import read_control

    config = read_control(_path(args))
    out = config.model_dump(mode="json")
    out["candidate_steps"] = list(config.candidate_steps())
    print(json.dumps(out, indent=2))
    return 0
