"""The package's floors, read from its source: the core and the policies never import what sits above them.

Floors, bottom up: the core value types, the policy contract and step-cost profiles; ``policies/``; the
registry; the engine-agnostic runtime; then the simulator, the adapters and the CLI. An import inside a
function counts for the policies (they must not reach up even lazily), and for the runtime and the simulator,
which never name an adapter; the cycle check is run both ways.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "specpolicy"


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


MODULES = _modules()


def _imports(module: str, *, eager_only: bool) -> set[str]:
    """The specpolicy modules ``module`` imports (at import time only, when ``eager_only``)."""
    path, is_pkg = MODULES[module]
    tree = ast.parse(path.read_text())
    lazy: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lazy.update(id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
    out: set[str] = set()
    for node in ast.walk(tree):
        if eager_only and id(node) in lazy:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("specpolicy"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + (node.module.split(".") if node.module else []))
            elif (node.module or "").startswith("specpolicy"):
                target = node.module or ""
            else:
                continue
            for alias in node.names:
                full = f"{target}.{alias.name}"
                out.add(full if full in MODULES else target)
    return {m for m in out if m in MODULES and m != module}


def _under(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


UPPER = (
    "specpolicy.runtime",
    "specpolicy.sim",
    "specpolicy.adapters",
    "specpolicy.cli",
    "specpolicy.commands",
)


def test_the_policies_import_neither_the_registry_nor_the_simulator_nor_the_adapters() -> None:
    for module in MODULES:
        if _under(module, "specpolicy.policies"):
            bad = {m for m in _imports(module, eager_only=False) if _under(m, "specpolicy.registry", *UPPER)}
            assert not bad, f"{module} imports {sorted(bad)}"


@pytest.mark.parametrize("floor", ["specpolicy.runtime", "specpolicy.sim"])
def test_the_runtime_and_the_simulator_import_no_adapter(floor: str) -> None:
    """Lazy and ``TYPE_CHECKING`` imports included: the simulator runs policies through the same runtime
    the engines assemble, so neither may depend on an engine's adapter."""
    members = [m for m in MODULES if _under(m, floor)]
    assert len(members) > 3, floor
    for module in members:
        bad = {m for m in _imports(module, eager_only=False) if _under(m, "specpolicy.adapters")}
        assert not bad, f"{module} imports {sorted(bad)}"


def test_the_runtime_sits_below_the_simulator_and_the_adapters() -> None:
    """The runtime may use the registry (it builds the configured policy) but nothing above itself."""
    for module in MODULES:
        if _under(module, "specpolicy.runtime"):
            above = ("specpolicy.sim", "specpolicy.adapters", "specpolicy.cli", "specpolicy.commands")
            bad = {m for m in _imports(module, eager_only=False) if _under(m, *above)}
            assert not bad, f"{module} imports {sorted(bad)}"


def test_the_core_imports_nothing_above_it() -> None:
    core = [m for m in MODULES if not _under(m, "specpolicy.policies", "specpolicy.registry", *UPPER)]
    assert "specpolicy.profiles" in core and "specpolicy.policy" in core
    for module in core:
        if module == "specpolicy":
            continue  # the package face re-exports the registry's functions
        bad = {m for m in _imports(module, eager_only=True) if _under(m, "specpolicy.policies", *UPPER)}
        bad |= {m for m in _imports(module, eager_only=False) if _under(m, *UPPER)}
        assert not bad, f"{module} imports {sorted(bad)}"


@pytest.mark.parametrize("eager_only", [True, False], ids=["at-import-time", "lazy-and-type-only-included"])
def test_no_import_circle(eager_only: bool) -> None:
    """Not at import time, and not through an import inside a function or under ``TYPE_CHECKING``
    either: a module that needs a name from above it gets it handed down (a parameter, a Protocol, a
    parser the registry installs)."""
    graph = {m: _imports(m, eager_only=eager_only) for m in MODULES}
    for module, (_, is_pkg) in MODULES.items():
        if is_pkg:  # a package importing its own children is not a circle
            graph[module] = {m for m in graph[module] if not m.startswith(module + ".")}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            assert state.get(n) != 1, "import circle: " + " -> ".join([*path, m, n])
            if n not in state:
                visit(n, [*path, m])
        state[m] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


MAX_LINES = 450


def test_no_module_is_over_450_lines() -> None:
    """One idea per module: a module past this has more than one, and is split by idea."""
    long = {m: n for m, (path, _) in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
