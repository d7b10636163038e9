"""Regression tests for the upstream bugs the reference lists (section 7, 'Eviction/structure
assertions', and section 5.3): each builds the situation that broke SGLang and shows the core survives."""

from __future__ import annotations

import pytest
from conftest import new_cache, node_at, put, settle

from hicache_sim.core import CacheConfig, check
from hicache_sim.core.errors import CacheStateError
from hicache_sim.core.tree import chain_hashes

RULES = ["evicted_only", "reclaim_mirrors", "boundary"]


# ------------------------------------------------------------------------------------------ #19212


@pytest.mark.parametrize("rule", RULES)
def test_19212_a_node_whose_child_holds_a_host_copy_is_never_a_host_candidate(rule):
    """#19212 / #23537: the host-leaf test must look at the child's host copy (D+H counts), not at
    whether the child is evicted; a parent freed under a backed-up child breaks the tree."""
    c = new_cache(device_pages=16, host_pages=16, host_eviction=rule)
    put(c, [1, 2])
    put(c, [1, 2, 3, 4])
    settle(c)
    x, y = node_at(c, [1, 2]), node_at(c, [1, 2, 3, 4])
    assert y.state() == "D+H"
    assert not c.host_rule.is_candidate(c, x)
    if rule == "evicted_only":
        c.evict(100)  # both H-only now; still, only the leaf qualifies
        assert x.state() == y.state() == "H"
        assert not c.host_rule.is_candidate(c, x) and c.host_rule.is_candidate(c, y)
    assert set(c._host_cands) == {y}
    assert c.evict_host(2) == 2  # frees y's copy (the host leaf), never x's
    assert x.host_value is not None
    check(c)


# ------------------------------------------------------------------------- unreachable mirrors 5.3


def test_evicted_only_host_smaller_than_device_fills_with_unreclaimable_mirrors():
    """Reference 5.3 (#33862, #29049): write_through, host half the device: the host fills with D+H
    mirrors, every later backup fails, and evict_host can free nothing while they stay on device."""
    c = new_cache(device_pages=32, host_pages=16, host_eviction="evicted_only")
    for k in range(8):
        put(c, [100 * k + i for i in range(4)])
        settle(c)
    res = c.residency()
    assert res["host_pages"] == 16 and res["mirror_pages"] == 16 and res["host_only_pages"] == 0
    assert c.counters.failed_host_allocations == 4 and c.counters.backup_failures == 4
    assert c.evict_host(100) == 0


def test_reclaim_mirrors_keeps_backups_flowing_in_the_same_situation():
    c = new_cache(device_pages=32, host_pages=16, host_eviction="reclaim_mirrors")
    for k in range(8):
        put(c, [100 * k + i for i in range(4)])
        settle(c)
    assert c.counters.failed_host_allocations == 0 and c.counters.backup_failures == 0
    assert c.counters.host_mirror_reclaimed_pages == 16


# --------------------------------------------------------------- #27562 / #27631 nested write-back


def nested_write_back_setup():
    """write_back; device and host both 3 pages. C = [1, 2, 3] was written back (H-only, the whole
    host); E = [7, 8, 9] fills the device. Loading C back must evict E, whose write-back finds the
    host full and calls evict_host, for which C (an H-only leaf) is the only candidate."""
    c = new_cache(page_size=4, device_pages=3, host_pages=3, write_policy="write_back")
    put(c, [1, 2, 3])
    put(c, [7, 8, 9])
    chain, other = node_at(c, [1, 2, 3]), node_at(c, [7, 8, 9])
    assert chain.state() == "H" and other.state() == "D" and c.host.available() == 0
    assert chain in c._host_cands  # the nested evict_host would take it if it were not pinned
    return c, chain, other


def test_27562_load_back_pins_the_chain_host_pages_against_a_nested_write_back_eviction():
    c, chain, other = nested_write_back_setup()
    assert c.load_back(chain) is chain
    assert chain.state() == "D+H" and chain.host_ref == 0
    assert other.parent is None and c.counters.device_dropped_subtree_pages == 3  # E had no room on host
    settle(c)
    assert c.match_prefix([1, 2, 3]).device_hit_pages == 3


def test_27562_without_the_pin_the_nested_eviction_frees_the_chain():
    """The same case with protect_host disabled: the chain's host pages are freed under the load."""
    c, chain, _other = nested_write_back_setup()
    c.protect_host = lambda node: None
    c.release_host = lambda node: None
    with pytest.raises(CacheStateError, match="lost its host copy during the allocation"):
        c.load_back(chain)
    # The cause: the nested evict_host reclaimed the very host copy being loaded (the chain was the only
    # H-only leaf), so the load walks a chain whose host pages are gone.
    assert chain.host_value is None and chain.parent is None


