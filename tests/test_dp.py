"""Data-parallel ranks (issue 29 item 5): each DP rank has its own pools and radix tree, and SGLang 0.5.23's
DataParallelController spreads the requests over them (``--load-balance-method``).

Hit rates below are derived by hand from the chain of turns in ``_session``: turn k's prompt is
4k pages of 16 tokens (64k tokens) extending turn k - 1's, so a turn matches every page of an earlier
turn held on its rank (SGLang matches at most input - 1 tokens: 4k - 1 pages, more than 4(k - 1)).
"""

from __future__ import annotations

import pytest

from hicache_sim.core.routing import REFRESH_S, ROUTERS, RankLoad
from hicache_sim.runner import simulate
from hicache_sim.scenario import build_scenario, resolve, scenario_dump
from hicache_sim.workloads import Request
from hicache_sim.workloads.synthetic import Workload

PAGE = 16


def _session(turns: int = 4, gap_s: float = 5.0, first: int = 1) -> list[Request]:
    """One conversation: turn k (1-based) is 4k pages, the first 4(k - 1) of them turn k - 1's."""
    return [
        Request(f"t{k}", (k - 1) * gap_s, 64 * k, 4, tuple(range(first, first + 4 * k))) for k in range(1, turns + 1)
    ]


def _scenario(mode: str, dp: int = 1, method: str = "round_robin", storage: str = "none", **hw) -> object:
    data = {
        "name": "dp",
        "mode": mode,
        "model": "llama-3.1-8b",
        "hardware": {"gpu": "h200", "dp": dp, "load_balance_method": method, **hw},
        "cache": {"page_size": PAGE, "device_tokens": 64 * PAGE * 64, "host_ratio": 2.0, "storage_backend": storage},
        "scheduler": {"chunked_prefill_size": 8192, "max_running_requests": 64},
    }
    return build_scenario(data, "dp.yaml")


def _run(mode: str, requests: list[Request], **kw):
    return simulate(_scenario(mode, **kw), workload=Workload(requests), check_invariants=True)


# ------------------------------------------------------------------------------------ reuse split


@pytest.mark.parametrize("mode", ["instant", "timed"])
def test_round_robin_over_two_ranks_halves_a_sessions_reuse(mode):
    """DP 1: turns 2..4 hit 64 + 128 + 192 of 640 prompt tokens (0.6). DP 2, round robin: turns 1 and 3
    go to rank 0, 2 and 4 to rank 1, so turn 3 finds only turn 1's 64 tokens and turn 4 turn 2's 128:
    192 of 640 (0.3), rank 0 64 of 256, rank 1 128 of 384."""
    one = _run(mode, _session())
    assert one.summary["hit_rate"]["total"] == pytest.approx(384 / 640)
    assert "dp_ranks" not in one.summary and "dp_rank" not in one.request_columns
    two = _run(mode, _session(), dp=2)
    assert two.summary["hit_rate"]["total"] == pytest.approx(192 / 640)
    assert two.request_columns["dp_rank"].tolist() == [0, 1, 0, 1]
    ranks = two.summary["dp_ranks"]
    assert [r["requests"] for r in ranks] == [2, 2]
    assert [r["hit_rate"]["total"] for r in ranks] == pytest.approx([64 / 256, 128 / 384])
    assert two.summary["scopes"]["dp_ranks"].startswith("per data-parallel rank")
    if mode == "timed":
        assert all(r["ttft_s"]["p50"] > 0 for r in ranks)


def test_attention_dp_ranks_split_the_cache_the_same_way():
    """--attn-dp-size 2 of tp 2: two attention groups, each its own tree; same routing as dp 2."""
    res = _run("timed", _session(), attn_dp=2, tp=2)
    assert res.summary["hit_rate"]["total"] == pytest.approx(192 / 640)
    assert res.request_columns["dp_rank"].tolist() == [0, 1, 0, 1]


def test_attention_dp_divides_the_chunk_and_shards_kv_heads_over_the_group_only():
    """sglang 0.5.23 handle_data_parallelism: chunked_prefill_size // attn_dp, schedule conservativeness
    x 0.3; derive_attn_tp_size: Llama-3.1-8B's 8 KV heads over tp 8 / attn_dp 4 = 2 ranks: 4 heads each,
    4 x the bytes per token of plain tp 8 (1 head)."""
    from hicache_sim.sim.engine import SchedulerPolicy

    plain = resolve(_scenario("timed", tp=8))
    attn = resolve(_scenario("timed", tp=8, attn_dp=4))
    assert (plain.chunked_prefill_size, attn.chunked_prefill_size) == (8192, 2048)
    assert attn.bytes_per_token == 4 * plain.bytes_per_token
    assert SchedulerPolicy.from_resolved(attn).init_new_token_ratio == pytest.approx(0.7 * 0.3)
    assert SchedulerPolicy.from_resolved(plain).init_new_token_ratio == pytest.approx(0.7)
    assert attn.dp_ranks == 4 and plain.dp_ranks == 1


