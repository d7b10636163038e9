"""Stand-in for torchvision in the SGLang driver's env (not SGLang's code, not torchvision's).

SGLang 0.5.23 imports torchvision (and transformers, seeing it installed, imports parts of it) when
its modules load, for multimodal processors. The PyPI wheel of torchvision is a CUDA build whose
operators do not register against the CPU torch, so the import fails. The cache path never uses
it: every ``torchvision.*`` module here is empty, and every name read from one is a placeholder
that raises if it is ever called.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+hicache-sim-stub"


class _Missing:
    """A torchvision name the cache driver never uses."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"torchvision stub: {self._name} was called")

    def __getattr__(self, attr: str) -> _Missing:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self._name}.{attr}")


def _module_getattr(prefix: str):
    def getattr_(name: str) -> _Missing:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Missing(f"{prefix}.{name}")

    return getattr_


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves every ``torchvision.<sub>`` import with an empty placeholder module."""

    def find_spec(self, fullname, path, target=None):
        if fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__getattr__ = _module_getattr(spec.name)
        return mod

    def exec_module(self, module):
        return None


sys.meta_path.insert(0, _Finder())
__getattr__ = _module_getattr("torchvision")
