#!/usr/bin/env python3
"""Which third-party modules vLLM's offline speculative path imports, read from its source (no import).

The GPU host has no package index, so vLLM goes there as a bundle of the wheels its image lacks
(``vllm_bundle.py``). Which wheels that must be is decided by what the path imports, not by the 45
requirements vLLM declares: ``vllm.LLM(...).generate`` with a ``speculative_config``, the V1 engine core,
the GPU worker and model runner, the triton attention backend and the draft-model and EAGLE proposers.
This parses every module of an installed vLLM with ``ast`` and follows imports from ``roots``:

- ``top``: a module-level import (always runs when the module is imported);
- ``cond``: under a module-level ``if`` (``if current_platform.is_cuda():`` is taken on the GPU host);
- ``guarded``: under a module-level ``try`` or ``with contextlib.suppress(...)`` (optional: the module
  copes with its absence);
- ``lazy``: inside a function (runs only when the function does: read case by case);
- ``typecheck``: under ``if TYPE_CHECKING:`` (never at run time).

``closure(roots, kinds)`` is the set of vLLM modules reached through edges of ``kinds``, and
``external(...)`` the third-party top-level names those modules import with ``kinds``. The probe on the
GPU host (``vllm_probe.py``) then imports the same roots for real. Usage::

    specpolicy-livecheck bundle imports .venvs/vllm-0.26.0/lib/python3.11/site-packages [--lazy]
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

__all__ = ["Edge", "ImportGraph", "STDLIB"]

#: Names that need no wheel: the standard library (and ``__future__``).
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}


@dataclass(frozen=True)
class Edge:
    """One import statement: the imported module (resolved), how it is reached, where it is."""

    target: str
    kind: str  # top | cond | guarded | lazy | typecheck
    module: str
    line: int


def _suppresses(node: ast.With) -> bool:
    """``with contextlib.suppress(...)``: a guard like ``try``/``except``."""
    return any("suppress(" in ast.unparse(item.context_expr) for item in node.items)


def _lazy_loads(tree: ast.Module, module: str) -> list[Edge]:
    """``x = LazyLoader("x", globals(), "mod")`` imports ``mod`` when an attribute of ``x`` is first read. A
    read while the module is imported is a ``top`` import of ``mod``: in a module-level expression, or in
    an annotation of a class body or of the module (evaluated there unless ``from __future__ import
    annotations``). vLLM's structured-output grammars annotate fields so (``ll_matcher:
    llguidance.LLMatcher``): the host's first probe found what the import statements alone had missed."""
    loaders: dict[str, str] = {}
    future = False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            future = future or any(a.name == "annotations" for a in node.names)
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func).endswith("LazyLoader")
            and len(node.value.args) >= 3
            and isinstance(node.value.args[2], ast.Constant)
            and isinstance(node.value.args[2].value, str)
        ):
            loaders[node.targets[0].id] = node.value.args[2].value
    if not loaders:
        return []
    out: list[Edge] = []

    def reads(node: ast.AST) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in loaders:
                out.append(Edge(loaders[sub.value.id], "top", module, sub.lineno))

    def at_import(stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(stmt, ast.ClassDef):
                at_import(stmt.body)
            elif isinstance(stmt, ast.AnnAssign):
                if not future:
                    reads(stmt.annotation)
                if stmt.value is not None:
                    reads(stmt.value)
            elif isinstance(stmt, (ast.If, ast.Try, ast.With)):
                at_import([*stmt.body, *getattr(stmt, "orelse", []), *getattr(stmt, "finalbody", [])])
            else:  # (a loader's own assignment reads no attribute of it)
                reads(stmt)

    at_import(tree.body)
    return out


class ImportGraph:
    """The import statements of every module of one top-level package under ``site`` (site-packages)."""

    def __init__(self, site: Path, package: str = "vllm") -> None:
        self.site = Path(site)
        self.package = package
        self.files: dict[str, Path] = {}
        for path in sorted((self.site / package).rglob("*.py")):
            parts = list(path.relative_to(self.site).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            self.files[".".join(parts)] = path

    def _resolve(self, module: str, level: int, name: str | None) -> str:
        if level == 0:
            return name or ""
        base = module.split(".")
        if self.files[module].name != "__init__.py":
            base = base[:-1]
        if level > 1:
            base = base[: len(base) - (level - 1)]
        return ".".join(base + ([name] if name else []))

    @cache  # noqa: B019  (one graph per run; the cache dies with it)
    def edges(self, module: str) -> tuple[Edge, ...]:
        """Every import in ``module`` with the kind of its context."""
        tree = ast.parse(self.files[module].read_text(encoding="utf-8"))
        out: list[Edge] = []

        def record(node: ast.Import | ast.ImportFrom, kind: str) -> None:
            if isinstance(node, ast.Import):
                out.extend(Edge(a.name, kind, module, node.lineno) for a in node.names)
                return
            base = self._resolve(module, node.level, node.module)
            for alias in node.names:
                full = f"{base}.{alias.name}" if base else alias.name
                out.append(Edge(full if full in self.files else base, kind, module, node.lineno))

        def visit(node: ast.AST, kind: str) -> None:
            for child in ast.iter_child_nodes(node):
                k = kind
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    k = "lazy"
                elif kind == "top" and isinstance(child, ast.Try):
                    k = "guarded"
                elif kind == "top" and isinstance(child, ast.With) and _suppresses(child):
                    k = "guarded"
                elif kind == "top" and isinstance(child, ast.If):
                    if "TYPE_CHECKING" in ast.unparse(child.test):
                        for stmt in child.body:
                            visit_stmt(stmt, "typecheck")
                        for stmt in child.orelse:
                            visit_stmt(stmt, kind)
                        continue
                    k = "cond"
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    record(child, k)
                visit(child, k)

        def visit_stmt(stmt: ast.stmt, kind: str) -> None:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                record(stmt, kind)
            visit(stmt, kind)

        visit(tree, "top")
        out.extend(_lazy_loads(tree, module))
        return tuple(out)

    def _own(self, name: str) -> bool:
        return name.split(".")[0] == self.package

    def closure(self, roots: Iterable[str], kinds: Iterable[str] = ("top", "cond")) -> dict[str, Edge | None]:
        """Modules of the package reached from ``roots`` (importing a.b.c imports a and a.b too), each
        with the edge that first reached it (None for a root)."""
        allowed = frozenset(kinds)
        seen: dict[str, Edge | None] = {}
        stack: list[str] = []

        def add(name: str, via: Edge | None) -> None:
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                sub = ".".join(parts[:i])
                if sub in self.files and sub not in seen:
                    seen[sub] = via
                    stack.append(sub)

        for root in roots:
            if self._own(root):
                add(root, None)
        while stack:
            for edge in self.edges(stack.pop()):
                if edge.kind in allowed and self._own(edge.target):
                    add(edge.target, edge)
        return seen

    def external(
        self,
        roots: Iterable[str],
        kinds: Iterable[str] = ("top", "cond"),
        of_kinds: Iterable[str] | None = None,
    ) -> dict[str, list[Edge]]:
        """Third-party top-level names imported (with ``of_kinds``, default ``kinds``) by the modules
        reached through ``kinds``, each with the import statements that name it."""
        want = frozenset(kinds if of_kinds is None else of_kinds)
        out: dict[str, list[Edge]] = {}
        for module in self.closure(roots, kinds):
            for edge in self.edges(module):
                top = edge.target.split(".")[0]
                if edge.kind in want and top and not self._own(edge.target) and top not in STDLIB:
                    out.setdefault(top, []).append(edge)
        return out

    def chain(self, module: str, roots: Iterable[str], kinds: Iterable[str] = ("top", "cond")) -> list[str]:
        """How ``module`` is reached from ``roots``: ``["module", "importer:line", ...]``."""
        seen = self.closure(roots, kinds)
        out = [module]
        via = seen.get(module)
        while via is not None:
            out.append(f"{via.module}:{via.line}")
            via = seen.get(via.module)
        return out


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    from specpolicy_livecheck import vllm_bundle

    ap = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("site", type=Path, help="site-packages holding vllm/")
    ap.add_argument("--lazy", action="store_true", help="also list function-level (lazy) imports")
    args = ap.parse_args(argv)
    graph = ImportGraph(args.site)
    roots = [m for m in vllm_bundle.PROBE_MODULES if m.startswith("vllm")]
    print(f"{len(graph.closure(roots))} vllm modules reached at module level from {len(roots)} roots")
    kinds = ("top", "cond", "guarded", "lazy") if args.lazy else ("top", "cond", "guarded")
    for name, edges in sorted(graph.external(roots, of_kinds=kinds).items()):
        where = ", ".join(f"{e.module}:{e.line} ({e.kind})" for e in edges[:2])
        print(f"{name:28s} {vllm_bundle.provider(name):44s} {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
