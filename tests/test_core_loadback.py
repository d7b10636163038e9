"""Load-back of a host hit: all or nothing, the 10-token threshold, the memory quota, locks held until
the H2D ack (reference section 2.8; invariant 16)."""

from __future__ import annotations

import pytest
from conftest import new_cache, node_at, put, settle

from hicache_sim.core import TransferKind, check


def h_only_chain(page_size=4, device_pages=16, **kw):
    """[1, 2] on device (D+H), [3, 4, 5] below it H-only."""
    c = new_cache(page_size=page_size, device_pages=device_pages, host_pages=16, **kw)
    put(c, [1, 2])
    put(c, [1, 2, 3, 4, 5])
    settle(c)
    leaf = node_at(c, [1, 2, 3, 4, 5])
    c.inc_lock_ref(node_at(c, [1, 2]))
    assert c.evict(3) == 3
    c.dec_lock_ref(node_at(c, [1, 2]))
    assert leaf.state() == "H" and node_at(c, [1, 2]).state() == "D+H"
    return c, node_at(c, [1, 2]), leaf


def test_load_back_brings_the_whole_chain_to_device_and_locks_it_until_the_ack():
    c, parent, leaf = h_only_chain()
    host = list(leaf.host_value)
    assert c.load_back(leaf) is leaf
    assert leaf.state() == "D+H" and len(leaf.value) == len(leaf.host_value) == 3
    assert leaf.lock_ref == 1 and parent.lock_ref == 1
    (t,) = c.take_transfers()
    assert t.kind is TransferKind.H2D and t.host_pages == host and t.device_pages == leaf.value
    assert c.evict(100) == 0  # the loaded path is pinned while the copy is in flight
    check(c)
    c.complete(t)
    assert leaf.lock_ref == 0 and parent.lock_ref == 0
    assert c.counters.load_backs == 1 and c.counters.load_back_pages == 3
    check(c)


def test_load_back_of_a_multi_node_chain_slices_pages_in_order():
    c = new_cache(device_pages=16, host_pages=16)
    put(c, [1, 2])
    put(c, [1, 2, 3, 4])
    settle(c)
    c.evict(100)
    top, leaf = node_at(c, [1, 2]), node_at(c, [1, 2, 3, 4])
    assert top.state() == leaf.state() == "H"
    assert c.load_back(leaf) is leaf
    (t,) = c.take_transfers()
    assert t.device_pages == top.value + leaf.value and t.host_pages == top.host_value + leaf.host_value
    assert t.node_ids == [top.id, leaf.id]
    settle(c)
    assert c.match_prefix([1, 2, 3, 4]).device_pages == t.device_pages


def test_load_back_of_a_device_node_does_nothing():
    c, parent, _leaf = h_only_chain()
    assert c.load_back(parent) is None and c.take_transfers() == []


@pytest.mark.parametrize(("page_size", "pages", "loads"), [(4, 2, False), (4, 3, True), (1, 9, False), (1, 10, True)])
def test_load_back_threshold_is_ten_tokens(page_size, pages, loads):
    c = new_cache(page_size=page_size, device_pages=32, host_pages=32)
    keys = list(range(1, pages + 1))
    put(c, keys)
    settle(c)
    c.evict(100)
    node = node_at(c, keys)
    got = c.load_back(node)
    assert (got is node) is loads
    assert c.counters.load_back_below_threshold == (0 if loads else 1)
    if not loads:
        assert node.state() == "H" and c.take_transfers() == []
    settle(c)


def test_load_back_threshold_is_configurable():
    c = new_cache(page_size=4, device_pages=16, host_pages=16, load_back_threshold_tokens=20)
    put(c, [1, 2, 3, 4])
    settle(c)
    c.evict(100)
    assert c.load_back(node_at(c, [1, 2, 3, 4])) is None  # 16 tokens < 20


def test_load_back_memory_quota_counts_what_locking_the_ancestor_protects():
    # Chain of 3 pages below an unlocked 2-page device ancestor: locking the ancestor newly protects
    # 2 pages, so the load needs a quota of 3 + 2.
    c, parent, leaf = h_only_chain()
    assert c.load_back(leaf, mem_quota_pages=4) is None
    assert c.counters.load_back_over_quota == 1 and parent.lock_ref == 0 and leaf.state() == "H"
    check(c)
    assert c.load_back(leaf, mem_quota_pages=5) is leaf
    settle(c)


def test_load_back_quota_with_an_already_locked_ancestor():
    c, parent, leaf = h_only_chain()
    c.inc_lock_ref(parent)  # a running request holds it: locking it again protects nothing new
    assert c.load_back(leaf, mem_quota_pages=3) is leaf
    settle(c)
    c.dec_lock_ref(parent)
    check(c)


def test_load_back_is_all_or_nothing():
    # Device of 6 pages: the ancestor (2) and a locked node (2) leave 2 free pages for a 3-page chain.
    c, parent, leaf = h_only_chain(device_pages=6)
    put(c, [8, 9])
    other = node_at(c, [8, 9])
    settle(c)
    c.inc_lock_ref(other)
    free_before = c.device.available()
    assert free_before == 2
    assert c.load_back(leaf) is None
    assert leaf.state() == "H" and c.device.available() == free_before and c.take_transfers() == []
    assert parent.lock_ref == 0 and c.counters.load_back_failed_alloc == 1
    assert c.counters.failed_device_allocations == 1
    check(c)
    c.dec_lock_ref(other)
    assert c.load_back(leaf) is leaf  # now [8, 9] is evicted to make room
    assert other.state() == "H"
    settle(c)


def test_load_host_hit_extends_the_request_and_moves_its_lock():
    c, parent, leaf = h_only_chain()
    st = c.begin_request("r", [1, 2, 3, 4, 5, 6], 6)
    assert st.device_hit == 2 and st.host_hit == 3 and st.last_node is parent and parent.lock_ref == 1
    assert c.load_host_hit(st) == 3
    assert st.pages == parent.value + leaf.value and st.cached == 5 and st.last_node is leaf
    assert leaf.lock_ref == 2  # the request's lock and the pending load's lock
    settle(c)
    assert leaf.lock_ref == 1
    assert c.extend_request(st, 1)
    c.finish_request(st)
    settle(c)  # the new page's write-through copy held the path until its ack
    assert leaf.lock_ref == 0 and parent.lock_ref == 0
