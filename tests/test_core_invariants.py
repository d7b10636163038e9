"""check() fails, with the rule's whole message, when exactly one thing is corrupted. The slot rule
(9) is checked by a vectorised count with a slow walk that names the culprit: both paths are covered
here (a leak, a page owned twice, a page twice in the free list, a page out of range)."""

from __future__ import annotations

import pytest
from conftest import new_cache, node_at, put, settle

from hicache_sim.core import InvariantError, check


@pytest.fixture
def cache():
    c = new_cache(page_size=1, device_pages=16, host_pages=16, write_policy="write_through")
    put(c, [1, 2, 3])
    put(c, [1, 2, 9, 9])
    settle(c)
    return c


def test_a_settled_cache_passes(cache):
    check(cache)


def test_leaked_device_page(cache):
    cache.device.alloc(1)  # handed out, owned by nobody
    with pytest.raises(InvariantError) as e:
        check(cache)
    assert str(e.value) == "[9 slots] device pool: 15 pages accounted for, pool has 16 (1 leaked)"


def test_held_pages_count_as_owned(cache):
    held = cache.device.alloc(2)
    check(cache, held_device_pages=held)


def test_device_page_owned_twice(cache):
    a, b = node_at(cache, [1, 2]), node_at(cache, [1, 2, 3])
    stolen = a.value[0]
    cache.device.free([b.value[0]])
    b.value[0] = stolen
    with pytest.raises(InvariantError) as e:
        check(cache)
    assert str(e.value) == f"[9 slots] device page {stolen} held by node {b.id} and by node {a.id}"


def test_host_page_twice_in_the_free_list(cache):
    free = cache.host.recycled_pages()
    page = node_at(cache, [1, 2, 3]).host_value[0]
    cache.host._free.append(page)  # freed behind the tree's back, still owned
    assert page not in free
    with pytest.raises(InvariantError) as e:
        check(cache)
    assert str(e.value) == f"[9 slots] host page {page} held by node {node_at(cache, [1, 2, 3]).id} and by free list"


def test_device_page_never_handed_out(cache):
    node = node_at(cache, [1, 2, 3])
    cache.device.free([node.value[0]])
    node.value[0] = 15  # beyond every slot the pool handed out
    fresh = cache.device.fresh_start
    with pytest.raises(InvariantError) as e:
        check(cache)
    want = f"[9 slots] device page 15 held by node {node.id} was never handed out (pool has {fresh} in use or freed)"
    assert str(e.value) == want