# ------------------------------------------------------------------------------------------ #27108


def test_27108_write_back_with_a_failing_backup_falls_back_and_leaks_nothing():
    """Several victims (HiRadixCache's staged write-back): the first is staged to host, the second no
    longer fits, so the staged one is flushed and the second dropped without backup. Every page is
    accounted for."""
    c = new_cache(device_pages=16, host_pages=3, write_policy="write_back", write_back_eviction="staged")
    put(c, [1, 2, 3])
    put(c, [5, 6, 7, 8])
    c.match_prefix([5, 6, 7, 8])  # [1, 2, 3] is the older victim
    assert c.evict(7) == 7
    assert node_at(c, [1, 2, 3]).state() == "H"
    assert 5 not in c.root.children
    assert c.counters.device_demoted_pages == 3 and c.counters.device_dropped_subtree_pages == 4
    assert c.counters.backup_failures == 1
    assert c.device.available() == 16 and c.host.available() == 0
    settle(c)
    # Later victims can reuse the host once the H-only copy is evicted from host.
    put(c, [9, 10])
    assert c.evict(2) == 2 and node_at(c, [9, 10]).state() == "H" and 1 not in c.root.children
    settle(c)


def test_27108_unified_write_back_demotes_each_victim_at_once_and_leaks_nothing():
    """The same victims in the unified tree core: [1, 2, 3] is written and demoted at once, unpinned,
    so making room for [5, 6, 7, 8] (4 pages, host 3) deletes it from host; 3 pages are still short,
    the backup fails and [5, 6, 7, 8] is dropped. Both are lost, as upstream; nothing leaks."""
    c = new_cache(device_pages=16, host_pages=3, write_policy="write_back", write_back_eviction="unified")
    put(c, [1, 2, 3])
    put(c, [5, 6, 7, 8])
    c.match_prefix([5, 6, 7, 8])
    assert c.evict(7) == 7
    assert c.root.children == {}
    assert c.counters.device_demoted_pages == 3 and c.counters.host_deleted_pages == 3
    assert c.counters.device_dropped_subtree_pages == 4 and c.counters.backup_failures == 1
    assert c.device.available() == 16 and c.host.available() == 3
    settle(c)


# ------------------------------------------------------------------------------------------ #30106


def test_30106_prefetch_never_anchors_host_only_pages_under_a_device_only_node():
    c = new_cache(page_size=16, device_pages=64, host_pages=128, storage=True, write_policy="write_through_selective")
    put(c, [1, 2])  # one insert-hit: D-only under the selective policy
    anchor = node_at(c, [1, 2])
    assert anchor.state() == "D"
    keys = list(range(100, 120))
    c.storage.put(chain_hashes(None, [1, 2, *keys])[2:])
    assert c.prefetch("r", anchor, keys, 0.0) is None
    assert c.counters.prefetch_unbacked_anchor == 1 and c.prefetch_occupied_pages == 0
    check(c)


def test_30106_attach_point_that_lost_its_host_copy_meanwhile():
    """The anchor had a host copy when the prefetch started; by the time it ends, another request has
    inserted a device-only node on the prefetched path. Attaching the rest under it would leave
    H-only pages under a D-only parent (#30106): the pages are freed instead."""
    c = new_cache(
        page_size=16,
        device_pages=64,
        host_pages=128,
        storage=True,
        write_policy="write_through_selective",
        prefetch_policy="wait_complete",
    )
    put(c, [1, 2])
    put(c, [1, 2])  # second insert-hit: backed up
    settle(c)
    anchor = node_at(c, [1, 2])
    assert anchor.state() == "D+H"
    keys = list(range(100, 120))
    c.storage.put(chain_hashes(anchor.hashes[-1], keys))
    assert c.prefetch("r", anchor, keys, 0.0) is not None
    assert anchor.host_ref == 1
    assert c.prefetch_query("r") == 20
    c.drain()
    put(c, [1, 2, *keys[:4]])  # a D-only node on the path (one insert-hit)
    assert node_at(c, [1, 2, *keys[:4]]).state() == "D"
    assert c.check_prefetch_progress("r", 0.0)
    for node in c.iter_nodes():
        if node.state() == "H":
            assert node.parent is c.root or node.parent.host_value is not None
    assert c.host.used() == 2 and anchor.host_ref == 0
    settle(c)


# ------------------------------------------------------------------ candidate refresh of the parent


