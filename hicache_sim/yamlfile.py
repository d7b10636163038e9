"""Reading a user's YAML: as ``yaml.safe_load``, but a key given twice in one mapping is an error.

PyYAML keeps the last of two equal keys without a word, so ``host_ratio: 2`` above ``host_ratio: 0.5``
would run the second silently; a scenario or calibration file must say one thing once. Merge keys
(``<<: *base``) keep their meaning: a key written beside them overrides the merged one.
"""

from __future__ import annotations

from typing import Any

import yaml

MERGE_TAG = "tag:yaml.org,2002:merge"


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader refusing a mapping that writes a key twice (the error carries the line, as a syntax error)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"found duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
            except TypeError:  # an unhashable key: SafeLoader reports it below
                pass
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """``text`` parsed as YAML; ``yaml.YAMLError`` (with ``problem_mark``) for bad syntax or a duplicate key."""
    return yaml.load(text, Loader=_UniqueKeyLoader)


def yaml_error_where(e: yaml.YAMLError) -> tuple[str, str]:
    """(``:LINE`` or "", the problem in words) of a YAML error, for a one-line message."""
    mark = getattr(e, "problem_mark", None)
    return (f":{mark.line + 1}" if mark is not None else ""), (getattr(e, "problem", None) or "invalid YAML")
