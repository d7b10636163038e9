"""The pools beside the KV pool travel with every transfer (issue 29 item 4 follow-up): SGLang 0.5.23's
cache controller moves a page's packed MTP draft rows, its DSA indexer keys and a draft's own host pool in
the same D2H backup, H2D load-back and storage op as its KV (``hybrid_cache_controller.py``
``_transfer_num_bytes``: "across all pools, including draft piggyback"), and a store keeps them beside the
page's KV (docs/reference/sglang-speculative.md, "Transfers and storage"). Every figure is derived here by
hand from the models' shapes, not read back from the code under test."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import GLM5, node_at, put, settle
from test_sim_support import PAGE, req, resolved

from hicache_sim.core import CacheConfig, HiCache, TransferKind
from hicache_sim.scenario import build_scenario, resolve
from hicache_sim.sim import World
from hicache_sim.workloads.synthetic import Workload

# DeepSeek-V3 at TP 8, bf16 KV: MLA's latent 512 + rope 64 over 61 layers; its one MTP layer packed into
# the same host rows (pool_host/mla.py: layer_num = target + draft layers).
DSV3_KV = (512 + 64) * 61 * 2  # 70272
DSV3_MTP = (512 + 64) * 1 * 2  # 1152
NEXTN = {"preset": "deepseek-v3", "speculative": {"algorithm": "nextn"}}

# Llama-3.1-8B at TP 1 (8 KV heads of 128 over 32 layers, bf16) with an EAGLE3 head of one Llama layer:
# the head's rows sit in a host pool of its own, one slot per KV host slot.
LLAMA_KV = 2 * 32 * 8 * 128 * 2  # 131072
EAGLE3_ROW = 2 * 1 * 8 * 128 * 2  # 4096
EAGLE3 = {
    "preset": "llama-3.1-8b",
    "speculative": {
        "algorithm": "eagle3",
        "num_layers": 1,
        "mtp": False,
        "attention": "mha",
        "num_kv_heads": 8,
        "head_dim": 128,
        "params_b": 0.5,
    },
}

# GLM-5.2 (conftest.GLM5): its KV and indexer bytes per token, the same on every TP rank.
GLM5_KV = (512 + 64) * 78
GLM5_INDEXER = (128 + 4) * 78


def _instant(model, hardware: dict, cache: dict | None = None):
    data = {"name": "t", "mode": "instant", "model": model, "hardware": hardware}
    data["cache"] = {"page_size": 64, "device_tokens": 64 * 1000, "host_tokens": 64 * 2000, **(cache or {})}
    return resolve(build_scenario(data, "t"))


def _load_back(config: CacheConfig):
    """A three-page H-only chain loaded back (as tests/test_core_loadback.py builds it), on a small cache
    with the resolved scenario's page and transfer bytes: the D2H backups and the H2D load."""
    c = HiCache(dataclasses.replace(config, device_pages=16, host_pages=16, strict=True))
    put(c, [1, 2])
    put(c, [1, 2, 3, 4, 5])
    backups = [t for t in c.take_transfers() if t.kind is TransferKind.D2H]
    for t in backups:
        c.complete(t)
    settle(c)
    leaf = node_at(c, [1, 2, 3, 4, 5])
    c.inc_lock_ref(node_at(c, [1, 2]))
    assert c.evict(3) == 3
    c.dec_lock_ref(node_at(c, [1, 2]))
    assert c.load_back(leaf) is leaf
    (load,) = c.take_transfers()
    assert load.kind is TransferKind.H2D and load.pages == 3
    return backups, load


def test_a_nextn_load_back_moves_the_packed_mtp_rows_with_the_kv():
    """DeepSeek-V3 NEXTN: the host pool's rows hold 61 target layers and the MTP layer, and SGLang's load
    copies both (``_l2_load_transfers``, ``is_draft``): 3 pages move 3 x 64 x (70272 + 1152) bytes, the
    backups of those 5 pages 5 x 64 x the same; without NEXTN the KV alone."""
    r = _instant(NEXTN, {"gpu": "h200", "tp": 8})
    plain = _instant("deepseek-v3", {"gpu": "h200", "tp": 8})
    assert r.bytes_per_token == plain.bytes_per_token == DSV3_KV  # the KV pool's own row is unchanged
    backups, load = _load_back(r.cache)
    assert load.bytes == 3 * 64 * (DSV3_KV + DSV3_MTP)
    assert sum(t.bytes for t in backups) == 5 * 64 * (DSV3_KV + DSV3_MTP)
    _, plain_load = _load_back(plain.cache)
    assert plain_load.bytes == 3 * 64 * DSV3_KV


def test_an_eagle3_draft_pool_of_its_own_rides_with_each_copy_as_a_copy_of_its_own():
    """Llama-3.1-8B EAGLE3: the head's host pool (one layer, K and V of 8 heads) is a sidecar whose indices
    follow the KV pool's; each page's transfer carries its 4096 B a token too."""
    r = _instant(EAGLE3, {"gpu": "h200"})
    assert r.draft.own_pool_bpt == EAGLE3_ROW and r.bytes_per_token == LLAMA_KV
    _, load = _load_back(r.cache)
    assert load.bytes == 3 * 64 * (LLAMA_KV + EAGLE3_ROW)


