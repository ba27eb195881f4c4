"""Stub modules for CUDA-only packages that SGLang imports at module level but the tests never call.

PyPI's ``torchvision`` wheel needs a CUDA torch and ``sgl_kernel`` is a CUDA kernel wheel; neither can be
installed next to the CPU torch. A ``sys.meta_path`` finder hands out permissive stand-ins (every attribute
is a MagicMock) for exactly these top-level names, and only when the real package is absent. Anything that
actually calls into them would get a MagicMock, which is why the tests only exercise code paths that do not.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any
from unittest import mock

STUBBED = ("torchvision", "sgl_kernel")


class _StubModule(types.ModuleType):
    __version__ = "0.0.0+specpolicy.stub"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = mock.MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []  # a package, so submodules resolve through the finder too
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class StubFinder(importlib.abc.MetaPathFinder):
    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".", 1)[0] not in self.names:
            return None
        return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)


def install() -> tuple[str, ...]:
    """Install the finder for the packages that are not really installed; return their names."""
    if any(isinstance(f, StubFinder) for f in sys.meta_path):
        return next(f.names for f in sys.meta_path if isinstance(f, StubFinder))
    missing = tuple(n for n in STUBBED if n not in sys.modules and importlib.util.find_spec(n) is None)
    if missing:
        sys.meta_path.insert(0, StubFinder(missing))
    return missing
