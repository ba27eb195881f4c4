"""Core subcommands: ``policies`` (list what is registered) and ``check-config`` (validate and normalise)."""

from __future__ import annotations

import argparse
import json
import typing
from typing import Any

from pydantic.fields import FieldInfo

from .errors import short_str
from .policy import PolicyConfig
from .registry import available_policies, broken_plugins, get_entry, parse_config


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
    """Every registered policy; a plugin that breaks the listing (or could not be registered) is listed as
    broken with its reason, and the others are still listed: exit status 0."""
    names = available_policies()
    broken = broken_plugins()
    if args.json:
        schemas: dict[str, Any] = {}
        for n in names:
            try:
                schemas[n] = get_entry(n).config.model_json_schema()
            except Exception as exc:  # noqa: BLE001 - a plugin's model: reported, the rest still listed
                broken[n] = f"{type(exc).__name__}: {short_str(exc)}"
        if broken:
            schemas["broken_plugins"] = broken
        print(json.dumps(schemas, indent=2))
        return 0
    for n in names:
        try:
            text = _describe(n)
        except Exception as exc:  # noqa: BLE001
            broken[n] = f"{type(exc).__name__}: {short_str(exc)}"
            continue
        print(text)
    if broken:
        print("broken plugins (not usable):")
        for n, why in broken.items():
            print(f"    {n}: {why}")
    return 0


def _describe(n: str) -> str:
    """The listing of one policy: its summary line and a line per parameter, then an empty line."""
    entry = get_entry(n)
    alias = f" (alias: {', '.join(entry.aliases)})" if entry.aliases else ""
    lines = [f"{n}{alias}: {entry.config.summary()}"]
    for fname, info in entry.config.model_fields.items():
        if fname == "name":
            continue
        default = info.get_default(call_default_factory=True)
        if isinstance(default, PolicyConfig):  # a composition's part: its fields are listed under it
            default = default.model_dump(mode="json", exclude_defaults=True) | {"name": default.name}
        rng = _constraint_text(info)
        desc = info.description or ""
        kind = "policy config" if info.annotation is PolicyConfig else _type_text(info.annotation)
        lines.append(
            f"    {fname}: {kind} = {json.dumps(default, default=str)}"
            + (f"  [{rng}]" if rng else "")
            + (f"  {desc}" if desc else "")
        )
    return "\n".join(lines) + "\n"


def cmd_check_config(args: argparse.Namespace) -> int:
    cfg = parse_config(args.config)
    out = cfg.model_dump(mode="json")
    out["candidate_steps"] = list(cfg.candidate_steps())
    print(json.dumps(out, indent=2))
    return 0
