"""Exceptions raised by the core. The CLI turns them into one-line messages; the core never exits."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value breaks a rule. Names the field, the rule, the value and what is allowed."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def __reduce__(self) -> tuple[type[ConfigError], tuple[str, str]]:
        """Rebuilt from its two arguments, so a sweep worker's error reaches the parent process intact."""
        return (type(self), (self.field, self.message))


class InvariantError(AssertionError):
    """A structural invariant of the cache does not hold. The message names the node and the rule."""


class CacheStateError(RuntimeError):
    """An operation was called in a state where SGLang would assert (e.g. unlocking an unlocked node)."""