# -------------------------------------------------------------------------------- DP 1 unchanged


def test_one_rank_of_the_dp_world_is_the_single_world():
    """The DP world with one rank (the dispatcher, its records and rows) gives the rows World gives."""
    from hicache_sim.sim.dp import DPWorld
    from hicache_sim.sim.world import World

    r = resolve(_scenario("timed"))
    reqs = _session(turns=6, gap_s=0.01) + _session(turns=3, gap_s=0.02, first=1000)
    reqs = sorted(reqs, key=lambda q: q.arrival_s)
    reqs = [Request(f"r{i}", q.arrival_s, q.input_tokens, q.output_tokens, q.page_keys) for i, q in enumerate(reqs)]
    single = World(r, Workload(reqs), check_invariants=True).run()
    dp = DPWorld(r, Workload(reqs), check_invariants=True).run()
    assert dp.total.requests == single.requests
    # the counters but events: each rank's World starts an (empty) arrival process of its own
    assert {k: v for k, v in dp.total.counters.items() if k != "events"} == {
        k: v for k, v in single.counters.items() if k != "events"
    }
    assert dp.total.sim_time_s == single.sim_time_s


def test_dp_fields_at_their_defaults_leave_the_written_scenario_as_it_was():
    dumped = scenario_dump(_scenario("instant"))["hardware"]
    assert not {"dp", "attn_dp", "load_balance_method"} & set(dumped)
    given = scenario_dump(_scenario("instant", tp=2, attn_dp=2, method="total_tokens"))["hardware"]
    assert (given["attn_dp"], given["load_balance_method"]) == (2, "total_tokens")


# ------------------------------------------------------------------------------ routing methods


def test_every_routing_method_is_covered():
    """Each registered method has its hand-derived choices below (a new one without its row fails)."""
    assert set(ROUTERS.names()) == set(EXPECTED_PICKS)


#: Three ranks whose published load is (requests, tokens) (3, 10), (1, 500), (1, 40); four requests of
#: 100 tokens sent within one refresh interval (the speculative increments alone spread them).
EXPECTED_PICKS = {
    "round_robin": [0, 1, 2, 0],  # in turn, whatever the load
    "total_requests": [1, 2, 1, 2],  # fewest requests, lowest index on a tie: 1 -> (2), 2 -> (2), 1, 2
    "total_tokens": [0, 2, 0, 2],  # fewest tokens (requests on a tie): 10 -> 110, 40 -> 140, 110 -> 210, 140
}


@pytest.mark.parametrize("method", ROUTERS.names())
def test_routing_choices_by_hand(method):
    """Each method's choices for the same four requests (derivations beside ``EXPECTED_PICKS``)."""
    loads = [RankLoad(3, 10), RankLoad(1, 500), RankLoad(1, 40)]
    router = ROUTERS.get(method)(3)
    picks = [router.pick(100, 0.001 * i, lambda: loads) for i in range(4)]
    assert picks == EXPECTED_PICKS[method]


def test_load_aware_methods_read_the_ranks_again_after_the_refresh_interval():
    """Speculative increments hold between reads; a read after 20 ms replaces them with the live load."""
    loads = [RankLoad(0, 0), RankLoad(0, 0)]
    router = ROUTERS.get("total_requests")(2)
    assert [router.pick(1, t, lambda: loads) for t in (0.0, 0.005, 0.010)] == [0, 1, 0]
    loads = [RankLoad(5, 0), RankLoad(0, 0)]
    assert router.pick(1, 0.015, lambda: loads) == 1  # still counting: (2, 1) -> rank 1
    assert router.pick(1, REFRESH_S + 0.001, lambda: loads) == 1  # read (5, 0): rank 1
    assert router.requests == [5, 1]


def test_auto_is_round_robin_and_pd_routing_is_refused():
    assert ROUTERS.canonical("auto") == "round_robin"
    with pytest.raises(ValueError, match=r"follow_bootstrap_room.*not modelled.*disaggregation"):
        _scenario("timed", dp=2, method="follow_bootstrap_room")


def _busy_then_burst() -> list[Request]:
    """A long request (2048 tokens, 2000 answer tokens) at 0, then three short ones a second apart."""
    long = Request("long", 0.0, 2048, 2000, tuple(range(1, 129)))
    short = [Request(f"s{i}", 1.0 * i, 64, 4, tuple(range(1000 * i, 1000 * i + 4))) for i in (1, 2, 3)]
    return [long, *short]


