"""Reading a user's YAML: as ``yaml.safe_load``, but a key given twice in one mapping is an error.

PyYAML keeps the last of two equal keys without a word, so ``host_ratio: 2`` above ``host_ratio: 0.5``
would run the second silently; a scenario or calibration file must say one thing once.
"""

from __future__ import annotations

from typing import Any

import yaml


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader refusing a mapping that holds a key twice (the error carries the line, as a syntax error)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: SafeLoader reports it below
                duplicate = False
            if duplicate:
                raise yaml.constructor.ConstructorError(None, None, f"found duplicate key {key!r}", key_node.start_mark)
            if not isinstance(key, (list, dict)):
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """``text`` parsed as YAML; ``yaml.YAMLError`` (with ``problem_mark``) for bad syntax or a duplicate key."""
    return yaml.load(text, Loader=_UniqueKeyLoader)
