"""The host layouts of SGLang 0.5.23 beyond layer_first / page_first / page_first_direct
(``--hicache-mem-layout page_head`` and ``page_first_kv_split``): what one page of one layer moves,
which io backends and models SGLang copies them with (pool_host/mha.py, mla.py and the sgl-kernel
kvcacheio kernels they call), and the refusals where SGLang fails."""

from __future__ import annotations

import pytest
from test_sim_support import PAGE, req, resolved

from hicache_sim.core import ConfigError
from hicache_sim.hardware.linkmodel import segments_for
from hicache_sim.hardware.presets import HOST_LAYOUTS, LINKS, effective_io
from hicache_sim.sglang import from_command, to_command
from hicache_sim.sglang.flags import parse_command
from hicache_sim.sim import World
from hicache_sim.workloads.synthetic import Workload

LLAMA = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --enable-hierarchical-cache"


def test_page_head_moves_one_piece_per_token_head_and_k_or_v():
    # 3 pages of 64 tokens, 32 layers, 2 KV heads a rank, K and V: the page-head kernel copies each
    # (token, head, layer) of K and of V on its own; page_first and page_first_direct move one run per
    # page, layer and K / V (page_first_direct's kv dimension is outermost: K and V lie apart).
    assert segments_for(3, "page_head", 32, 2, page_size=64, heads=2) == 3 * 32 * 64 * 2 * 2
    assert segments_for(3, "page_first", 32, 2, page_size=64, heads=2) == 3 * 32 * 2
    assert segments_for(3, "page_first_direct", 32, 2, page_size=64, heads=2) == 3 * 32 * 2
    assert segments_for(3, "page_first_direct", 32, 1, page_size=64, heads=1) == 3 * 32  # MLA: one buffer
    assert segments_for(3, "page_head", 32, 2, layers=1, page_size=64, heads=2) == 3 * 64 * 2 * 2


def test_a_page_head_backup_takes_its_pieces_time_in_the_timed_world():
    """llama-3.1-8b at tp 1 (8 KV heads of 128 x bf16): one 8-page D2H backup moves 8 x 32 layers x 64
    tokens x 8 heads x 2 pieces of 256 B under page_head, at the kernel curve's efficiency for 256 B."""
    durations = {}
    for layout in ("page_first", "page_head"):
        r = resolved(cache={"mem_layout": layout})
        assert (r.mem_layout, r.io_backend, r.kv_heads_per_rank) == (layout, "kernel", 8)
        world = World(r, Workload([req("a", 0.0, range(1, 9))]))
        world.run()
        (d2h,) = [t for t in world.log.records() if t["kind"] == "d2h"]
        pieces = segments_for(8, layout, 32, 2, page_size=PAGE, heads=8)
        assert d2h["bytes"] / pieces == {"page_first": PAGE * 8 * 128 * 2, "page_head": 128 * 2}[layout]
        assert d2h["duration_s"] == pytest.approx(r.links["d2h"].time(d2h["bytes"], pieces))
        durations[layout] = d2h["duration_s"]
    assert durations["page_head"] > 2 * durations["page_first"]
    # The page_head pieces run at the page_first kernel curve (the same one-warp item copy).
    gen5 = LINKS.get("gen5").kernel
    assert gen5.half_efficiency("page_head") == gen5.half_efficiency("page_first")


@pytest.mark.parametrize(
    ("io", "layout", "attention", "field", "fragment"),
    [
        ("direct", "page_head", "mha", "cache.io_backend", "direct cannot copy the page_head host layout"),
        ("kernel", "page_head", "mla", "cache.mem_layout", "only for MHA host pools"),
        ("kernel", "page_first_kv_split", "mla", "cache.mem_layout", "kernel_ascend"),
        ("direct", "page_first_kv_split", "mha", "cache.mem_layout", "kernel_ascend"),
    ],
)
def test_layouts_sglang_cannot_copy_as_asked_are_refused(io, layout, attention, field, fragment):
    with pytest.raises(ConfigError, match=fragment) as err:
        effective_io(io, layout, attention=attention)
    assert err.value.field == field


def test_the_layouts_sglang_runs_are_kept_and_rewrites_still_apply():
    assert effective_io("kernel", "page_head")[:2] == ("kernel", "page_head")
    # Mooncake rewrites only layer_first in 0.5.23; 0.5.2 forced page_first whatever was asked.
    assert effective_io("kernel", "page_head", "mooncake", "2026")[:2] == ("kernel", "page_head")
    assert effective_io("kernel", "page_head", "mooncake", "2025")[:2] == ("kernel", "page_first")
    assert set(HOST_LAYOUTS.names()) == {*parse_choices("--hicache-mem-layout")}


@pytest.mark.parametrize(
    ("asked", "storage", "era", "runs", "note"),
    [
        (("kernel", "layer_first"), "", "2026", ("kernel", "layer_first"), ""),
        (("direct", "layer_first"), "", "2026", ("direct", "layer_first"), ""),
        (("kernel", "page_first"), "", "2026", ("kernel", "page_first"), ""),
        (
            ("kernel", "page_first_direct"),
            "",
            "2026",
            ("direct", "page_first_direct"),
            "kernel io backend does not support page_first_direct: SGLang uses direct",
        ),
        (
            ("direct", "page_first"),
            "",
            "2026",
            ("direct", "page_first_direct"),
            "direct io backend with page_first: SGLang uses page_first_direct",
        ),
        # 0.5.23's page-object stores read no layer_first pool: each backend's own page layout instead.
        (
            ("kernel", "layer_first"),
            "mooncake",
            "2026",
            ("kernel", "page_first"),
            "mooncake storage backend: SGLang uses kernel io with page_first host layout",
        ),
        (
            ("direct", "layer_first"),
            "npu_memcache",
            "2026",
            ("direct", "page_first_direct"),
            "npu_memcache storage backend: SGLang uses direct io with page_first_direct host layout",
        ),
        (("direct", "page_first_direct"), "mooncake", "2026", ("direct", "page_first_direct"), ""),
        # A layout rewrite and a store's: both notes, in SGLang's order.
        (
            ("direct", "page_first"),
            "mooncake",
            "2025",
            ("kernel", "page_first"),
            "direct io backend with page_first: SGLang uses page_first_direct; "
            "mooncake storage backend: SGLang uses kernel io with page_first host layout",
        ),
    ],
)
def test_sglangs_io_backend_and_layout_rewrites(asked, storage, era, runs, note):
    """What SGLang 0.5.23 (0.5.2 for the 2025 era) runs when asked for an io backend and host layout:
    the layout's own rewrites, then the store's (``effective_io``, from the layouts' and io backends'
    registries)."""
    assert effective_io(*asked, storage, era) == (*runs, note)


def parse_choices(flag: str) -> tuple[str, ...]:
    from hicache_sim.sglang.flags import known_flags

    return tuple(known_flags()[0][flag].choices)


def test_from_sglang_reads_page_head_and_sglang_args_writes_it_back():
    conv = from_command(f"{LLAMA} --hicache-mem-layout page_head")
    assert conv.data["cache"]["mem_layout"] == "page_head"
    args = parse_command(to_command(conv.scenario)[0]).args
    assert args["--hicache-mem-layout"] == "page_head"