@pytest.mark.parametrize(
    ("method", "ranks"),
    [
        ("round_robin", [0, 1, 0, 1]),  # in turn: the third request waits behind the long one's decode
        ("total_requests", [0, 1, 1, 1]),  # rank 0 holds the long request for its whole decode
        ("total_tokens", [0, 1, 1, 1]),  # rank 0 holds its 2048+ KV tokens
    ],
)
def test_timed_routing_reads_the_ranks_queues(method, ranks):
    res = _run("timed", _busy_then_burst(), dp=2, method=method)
    assert res.request_columns["dp_rank"].tolist() == ranks


def test_instant_mode_refuses_a_method_that_reads_queues():
    from hicache_sim.core import ConfigError

    with pytest.raises(ConfigError, match=r"total_requests.*only a timed run"):
        _run("instant", _session(), dp=2, method="total_requests")


# --------------------------------------------------------------------------------- sglang flags


LAUNCH = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --tp 8"


@pytest.mark.parametrize(
    ("flags", "fields", "written"),
    [
        ("--dp-size 8 --enable-dp-attention", (1, 8, "round_robin"), "--attn-dp-size 8"),
        ("--attn-dp-size 4 --load-balance-method total_tokens", (1, 4, "total_tokens"), None),
        ("--attention-data-parallel-size 2", (1, 2, "round_robin"), "--attn-dp-size 2"),
        ("--dp-size 2 --load-balance-method total_requests", (2, 1, "total_requests"), None),
        ("--dp-size 2 --load-balance-method auto", (2, 1, "round_robin"), "--dp-size 2"),
    ],
)
def test_dp_flags_round_trip(flags, fields, written):
    """from-sglang reads the DP layout as SGLang 0.5.23 resolves it; sglang-args writes 0.5.23's spelling,
    which reads back to the same fields."""
    from hicache_sim.sglang import from_command, to_command

    conv = from_command(f"{LAUNCH} {flags}")
    hw = conv.scenario.hardware
    assert (hw.dp, hw.attn_dp, hw.load_balance_method) == fields
    tokens, _ = to_command(conv.scenario)
    line = " ".join(tokens)
    assert (written or flags) in line
    again = from_command(line).scenario.hardware
    assert (again.dp, again.attn_dp, again.load_balance_method) == (hw.dp, hw.attn_dp, hw.load_balance_method)


# ------------------------------------------------------------------------------------- shared L3


def test_dp_ranks_share_a_pooled_store():
    """Mooncake's pool is one for every rank (capacity_scope shared): turn 1 (512 tokens) is written to it
    by rank 0, so turn 2 (1024 tokens, its first 512 turn 1's) on rank 1 reads them from storage:
    512 of 1536 prompt tokens, all storage hits. Without a shared store rank 1 would hit nothing."""
    turns = [Request(f"t{k}", 5.0 * (k - 1), 512 * k, 4, tuple(range(1, 1 + 32 * k))) for k in (1, 2)]
    res = _run("timed", turns, dp=2)
    assert res.summary["hit_rate"]["total"] == pytest.approx(0.0)
    stored = _run("timed", turns, dp=2, storage="mooncake")
    assert stored.summary["hit_rate"] == pytest.approx(
        {"device": 0.0, "host": 0.0, "storage": 512 / 1536, "total": 512 / 1536}
    )
    assert [r["hit_rate"]["storage"] for r in stored.summary["dp_ranks"]] == pytest.approx([0.0, 0.5])


def test_instant_mode_refuses_ranks_that_share_a_store():
    from hicache_sim.core import ConfigError

    with pytest.raises(ConfigError, match=r"share one L3 store.*use mode: timed"):
        _run("instant", _session(), dp=2, storage="mooncake")


def test_run_prints_and_writes_each_rank(tmp_path):
    """``run`` prints one line per rank under the summary line; the result folder holds the dp_rank
    column, the per-rank block and every rank's transfers."""
    import json

    import pyarrow.parquet as pq
    from conftest import invoke

    out = tmp_path / "out"
    res = invoke(
        "run",
        "builtin:multiturn_llama8b_h200",
        "--out",
        out,
        "--set",
        "hardware.dp=2",
        "--set",
        "workload.multiturn.num_clients=4",
        "--set",
        "workload.multiturn.num_rounds=2",
        "--set",
        "metrics.transfer_log=true",
    )
    assert res.exit_code == 0, res.output
    assert "per DP rank" in res.output and "  rank 1: 4 requests" in res.output
    summary = json.loads((out / "summary.json").read_text())
    assert [r["requests"] for r in summary["dp_ranks"]] == [4, 4]
    assert sorted(pq.read_table(out / "requests.parquet").column("dp_rank").to_pylist()) == [0] * 4 + [1] * 4
    assert set(pq.read_table(out / "transfers.parquet").column("dp_rank").to_pylist()) == {0, 1}


