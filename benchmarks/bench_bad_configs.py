"""Bad configurations: each must be refused with a short ConfigError that names the problem, at bounded cost.

Usage (from the repository root)::

    python benchmarks/bench_bad_configs.py            # prints one line per case and the clear / total tally

Every case is given to ``parse_config`` (policy specs: JSON text, files of each format) or to
``AdapterSettings.from_env`` (environment variables). "Clear" means: a ``ConfigError`` (no other exception,
no traceback), whose message contains the expected phrase (the field or the problem) and is at most
``MAX_MESSAGE`` characters long, whatever the input held. Nothing here is timed; a case that would take
gigabytes (nested YAML aliases) simply must not.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specpolicy import ConfigError, parse_config
from specpolicy.runtime.settings import AdapterSettings

#: Longest acceptable error message (all lines together).
MAX_MESSAGE = 600

_LAUGHS = (
    "a: &a [x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(9)
    )
    + "name: static\nnum_steps: *j\n"
)


@dataclass(frozen=True)
class Case:
    label: str
    expect: str  # a phrase the message must contain
    text: str = ""  # a JSON spec, or a file's content when suffix is set
    suffix: str = ""  # ".json" / ".yaml" / ".toml": written to a file first
    env: dict[str, str] | None = None  # given to AdapterSettings.from_env instead
    special: str = ""  # "dir" | "fifo" | "missing" | "big"


def _j(obj: Any) -> str:
    return json.dumps(obj)


CASES: tuple[Case, ...] = (
    Case("unknown policy", "unknown policy", _j({"name": "nope"})),
    Case("name not a string", "must be a policy name", _j({"name": 5})),
    Case("name missing", "missing policy name", _j({"num_steps": 3})),
    Case("unknown field", "unknown field", _j({"name": "static", "depth": 3})),
    Case(
        "bool as depth",
        "hysteresis.num_steps: must be an integer",
        _j({"name": "hysteresis", "num_steps": True}),
    ),
    Case(
        "bool as batch size",
        "threshold.max_batch_size: must be an integer",
        _j({"name": "threshold", "max_batch_size": True}),
    ),
    Case("string as depth", "static.num_steps: must be an integer", _j({"name": "static", "num_steps": "3"})),
    Case(
        "string in steps",
        "cost_model.steps.1: must be an integer",
        _j({"name": "cost_model", "steps": [1, "2"]}),
    ),
    Case("bool in table", "schedule.table.0.2", _j({"name": "schedule", "table": [[1, 8, True]]})),
    Case(
        "string as rate",
        "cost_model.probe_budget: must be a number",
        _j({"name": "cost_model", "probe_budget": "0.1"}),
    ),
    Case("depth out of range", "static.num_steps", _j({"name": "static", "num_steps": 99})),
    Case("huge int", "static.num_steps", _j({"name": "static", "num_steps": 10**400})),
    Case("huge string value", "static.num_steps", _j({"name": "static", "num_steps": "9" * 10**6})),
    Case(
        "huge list value", "cost_model.steps", _j({"name": "cost_model", "steps": list(range(10**5, 0, -1))})
    ),
    Case(
        "edges reversed", "hysteresis.enable_at", _j({"name": "hysteresis", "disable_at": 8, "enable_at": 9})
    ),
    Case("steps not ascending", "cost_model.steps", _j({"name": "cost_model", "steps": [3, 2]})),
    Case("table gap", "schedule.table", _j({"name": "schedule", "table": [[1, 4, 3], [6, 8, 0]]})),
    Case(
        "duplicate key JSON",
        "key 'num_steps' is given twice",
        '{"name": "static", "num_steps": 1, "num_steps": 2}',
    ),
    Case("invalid JSON", "not valid JSON", '{"name": "static",'),
    Case("JSON not an object", "must be an object", "[1, 2]"),
    Case("deep JSON", "nested more than", '{"name": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    Case("deep JSON under the recursion limit", "nested more than", '{"a": ' + "[" * 100 + "]" * 100 + "}"),
    Case("garbage profile file", "cost_model.profile", special="garbage-profile"),
    Case("profile is a directory", "cost_model.profile", special="profile-dir"),
    Case("unknown profile", "cost_model.profile", _j({"name": "cost_model", "profile": "no-such-profile"})),
    Case("YAML aliases", "aliases", _LAUGHS, ".yaml"),
    Case(
        "YAML duplicate key",
        "key 'num_steps' is given twice",
        "name: static\nnum_steps: 1\nnum_steps: 2\n",
        ".yaml",
    ),
    Case("YAML deep", "nested more than", "name: static\nx: " + "[" * 5000 + "]" * 5000 + "\n", ".yaml"),
    Case("YAML not a mapping", "top level must be a mapping", "- 1\n- 2\n", ".yaml"),
    Case("YAML syntax", "cannot parse", "name: [static\n", ".yaml"),
    Case("YAML python tag", "cannot parse", "name: !!python/object/apply:os.system ['true']\n", ".yaml"),
    Case("TOML duplicate key", "cannot parse", 'name = "static"\nnum_steps = 1\nnum_steps = 2\n', ".toml"),
    Case("TOML deep", "nested more than", "x = " + "[" * 5000 + "]" * 5000 + "\n", ".toml"),
    Case("JSON file bad value", "static.num_steps", _j({"name": "static", "num_steps": -1}), ".json"),
    Case("not UTF-8", "not UTF-8", "\udcff", ".json"),
    Case("directory", "is a directory", special="dir"),
    Case("pipe", "not a regular file", special="fifo"),
    Case("missing file", "not found", special="missing"),
    Case("file too big", "the limit is", special="big"),
    Case("unsupported extension", "unsupported extension", special="ini"),
    Case(
        "SPECPOLICY_POLICY deep",
        "nested more than",
        env={"SPECPOLICY_POLICY": '{"name": ' + "[" * 100_000 + "]" * 100_000 + "}"},
    ),
    Case(
        "SPECPOLICY_CONFIG duplicate",
        "given twice",
        env={"SPECPOLICY_CONFIG": '{"policy": "static", "metrics": true, "metrics": false}'},
    ),
    Case(
        "SPECPOLICY_CONFIG deep", "nested more than", env={"SPECPOLICY_CONFIG": "[" * 100_000 + "]" * 100_000}
    ),
    Case(
        "SPECPOLICY_POLICY bool",
        "policy.static.num_steps",
        env={"SPECPOLICY_POLICY": '{"name": "static", "num_steps": false}'},
    ),
)


def _materialise(case: Case, tmp: Path) -> Callable[[], Any]:
    if case.env is not None:
        env = case.env
        return lambda: AdapterSettings.from_env(env)
    if case.special == "garbage-profile":
        prof = tmp / "garbage.json"
        prof.write_bytes(b"\x00\xffnot a profile")
        return lambda: parse_config({"name": "cost_model", "profile": str(prof)})
    if case.special == "profile-dir":
        return lambda: parse_config({"name": "cost_model", "profile": str(tmp)})
    if case.special == "dir":
        d = tmp / "conf.json"
        d.mkdir()
        return lambda: parse_config(str(d))
    if case.special == "fifo":
        fifo = tmp / "conf.yaml"
        os.mkfifo(fifo)
        return lambda: parse_config(str(fifo))
    if case.special == "missing":
        return lambda: parse_config(str(tmp / "absent.json"))
    if case.special == "big":
        big = tmp / "big.json"
        big.write_text('{"name": "static", "pad": "' + "x" * (5 * 2**20) + '"}')
        return lambda: parse_config(str(big))
    if case.special == "ini":
        ini = tmp / "conf.ini"
        ini.write_text("name=static\n")
        return lambda: parse_config(str(ini))
    if case.suffix:
        f = tmp / f"conf{case.suffix}"
        f.write_bytes(case.text.encode("utf-8", "surrogateescape"))
        return lambda: parse_config(str(f))
    text = case.text
    return lambda: parse_config(text)


def check(case: Case) -> tuple[bool, str]:
    """(clear, what happened) for one case."""
    with tempfile.TemporaryDirectory() as d:
        call = _materialise(case, Path(d))
        try:
            call()
        except ConfigError as exc:
            msg = str(exc)
            if case.expect not in msg:
                return False, f"ConfigError without {case.expect!r}: {msg[:200]}"
            if len(msg) > MAX_MESSAGE:
                return False, f"message of {len(msg)} characters"
            return True, msg.splitlines()[0][:140]
        except BaseException as exc:  # noqa: BLE001 - anything else is the finding
            return False, f"{type(exc).__name__}: {str(exc)[:200]}"
        return False, "accepted"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.parse_args(argv)
    clear = 0
    for case in CASES:
        ok, what = check(case)
        clear += ok
        print(f"{'ok  ' if ok else 'FAIL'} {case.label}: {what}")
    print(f"bad configs with a clear error: {clear} / {len(CASES)}")
    return 0 if clear == len(CASES) else 1


if __name__ == "__main__":
    sys.exit(main())
