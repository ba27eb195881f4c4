"""Bounded parsing of configuration text (policy configs, settings, profiles): JSON, YAML and TOML.

A configuration comes from users, environment variables and files that anyone may have written, so reading one
must cost little whatever it holds: files are limited to ``MAX_FILE_BYTES`` and must be regular files (a
directory is said to be one, a pipe is not read), nesting is limited to ``MAX_DEPTH`` levels, YAML aliases
(``*name``: a 500-byte file of nested aliases expands to gigabytes once rendered) are refused, and a key given
twice in one mapping is an error naming the key instead of "the last one wins". YAML 1.1's base-60 numbers
(``1:04`` read as 64) are read as the strings they look like, so a field expecting a number says so. Every
problem, a path holding a NUL byte or a control character in a YAML file included, is a ``ConfigError``
that says where.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from .errors import ConfigError, short_repr, short_str

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "check_depth",
    "load_file",
    "loads_json",
    "loads_json_object",
    "read_text",
    "write_text_atomic",
]

#: Largest configuration file read (a policy config is a few hundred bytes; a profile a few hundred KiB).
MAX_FILE_BYTES = 4 * 2**20
#: Deepest nesting of mappings and lists accepted.
MAX_DEPTH = 32


def read_text(path: str | os.PathLike[str], what: str = "config file") -> str:
    """The text of a regular file of at most MAX_FILE_BYTES, UTF-8; ConfigError saying what is wrong."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {p}") from None
    except OSError as exc:
        raise ConfigError(f"{what} {p}: cannot be read ({exc.strerror or exc})") from None
    except ValueError:  # a NUL byte in the path
        raise ConfigError(f"{what} {short_repr(os.fspath(path))}: a path cannot contain a NUL byte") from None
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{what} {p} is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{what} {p} is not a regular file (a pipe, socket or device is not read)")
    if st.st_size > MAX_FILE_BYTES:
        raise ConfigError(f"{what} {p} is {st.st_size} bytes; the limit is {MAX_FILE_BYTES}")
    try:
        with open(p, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{what} {p}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"{what} {p} is over the limit of {MAX_FILE_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` so that a reader sees the old file or the new one, never a part: a temporary file in
    the same directory, flushed to disk, given a modification time of its own (the kernel's is a clock tick
    coarse, and a watcher compares it), then renamed over ``path``. The temporary file never stays behind."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        now = time.time_ns()
        os.utime(tmp, ns=(now, now))
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(short_str(exc, limit).split())
    return text if len(text) <= limit else text[:limit] + "..."


def check_depth(data: Any, where: str) -> None:
    """ConfigError when ``data`` nests mappings and lists more than MAX_DEPTH levels deep. Iterative, so a
    deeply nested value cannot exhaust the stack while being checked."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list, tuple)):
            if depth > MAX_DEPTH:
                raise ConfigError(f"{where}: nested more than {MAX_DEPTH} levels deep")
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)


def _pairs_no_duplicates(where: str) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ConfigError(f"{where}: key {short_repr(key)} is given twice")
            out[key] = value
        return out

    return hook


def loads_json(text: str | bytes, where: str = "JSON") -> Any:
    """Parse JSON text: duplicate keys and nesting beyond MAX_DEPTH are ConfigErrors, as is invalid JSON."""
    if len(text) > MAX_FILE_BYTES:
        raise ConfigError(f"{where}: {len(text)} bytes; the limit is {MAX_FILE_BYTES}")
    try:
        data = json.loads(text, object_pairs_hook=_pairs_no_duplicates(where))
    except ConfigError:
        raise
    except RecursionError:
        raise ConfigError(f"{where}: nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8
        raise ConfigError(f"{where}: not valid JSON: {exc}") from None
    check_depth(data, where)
    return data


def loads_json_object(text: str | bytes, where: str) -> dict[str, Any]:
    """``loads_json`` for text that must hold one JSON object (a config section, a command-line value)."""
    data = loads_json(text, where)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a JSON object, got {type(data).__name__}")
    return data


#: The alternatives of YAML 1.1's implicit int and float patterns that read base-60 numbers (``1:04``).
_BASE_60 = (
    r"|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+",
    r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*",
)


def _without_base_60(resolvers: dict[Any, list[tuple[str, Any]]]) -> dict[Any, list[tuple[str, Any]]]:
    """PyYAML's implicit resolvers with the base-60 alternatives cut out of the int and float patterns, so
    ``1:04`` stays a string (as in YAML 1.2) instead of becoming 64."""
    out: dict[Any, list[tuple[str, Any]]] = {}
    for first, pairs in resolvers.items():
        kept = []
        for tag, regexp in pairs:
            if tag.endswith((":int", ":float")):
                pattern = regexp.pattern
                for alternative in _BASE_60:
                    pattern = pattern.replace(alternative, "")
                regexp = re.compile(pattern, regexp.flags)
            kept.append((tag, regexp))
        out[first] = kept
    return out


def _yaml_loader() -> type[Any]:
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        """SafeLoader without aliases, duplicate keys or deep nesting."""

        where = "YAML"
        _depth = 0
        yaml_implicit_resolvers = _without_base_60(yaml.SafeLoader.yaml_implicit_resolvers)

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise ConfigError(
                    f"{self.where}: line {mark.line + 1}: YAML aliases (*name) are not supported; write the "
                    "value out"
                )
            self._depth += 1
            try:
                if self._depth > MAX_DEPTH:
                    raise ConfigError(f"{self.where}: nested more than {MAX_DEPTH} levels deep")
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the base class reports it
                    continue
                if duplicate:
                    line = key_node.start_mark.line + 1
                    raise ConfigError(f"{self.where}: line {line}: key {short_repr(key)} is given twice")
            return super().construct_mapping(node, deep=deep)

    return BoundedLoader


def loads_yaml(text: str, where: str = "YAML") -> Any:
    import yaml

    try:
        loader = _yaml_loader()(text)  # its reader refuses control characters here
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: cannot parse: {_one_line(exc)}") from None
    loader.where = where
    try:
        return loader.get_single_data()
    except ConfigError:
        raise
    except RecursionError:
        raise ConfigError(f"{where}: nested more than {MAX_DEPTH} levels deep") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: cannot parse: {_one_line(exc)}") from None
    finally:
        loader.dispose()


def load_file(path: str | os.PathLike[str], what: str = "policy config file") -> Any:
    """Parse a .json, .yaml / .yml or .toml file within the limits above."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".json", ".yaml", ".yml", ".toml"):
        raise ConfigError(f"{what} {p}: unsupported extension (use .json, .yaml or .toml)")
    text = read_text(p, what)
    where = f"{what} {p}"
    if suffix == ".json":
        return loads_json(text, where)
    if suffix in (".yaml", ".yml"):
        return loads_yaml(text, where)
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(text)  # duplicate keys are already an error in TOML
    except RecursionError:
        raise ConfigError(f"{where}: nested more than {MAX_DEPTH} levels deep") from None
    except Exception as exc:  # noqa: BLE001 - TOMLDecodeError and friends
        raise ConfigError(f"{where}: cannot parse: {_one_line(exc)}") from None
    check_depth(data, where)
    return data
