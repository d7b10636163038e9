"""README's lists of settings equal the registries they name (issue 30 item 3): a strategy, layout or
backend added to the code and not to README (or dropped from the code and still in README) fails here,
as the schema's field descriptions are built from the same registries."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hicache_sim.core import EVICTION_STRATEGIES, HOST_EVICTION_RULES, WRITE_POLICIES
from hicache_sim.core.semantics import SEMANTICS
from hicache_sim.core.stores import STORE_MODELS
from hicache_sim.hardware.presets import HOST_LAYOUTS, STORAGE
from hicache_sim.scenario.schema import CacheSpec
from hicache_sim.workloads.kinds import WORKLOAD_KINDS

README = Path(__file__).resolve().parent.parent / "README.md"

#: README setting -> the registry its parenthesised list names, and words README adds that are no entry.
LISTS = {
    "cache.write_policy": (WRITE_POLICIES, set()),
    "cache.host_eviction": (HOST_EVICTION_RULES, set()),
    "cache.eviction_policy": (EVICTION_STRATEGIES, set()),
    "cache.mem_layout": (HOST_LAYOUTS, set()),
    "cache.semantics": (SEMANTICS, set()),
    "cache.storage_backend": (STORAGE, {"none"}),
    "workload.kind": (WORKLOAD_KINDS, set()),
}


def _listed(setting: str) -> set[str]:
    """The leading name of each comma-separated item in the parentheses after `` `setting` (`` in README,
    up to the first semicolon (what follows one explains, it lists nothing)."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    m = re.search(rf"`{re.escape(setting)}` \(([^()]*(?:\([^()]*\)[^()]*)*)\)", text)
    assert m, f"README has no list after `{setting}`"
    items = m.group(1).split(";")[0].split(",")
    return {re.match(r"\s*`?([\w.-]+)", it).group(1) for it in items if re.match(r"\s*`?[\w.-]+", it)}


@pytest.mark.parametrize("setting", sorted(LISTS))
def test_readme_lists_every_registered_name(setting):
    registry, extra = LISTS[setting]
    names = _listed(setting)
    assert names - extra == set(registry.names()), (setting, sorted(names), registry.names())


def test_store_models_listed_where_readme_names_them():
    text = " ".join(README.read_text(encoding="utf-8").split())
    m = re.search(r"`hardware.storage.eviction` \(what the full store does, by default its backend's: ([^;)]*)", text)
    assert m
    assert {w.strip() for w in m.group(1).split(",")} == set(STORE_MODELS.names())


@pytest.mark.parametrize("field", ["write_policy", "host_eviction", "eviction_policy", "prefetch_policy"])
def test_schema_descriptions_are_the_registries(field):
    from hicache_sim.scenario.schema import _REGISTRY_FIELDS

    assert CacheSpec.model_fields[field].description == " | ".join(_REGISTRY_FIELDS[field].names())