def test_advise_counts_the_host_pools_of_every_replica():
    """advise's total host memory is its size per rank x every rank holding a host pool: --dp-size
    replicas have GPUs of their own (tp 2 x dp 3 = 6); attention-DP groups share the tp ranks (tp 2)."""
    from hicache_sim.advise import setup

    base = {
        "name": "a",
        "mode": "instant",
        "model": "llama-3.1-8b",
        "cache": {"page_size": 64},
        "workload": {"kind": "trace", "trace": {"path": "builtin:mooncake/conversation_trace.jsonl", "limit": 10}},
    }
    replicas = setup({**base, "hardware": {"gpu": "h200", "tp": 2, "dp": 3}}, "a.yaml", [], None, None)
    groups = setup({**base, "hardware": {"gpu": "h200", "tp": 2, "attn_dp": 2}}, "a.yaml", [], None, None)
    assert (replicas.ranks, groups.ranks) == (6, 2)


def test_saturation_counts_every_rank_as_capacity():
    """Two ranks serve twice the requests per GPU second of one: the saturation block's capacity of the
    same finished rows doubles, and its utilisation halves."""
    from hicache_sim.output.columns import Columns
    from hicache_sim.output.saturation import saturation_block

    res = _run("timed", _session(turns=6, gap_s=0.05))
    finished = res.request_columns
    blocks = [
        saturation_block(
            resolve(_scenario("timed", dp=dp)),
            finished,
            finished,
            Columns.from_rows([]),
            open_loop=True,
            served=res.summary["throughput"],
        )
        for dp in (1, 2)
    ]
    one, two = (b["capacity"]["requests_per_s"] for b in blocks)
    assert two == pytest.approx(2 * one)
    assert blocks[1]["utilisation"] == pytest.approx(blocks[0]["utilisation"] / 2)


def test_attention_dp_pages_hold_the_group_s_kv_heads():
    """page_head copies move each KV head apart: under attention DP a rank holds the heads of its group
    (Llama-3.1-8B's 8 over tp 8 / attn_dp 4 = 2 ranks: 4), not of all tp ranks (1)."""
    assert resolve(_scenario("timed", tp=8)).kv_heads_per_rank == 1
    assert resolve(_scenario("timed", tp=8, attn_dp=4)).kv_heads_per_rank == 4


def test_a_given_running_cap_is_shared_by_the_attention_groups():
    """--max-running-requests is the server's: each attention-DP group takes max_running_requests //
    attn_dp (sglang 0.5.23 resolve_max_num_reqs: 64 // 4 = 16); replicas each take the whole of it."""
    assert resolve(_scenario("timed", tp=8, attn_dp=4)).max_running_requests == 16
    assert resolve(_scenario("timed", dp=2)).max_running_requests == 64


def test_validate_gives_each_rank_s_pools_and_the_node_s(tmp_path):
    """validate: one line with the ranks and each one's own pools; the node line counts a host pool per
    GPU: attention-DP groups share the tp GPUs (8), replicas bring their own (tp 2 x dp 3 = 6)."""
    import yaml
    from conftest import invoke

    for hw, ranks, shape, on_node in (
        ({"tp": 8, "attn_dp": 4}, 4, "attn_dp 4 groups of 2 GPU(s)", 8),
        ({"tp": 2, "dp": 3}, 3, "dp 3 replicas of tp 2 GPU(s)", 6),
    ):
        sc = tmp_path / "s.yaml"
        data = {"name": "s", "model": "llama-3.1-8b", "hardware": {"gpu": "h200", **hw}, "cache": {"page_size": 64}}
        sc.write_text(yaml.safe_dump(data))
        out = invoke("validate", sc).output
        r = resolve(build_scenario(data, "s.yaml"))
        assert (
            f"data parallel: {ranks} ranks ({shape}), each with its own radix tree, device pool of "
            f"{r.device_tokens} tokens and host pool of {r.host_tokens} tokens per GPU"
        ) in out
        assert f"host memory: {on_node} rank(s) on the node" in out


def test_a_dp_run_is_deterministic():
    """Same scenario, same rows: the ranks' processes start in rank order and the router keeps no clock."""
    reqs = sorted(_busy_then_burst() + _session(turns=5, gap_s=0.3, first=5000), key=lambda q: q.arrival_s)
    runs = [_run("timed", reqs, dp=3, method="total_tokens") for _ in range(2)]
    assert runs[0].request_columns.to_frame().equals(runs[1].request_columns.to_frame())
    assert runs[0].summary == runs[1].summary