def test_a_child_backed_up_takes_its_parent_out_of_the_host_candidates():
    """Found by fresh random examples, missed by the fixed ones: under reclaim_mirrors a D+H node with
    no backed-up child is a host leaf; once its child gets a host copy it is not, and the candidate set
    must say so at once (else evict_host could free a parent under a backed-up child). The staged
    write_back keeps a written-back node D+H without registering it as a full duplicate, so the
    backups can be driven by hand."""
    c = new_cache(
        page_size=1,
        device_pages=16,
        host_pages=16,
        write_policy="write_back",
        write_back_eviction="staged",
        host_eviction="reclaim_mirrors",
    )
    put(c, [1, 2])
    put(c, [1, 2, 3])
    parent, child = node_at(c, [1, 2]), node_at(c, [1, 2, 3])
    assert c.write_backup(parent, write_back=True) == 2
    settle(c)
    assert parent in c._host_cands and child not in c._host_cands
    assert c.write_backup(child, write_back=True) == 1
    assert parent not in c._host_cands and child in c._host_cands
    settle(c)


# ------------------------------------------------- H-only pages under the boundary rule (deep profile)


@pytest.mark.parametrize("rule", ["boundary", "evicted_only"])
def test_prefetch_never_attaches_h_only_pages_under_a_device_only_node(rule):
    """Found by the deep hypothesis profile: with the boundary rule (H-only nodes must hang under a host
    copy) and write_through_selective (a first insert makes no host copy), a storage prefetch below a
    D-only node attached H-only pages there. Every rule now asks the host rule's one predicate, so the
    prefetch is revoked, as it already was for the prefix-closed rules."""
    c = new_cache(
        page_size=1,
        device_pages=8,
        host_pages=8,
        write_policy="write_through_selective",
        host_eviction=rule,
        storage=True,
        prefetch_threshold_tokens=1,
    )
    put(c, [1, 2])
    settle(c)
    anchor = node_at(c, [1, 2])
    assert anchor.state() == "D"
    c.storage.put(chain_hashes(None, [1, 2, 3, 4]))
    assert c.prefetch("r1", anchor, [3, 4], 0.0) is None
    assert c.counters.prefetch_unbacked_anchor == 1
    settle(c)


def test_a_backup_never_reclaims_its_own_parents_mirror():
    """Found by the deep hypothesis profile: reclaim_mirrors, write_through, host 6 pages full. A request
    for [0, 1, 0] re-attaches [1] (H-only) as D+H and backs up the new [0] below it; the host eviction
    that makes room took [1]'s copy (then a D+H host leaf, the only candidate), leaving a backed-up child
    under a parent without host copy. The parent's copy is now pinned while its child allocates."""
    from hicache_sim.instant import run_instant
    from hicache_sim.workloads import Request

    cfg = CacheConfig(
        page_size=1,
        device_pages=8,
        host_pages=6,
        write_policy="write_through",
        host_eviction="reclaim_mirrors",
        strict=True,
    )
    prompts = [(0,), (0, 1), (0, 0, 0, 0), (1, 0, 1, 0), (0, 1, 0)]
    reqs = [Request(f"q{i}", float(i), len(k), 1, k) for i, k in enumerate(prompts)]
    res = run_instant(cfg, reqs, chunk_pages=None, reserve_last_token=False, check_invariants=True)
    assert res.cache.counters.backup_failures == 0


def test_reclaim_mirrors_never_reclaims_the_parent_copy_a_write_through_backup_hangs_under():
    """Host full with the parent's mirror, the only candidate: making room for the child's backup must
    not reclaim it (the child would be backed up under a parent without host copy, breaking the
    prefix-closed host set); the backup fails instead."""
    c = new_cache(device_pages=16, host_pages=2, host_eviction="reclaim_mirrors")
    put(c, [1, 2])
    settle(c)
    put(c, [1, 2, 3, 4])
    parent, child = node_at(c, [1, 2]), node_at(c, [1, 2, 3, 4])
    assert parent.state() == "D+H" and child.state() == "D"
    assert c.counters.backup_failures == 1 and c.counters.host_mirror_reclaimed_pages == 0
    settle(c)


def test_boundary_under_write_back_keeps_h_only_nodes_under_a_host_copy(conversation_trace):
    """boundary inherits from reclaim_mirrors; when reclaim_mirrors took up the unified write_back's
    full-duplicate reclaim, boundary did too, and that reclaim dropped the host copy of D+H nodes with
    H-only children (invariant 15 at the end of this run; 23 in others). boundary orders duplicates
    itself, among host leaves only."""
    from hicache_sim.instant import run_instant

    cfg = CacheConfig(512, 2000, 1000, write_policy="write_back", host_eviction="boundary")
    res = run_instant(cfg, conversation_trace[:2500])
    check(res.cache)
