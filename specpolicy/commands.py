"""Core subcommands: ``policies`` (list what is registered) and ``check-config`` (validate and normalise)."""

from __future__ import annotations

import argparse
import json
import typing
from typing import Any

from pydantic.fields import FieldInfo

from .policy import PolicyConfig
from .registry import available_policies, get_entry, parse_config


def register(sub: Any) -> None:
    p = sub.add_parser(
        "policies",
        help="list registered policies with their parameters and defaults",
        description="List every registered policy (built-in and plugins) with its parameters, defaults and "
        "allowed ranges, generated from the config models.",
    )
    p.add_argument("--json", action="store_true", help="print the JSON schema of each policy config instead")
    p.set_defaults(func=cmd_policies)

    c = sub.add_parser(
        "check-config",
        help="validate a policy configuration and print it normalised",
        description="Validate a policy configuration (name, JSON string, or .json/.yaml/.toml file) "
        "and print the normalised configuration as JSON. Exit status 1 with the offending field named on "
        "error.",
    )
    c.add_argument("config", help="policy name, JSON object, or path to a .json/.yaml/.toml file")
    c.set_defaults(func=cmd_check_config)


def _constraint_text(info: FieldInfo) -> str:
    parts = []
    for meta in info.metadata:
        for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("min_length", "len>=")):
            v = getattr(meta, attr, None)
            if v is not None:
                parts.append(f"{sym}{v}")
    return " ".join(parts)


def _type_text(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if typing.get_origin(annotation) is None else None
    return text or str(annotation).replace("typing.", "")


def cmd_policies(args: argparse.Namespace) -> int:
    names = available_policies()
    if args.json:
        print(json.dumps({n: get_entry(n).config.model_json_schema() for n in names}, indent=2))
        return 0
    for n in names:
        entry = get_entry(n)
        alias = f" (alias: {', '.join(entry.aliases)})" if entry.aliases else ""
        print(f"{n}{alias}: {entry.config.summary()}")
        for fname, info in entry.config.model_fields.items():
            if fname == "name":
                continue
            default = info.get_default(call_default_factory=True)
            if isinstance(default, PolicyConfig):  # a composition's part: its fields are listed under it
                default = default.model_dump(mode="json", exclude_defaults=True) | {"name": default.name}
            rng = _constraint_text(info)
            desc = info.description or ""
            kind = "policy config" if info.annotation is PolicyConfig else _type_text(info.annotation)
            print(
                f"    {fname}: {kind} = {json.dumps(default, default=str)}"
                + (f"  [{rng}]" if rng else "")
                + (f"  {desc}" if desc else "")
            )
        print()
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    cfg = parse_config(args.config)
    out = cfg.model_dump(mode="json")
    out["candidate_steps"] = list(cfg.candidate_steps())
    print(json.dumps(out, indent=2))
    return 0
