"""The generated reference pages (scripts/reference_docs.py) are what the code gives, and cover all of it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import reference_docs as rd  # noqa: E402

from specpolicy.cli import build_parser  # noqa: E402
from specpolicy.policies import BUILTIN_ENTRIES  # noqa: E402
from specpolicy.runtime.settings import ENV_VARS, AdapterSettings  # noqa: E402


def test_the_checked_in_pages_are_what_the_code_gives() -> None:
    assert rd.main(["--check"]) == 0, "run python3 scripts/reference_docs.py --write"


def test_a_changed_page_is_reported(tmp_path: Path) -> None:
    for rel in rd.pages():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    assert rd.main(["--check", "--root", str(tmp_path)]) == 0
    page = tmp_path / rd.POLICIES
    page.write_text(page.read_text().replace("| `num_steps` | int | `3` |", "| `num_steps` | int | `4` |", 1))
    assert rd.main(["--check", "--root", str(tmp_path)]) == 1


def test_every_policy_and_parameter_is_listed() -> None:
    text = (ROOT / rd.POLICIES).read_text()
    for entry in BUILTIN_ENTRIES:
        assert f"## `{entry.name}`" in text, entry.name
        section = text.split(f"## `{entry.name}`", 1)[1].split("\n## ", 1)[0]
        for field, info in entry.config.model_fields.items():
            if field != "name":
                assert f"| `{field}` |" in section, (entry.name, field)
                if info.description:
                    assert info.description.replace("|", "\\|") in section, (entry.name, field)


def test_every_setting_is_listed_with_its_variable() -> None:
    text = (ROOT / rd.SETTINGS).read_text()
    for field in AdapterSettings.model_fields:
        row = next((line for line in text.splitlines() if line.startswith(f"| `{field}` |")), None)
        assert row is not None, field
        if field in ENV_VARS:
            assert f"`{ENV_VARS[field]}`" in row, field
    assert "one of `refuse`, `warn`" in text  # a Literal reads as its choices


def test_every_subcommand_and_option_is_listed() -> None:
    text = (ROOT / rd.CLI).read_text()
    parser = build_parser()
    names = [name for name, _, _ in rd._subcommands(parser, "specpolicy")]
    assert {"specpolicy simulate", "specpolicy profile fit", "specpolicy vllm-args"} <= set(names)
    for name, _, sub in rd._subcommands(parser, "specpolicy"):
        section = text.split(f"## `{name}`\n", 1)[1].split("\n## ", 1)[0]
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help") and action.help != "==SUPPRESS==":
                    assert f"`{option}`" in section, (name, option)
