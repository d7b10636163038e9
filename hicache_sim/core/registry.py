"""A named-strategy registry: policies are data, looked up by name, never if-chains.

The same registry feeds scenario validation, CLI choices and the "Supported: ..." error message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from .errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to strategy classes or values. Registering a name twice raises."""

    def __init__(self, kind: str, field: str) -> None:
        self.kind = kind
        self.field = field
        self._items: dict[str, T] = {}
        self._aliases: dict[str, str] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@REGISTRY.register("lru")`` on a class (or call it on a value)."""

        def deco(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = item
            return item

        return deco

    def add(self, name: str, item: T) -> T:
        """Register a value (non-decorator form)."""
        return self.register(name)(item)

    def alias(self, old: str, name: str) -> None:
        """Accept ``old`` as another spelling of the registered ``name`` (kept so files written with
        an earlier name still load; ``names()`` lists only the current names)."""
        if old in self._items or old in self._aliases:
            raise ValueError(f"{self.kind} {old!r} is already registered")
        if name not in self._items:
            raise ValueError(f"{self.kind} alias {old!r}: {name!r} is not registered")
        self._aliases[old] = name

    def canonical(self, name: str) -> str:
        """The registered name ``name`` spells (itself unless it is an alias)."""
        return self._aliases.get(name, name)

    def get(self, name: str) -> T:
        """Look a name up (an alias finds its name); unknown names raise ConfigError listing what is
        supported."""
        try:
            return self._items[self.canonical(name)]
        except KeyError:
            raise ConfigError(
                self.field, f"unknown {self.kind} {name!r}. Supported: {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        """Registered names in registration order."""
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items or name in self._aliases