def test_an_eagle3_backup_pays_the_draft_pools_pieces_and_launch_in_the_timed_world():
    """One 8-page D2H backup under page_first: the KV pool's kernel moves 8 pages x 32 layers x K and V
    pieces, the draft pool's own kernel (one more launch: a second L2Transfer in ``submit_device_to_host``)
    8 x 1 layer x K and V; the link's 10 us latency is paid once per launch."""
    r = resolved(model=EAGLE3, cache={"mem_layout": "page_first"})
    world = World(r, Workload([req("a", 0.0, range(1, 9))]))
    world.run()
    (d2h,) = [t for t in world.log.records() if t["kind"] == "d2h"]
    assert d2h["bytes"] == 8 * PAGE * (LLAMA_KV + EAGLE3_ROW)
    pieces = 8 * 32 * 2 + 8 * 1 * 2
    assert d2h["duration_s"] == pytest.approx(r.links["d2h"].time(d2h["bytes"], pieces, launches=2))
    layout = world.transport.layout
    assert layout.segments(8) == pieces and layout.layer_launches == 32 + 1


def test_a_nextn_load_copies_the_draft_layer_on_its_own_but_a_backup_does_not():
    """The packed MTP layer is one more per-layer copy of a load (61 + 1 launches, 62 pieces a page under
    page_first's one MLA piece per page and layer) and part of the backup kernel's layers (one launch)."""
    r = resolved(model=NEXTN, hardware={"tp": 8}, cache={"mem_layout": "page_first"})
    world = World(r, Workload([]))
    layout = world.transport.layout
    assert (layout.segments(5), layout.layer_launches, layout.copy_launches) == (5 * 62, 62, 1)
    plain = World(resolved(model="deepseek-v3", hardware={"tp": 8}, cache={"mem_layout": "page_first"}), Workload([]))
    assert (plain.transport.layout.segments(5), plain.transport.layout.layer_launches) == (5 * 61, 61)


def test_dsa_indexer_keys_ride_with_every_transfer():
    """GLM-5.2 at TP 4: each page's 64 tokens carry 78 layers of fp8 latent (576 B) and of indexer keys
    (132 B); the indexer is a pool of its own, copied page by page (one piece per page and layer)."""
    r = _instant(GLM5, {"gpu": "b200", "tp": 4})
    assert r.bytes_per_token == GLM5_KV
    backups, load = _load_back(r.cache)
    assert load.bytes == 3 * 64 * (GLM5_KV + GLM5_INDEXER)
    assert sum(t.bytes for t in backups) == 5 * 64 * (GLM5_KV + GLM5_INDEXER)
    (ix,) = r.side_copies
    assert (ix.name, ix.bytes_per_token, ix.layers, ix.pieces, ix.own_copy) == (
        "DSA indexer",
        GLM5_INDEXER,
        78,
        1,
        True,
    )


@pytest.mark.parametrize(
    ("model", "hardware", "kv", "side"),
    [
        (NEXTN, {"gpu": "h200", "tp": 8}, DSV3_KV, DSV3_MTP),
        (EAGLE3, {"gpu": "h200"}, LLAMA_KV, EAGLE3_ROW),
        (GLM5, {"gpu": "b200", "tp": 4}, GLM5_KV, GLM5_INDEXER),
    ],
    ids=["nextn", "eagle3", "dsa"],
)
def test_the_store_holds_fewer_pages_by_the_side_rows(model, hardware, kv, side):
    """A 100 GB file store keeps each page's KV and its side objects (HiCacheFile: ``KEY.bin`` and
    ``KEY.<pool>.bin``), so it holds 100e9 // (64 x (KV + side)) pages, not 100e9 // (64 x KV)."""
    r = _instant(model, {**hardware, "storage": {"capacity_gb": 100}}, {"storage_backend": "local_nvme"})
    assert r.cache.storage_capacity_pages == int(100e9 // (64 * (kv + side)))
    assert r.cache.storage_capacity_pages < int(100e9 // (64 * kv))
    assert r.transfer_page_bytes == 64 * (kv + side) and r.page_bytes == 64 * kv


def test_the_l3_verdict_reads_and_loads_the_side_rows_too():
    """The L3 verdict costs a stored prefix with the timed world's functions: a storage read of 8 pages
    moves 8 x 64 x (KV + MTP row) bytes, and the load-back behind it copies the MTP layer on its own."""
    from hicache_sim.output.l3 import LoadCosts

    r = resolved(model=NEXTN, hardware={"tp": 8}, cache={"storage_backend": "local_nvme"})
    costs = LoadCosts(r)
    assert costs.page_bytes == PAGE * (DSV3_KV + DSV3_MTP)
    assert costs.storage_read_s(8) == pytest.approx(costs.query_s + costs.storage.time(8 * costs.page_bytes, 1))
    assert costs._launches == 61 + 1


def test_the_replay_refuses_a_scenario_whose_transfers_move_side_pools():
    """The replay harness copies the KV pool only: a NEXTN scenario's logged transfers carry the MTP rows
    too, so timing the KV alone would calibrate against bytes it never moved; it says so in one line."""
    pytest.importorskip("torch")
    from hicache_sim.replay.pools import KVShape, ReplayError

    with pytest.raises(ReplayError, match=r"copies the KV pool only; .* also move MTP draft"):
        KVShape.from_resolved(_instant(NEXTN, {"gpu": "h200", "tp": 8}))
    assert KVShape.from_resolved(_instant("deepseek-v3", {"gpu": "h200", "tp": 8})).page_bytes == 64 * DSV3_KV


def test_every_host_side_pool_travels_with_the_transfers():
    """Guard: each pool the pre-flight counts beside the KV pool (``preflight.SIDE_POOLS``) has its transfer
    rule (``resolve.SIDE_COPIES``): a new side pool without one would be sized but never moved."""
    from hicache_sim.scenario.preflight import SIDE_POOLS

    models = ((NEXTN, {"gpu": "h200", "tp": 8}), (EAGLE3, {"gpu": "h200"}), (GLM5, {"gpu": "b200", "tp": 4}))
    moved = {c.name for model, hw in models for c in _instant(model, hw).side_copies}
    assert moved == set(SIDE_POOLS.names()) | {"MTP draft"}  # the packed draft is inside the KV pool's rows
