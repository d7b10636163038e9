"""The node pre-flight (issue 29 item 4): what SGLang 0.5.23 pins on one node's host memory, against the
node, in ``validate``, ``from-sglang`` and ``advise``. The public cases carry their numbers; every
expected figure is derived here from SGLang's rules, not read back from the code under test."""

from __future__ import annotations

import pytest
from conftest import GLM5, invoke

from hicache_sim.scenario import build_scenario, resolve
from hicache_sim.scenario.preflight import largest_host_gb, node_check, rank_pools

GIB = 1 << 30
RESERVE = 10 * GIB  # SGLang's HICACHE_HOST_MEMORY_RESERVE_BYTES

# GLM-5.2 (conftest.GLM5): the indexer-to-KV ratio is per layer, so the layer count cancels.


def resolved(model, hardware: dict, cache: dict):
    data = {"name": "t", "mode": "instant", "model": model, "hardware": hardware, "cache": cache}
    return resolve(build_scenario(data, "t"))


def test_the_issue_example_overcommits_a_256_gib_node():
    """Issue 29: ``validate`` said ok to 50 GB per rank x 8 ranks on a 256 GiB node. 8 pools of 50 GB
    (plus one page each) are 372.5 GiB: more than the node, and more than each rank's share SGLang checks
    ((256 - 10) / 8 GiB), so 0.5.23 refuses to start. Its auto-sizing takes 0.8 of that share, less 5 %."""
    r = resolved(
        "llama-3.1-70b", {"gpu": "h200", "tp": 8, "host_memory_gib": 256}, {"page_size": 64, "host_size_gb": 50}
    )
    check = node_check(r)
    per_rank = (int(50e9 // r.bytes_per_token) // 64 + 1) * 64 * r.bytes_per_token
    assert check.per_rank_bytes == per_rank
    assert check.pinned_bytes == 8 * per_rank
    assert check.overcommits and check.guard() == "refused"
    ratio = int((256 * GIB - RESERVE) // 8 * 0.8) * 0.95 / ((r.device_tokens + 64) * r.bytes_per_token)
    assert check.auto_ratio == pytest.approx(ratio)
    text = " ".join(check.warnings())
    assert "overcommitted" in text and f"{8 * per_rank / GIB:.1f} GiB pinned" in text
    assert "refuses to start" in text and f"{(256 * GIB - RESERVE) / 8 / GIB:.1f} GiB" in text
    assert f"ratio {ratio:.3f}" in text


def test_ratio_2_5_asks_4_8_tb_of_a_3_tb_node():
    """SemiAnalysisAI/InferenceX#2777 review: GLM-5.2 at --hicache-ratio 2.5 puts ~4.8 TB pinned on a node
    of 3,095,781 MiB of DRAM (its runners.yaml). 8 ranks of a 240 GB device pool (what 4.8 TB at 2.5
    implies) overcommit the node; auto-sizing's ratio is the node's share over the device bytes."""
    node_gib = 3_095_781 / 1024
    bpt = 40960  # llama-3.1-70b at tp 8: one KV head of 128 x 80 layers x K and V x 2 bytes
    device = 240_000_000_000 // bpt // 64 * 64
    r = resolved(
        "llama-3.1-70b",
        {"gpu": "h200", "tp": 8, "host_memory_gib": node_gib},
        {"page_size": 64, "device_tokens": device, "host_ratio": 2.5},
    )
    assert r.bytes_per_token == bpt
    check = node_check(r)
    assert check.pinned_bytes / 1e12 == pytest.approx(4.8, abs=0.01)
    assert check.overcommits and check.guard() == "refused"
    share = int((int(node_gib * GIB) - RESERVE) // 8 * 0.8) * 0.95
    assert check.auto_ratio == pytest.approx(share / ((device + 64) * bpt))
    assert 1.2 < check.auto_ratio < 1.3


def test_dsa_indexer_pool_rides_beside_the_kv_pool():
    """sgl-project/sglang#29263: GLM-5.2 at TP 4 with --hicache-size 150: each rank allocated 150.00 GB of
    host KV, then ~34.38 GB of DSA indexer keys (the size sizes the KV pool only; #30581 proposed making
    it the total). The indexer stores 128 one-byte keys and one fp32 scale per 128 per token and layer
    (132 B) against MLA's 576 fp8 bytes: 150 x 132 / 576 = 34.375 GB."""
    r = resolved(GLM5, {"gpu": "b200", "tp": 4}, {"page_size": 64, "host_size_gb": 150, "device_tokens": 10**6})
    kv, indexer = rank_pools(r)
    assert (kv.name, round(kv.bytes / 1e9, 2)) == ("KV", 150.00)
    assert (indexer.name, round(indexer.bytes / 1e9, 2)) == ("DSA indexer", 34.38)
    assert node_check(r).pinned_bytes == 4 * (kv.bytes + indexer.bytes)


def test_auto_sizing_counts_the_indexer_rows():
    """Auto-sizing (sgl-project/sglang#40135, hicache_auto_size.py) divides the budget by every device
    byte the host mirrors: with a DSA indexer the ratio is lower by the indexer's share of a token."""
    hw = {"gpu": "b200", "tp": 4, "host_memory_gib": 256}
    with_ix = resolved(GLM5, hw, {"page_size": 64, "device_tokens": 10**6})
    without = resolved({**GLM5, "index_head_dim": 0}, hw, {"page_size": 64, "device_tokens": 10**6})
    assert without.host_tokens < 2 * without.device_tokens  # the node, not the default ratio 2, decides
    ratio = with_ix.host_tokens / without.host_tokens
    assert ratio == pytest.approx(576 / (576 + 132), rel=1e-4)


def test_ranks_that_pin_one_after_another_may_be_refused():
    """sgl-project/sglang#38156 / #38157: TP 8 on a 1772 GiB host with --hicache-size 176 (164 GiB of KV
    per rank) starts intermittently: 8 pools fit at once, but a rank checking after k peers pinned sees
    available - k pools and still divides by 8; the last one passes only if 15 x 164 <= 1772 - 10 GiB."""
    r = resolved(
        "deepseek-r1", {"gpu": "h200", "tp": 8, "host_memory_gib": 1772}, {"page_size": 64, "host_size_gb": 176}
    )
    check = node_check(r)
    assert round(check.pools[0].bytes / GIB) == 164
    assert not check.overcommits
    assert check.guard() == "order"
    assert any("sgl-project/sglang#38156" in w for w in check.warnings())
    # Enough memory for 15 pools: every order passes.
    roomy = resolved(
        "deepseek-r1", {"gpu": "h200", "tp": 8, "host_memory_gib": 2500}, {"page_size": 64, "host_size_gb": 176}
    )
    assert node_check(roomy).guard() == "ok" and node_check(roomy).warnings() == []


def test_tp4_boundary_between_30_and_40_gb_per_rank():
    """The shape of sgl-project/sglang#14282 (Llama-3.1-8B, TP 4, 256 GB node: --hicache-size 40 failed to
    start, 30 started; it ran 0.5.3). Under 0.5.23's check the same boundary falls there when the ranks
    pin one after another: 7 x 37.25 GiB > 246 GiB, 7 x 27.94 GiB < 246 GiB."""
    verdicts = {}
    for gb in (30, 40):
        r = resolved("llama-3.1-8b", {"gpu": "a10", "tp": 4, "host_memory_gib": 256}, {"host_size_gb": gb})
        verdicts[gb] = node_check(r).guard()
    assert verdicts == {30: "ok", 40: "order"}


def test_data_parallel_replicas_and_nodes_are_counted():
    """--dp-size without DP attention starts dp full groups on the node, each with its own pools, and
    SGLang's check divides by one group's ranks; --nnodes spreads one group's ranks over the nodes."""
    hw = {"gpu": "h200", "tp": 1, "dp": 8, "host_memory_gib": 1024}
    r = resolved("llama-3.1-8b", hw, {"page_size": 64, "host_ratio": 2})
    check = node_check(r)
    assert (check.ranks_on_node, check.guard_ranks) == (8, 1)
    assert check.overcommits and check.guard() == "ok"
    assert any("one replica's 1 rank(s)" in w for w in check.warnings())
    # The auto-sizing it suggests keeps all 8 replicas within the node: fraction 0.8 / 8.
    assert check.auto_fraction == pytest.approx(0.1)
    assert 8 * check.auto_pool_bytes <= 0.1 * (1024 * GIB - RESERVE) * 8 * 1.0001
    spread = resolved("llama-3.1-8b", {"gpu": "h200", "tp": 8, "nnodes": 2}, {"page_size": 64, "host_size_gb": 10})
    assert node_check(spread).ranks_on_node == 4


def test_largest_host_size_is_the_last_whole_gb_that_fits():
    r = resolved("llama-3.1-8b", {"gpu": "h200", "tp": 8, "host_memory_gib": 256}, {"page_size": 64})
    cap = largest_host_gb(r)

    def needs(gb: int) -> int:
        tokens = (int(gb * 1e9 // r.bytes_per_token) // 64 + 1) * 64
        return 8 * tokens * r.bytes_per_token + RESERVE

    assert needs(cap) <= 256 * GIB < needs(cap + 1)
    assert largest_host_gb(resolved("llama-3.1-8b", {"gpu": "h200"}, {"page_size": 64})) is None


def test_validate_prints_the_node_check(tmp_path):
    import yaml

    sc = tmp_path / "s.yaml"
    data = {
        "name": "s",
        "mode": "instant",
        "model": "llama-3.1-70b",
        "hardware": {"gpu": "h200", "tp": 8},
        "cache": {"page_size": 64, "host_size_gb": 50},
    }
    sc.write_text(yaml.safe_dump(data))
    small = invoke("validate", sc, "--node-memory", "256")
    assert small.exit_code == 0, small.output
    assert "valid, but not on this node" in small.output.splitlines()[0]
    assert "does NOT fit" in small.output and "overcommitted" in small.output
    assert "SGLang 0.5.23 refuses to start" in small.output
    big = invoke("validate", sc, "--node-memory", "2048")
    assert "fits" in big.output and "overcommitted" not in big.output and ": ok (" in big.output
    unknown = invoke("validate", sc)
    assert "372.5 GiB pinned" in unknown.output and "hardware.host_memory_gib or --node-memory" in unknown.output


def test_from_sglang_reads_dp_and_nnodes_and_checks_the_node():
    from hicache_sim.sglang import from_command, to_command

    line = (
        "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --dp-size 8 --nnodes 1 "
        "--enable-hierarchical-cache --hicache-ratio 2 --page-size 64"
    )
    conv = from_command(line, node_memory_gib=1024)
    assert (conv.scenario.hardware.dp, conv.scenario.hardware.host_memory_gib) == (8, 1024)
    assert any("overcommitted" in n for n in conv.notes)
    tokens, _ = to_command(conv.scenario)
    assert tokens[tokens.index("--dp-size") + 1] == "8"
    attention = from_command(line + " --enable-dp-attention --tp 8")
    assert attention.scenario.hardware.dp == 1


def test_advise_caps_its_grid_at_what_the_node_holds():
    from hicache_sim.advise import setup
    from hicache_sim.scenario import ScenarioError

    data = {
        "name": "a",
        "mode": "instant",
        "model": "llama-3.1-8b",
        "hardware": {"gpu": "h200", "tp": 8, "host_memory_gib": 256},
        "cache": {"page_size": 64},
        "workload": {"kind": "trace", "trace": {"path": "builtin:mooncake/conversation_trace.jsonl", "limit": 10}},
    }
    st = setup(data, "a.yaml", [], None, None)
    cap = largest_host_gb(resolve(build_scenario(data, "a.yaml")))
    assert max(st.sizes_gb) == cap
    assert any(f"capped at {cap} GB per rank" in n for n in st.notes)
    with pytest.raises(ScenarioError, match=f"--host-sizes-gb: {cap + 1} GB per rank is more than the node holds"):
        setup(data, "a.yaml", [], None, [cap + 1])


#: Each registered side pool's bytes on one rank, derived by hand for GLM5 at TP 4 with a KV host pool of
#: 1000 pages of 64 tokens (a new entry without its row fails the guard below). GLM5 runs no speculative
#: draft here (its draft pools by hand: tests/test_speculative.py).
EXPECTED_SIDE_POOL_BYTES = {"DSA indexer": (1000 + 1) * 64 * (128 + 4) * 78, "draft": 0}


def test_every_side_pool_is_covered():
    from hicache_sim.scenario.preflight import SIDE_POOLS

    assert set(SIDE_POOLS.names()) == set(EXPECTED_SIDE_POOL_BYTES)
    r = resolved(GLM5, {"gpu": "b200", "tp": 4}, {"page_size": 64, "host_tokens": 64_000, "device_tokens": 10**6})
    for name, expected in EXPECTED_SIDE_POOL_BYTES.items():
        assert SIDE_POOLS.get(name).bytes_per_rank(r, r.host_tokens) == expected


def test_new_fields_at_their_defaults_leave_the_written_scenario_as_it_was():
    """hardware.dp / nnodes at 1 and model.index_head_dim unset are not written beside results, so a
    committed result's scenario.yaml made before them is what a rerun writes; set, they are written."""
    from hicache_sim.scenario import scenario_dump

    plain = scenario_dump(build_scenario({"name": "x", "model": "llama-3.1-8b"}, "x"))
    assert not {"dp", "nnodes"} & set(plain["hardware"]) and "index_head_dim" not in plain["model"]
    data = {"name": "x", "model": {"preset": "llama-3.1-8b", "index_head_dim": 128}, "hardware": {"dp": 2, "tp": 2}}
    given = scenario_dump(build_scenario({**data, "hardware": {**data["hardware"], "nnodes": 2}}, "x"))
    assert (given["hardware"]["dp"], given["hardware"]["nnodes"], given["model"]["index_head_dim"]) == (2, 2, 128)
