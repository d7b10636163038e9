"""``hicache-sim advise``: the recommendation is the smallest grid point meeting the target, read from
the same sweep table it wrote; an unreachable target says so and exits 0 with the best point; a TTFT
target times the best configuration per size, smallest first, and stops at the first that meets it;
bad flags exit 2 with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import assert_user_error, invoke

from hicache_sim.advise import HIT, POLICY, RULE, SIZE, Target, ordered, smallest_meeting, validation_summary

# A slice of the conversation trace with a 200-page device pool: host hits appear between 100 and
# 1600 GB per rank (instant total 0.045 at 100, 0.144 at 400, 0.265 at 1600).
SMALL = {
    "name": "small",
    "mode": "instant",
    "model": "llama-3.1-8b",
    "cache": {"page_size": 512, "device_tokens": 512 * 200},
    "scheduler": {"chunked_prefill_size": None},
    "workload": {
        "kind": "trace",
        "trace": {"path": "builtin:mooncake/conversation_trace.jsonl", "limit": 1500, "time_scale": 4.0},
    },
}
SIZES = "100,400,1600"


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("advise") / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def folder(scenario) -> Path:
    """One advice folder for the module: later runs resume its instant points."""
    return scenario.parent / "out"


def advise(scenario: Path, folder: Path, *args):
    r = invoke("advise", scenario, "--host-sizes-gb", SIZES, "--out", folder, "--workers", 2, *args)
    assert r.exit_code == 0, r.output
    return r, json.loads((folder / "advice.json").read_text(encoding="utf-8"))


def instant_table(folder: Path) -> pd.DataFrame:
    return pd.read_csv(folder / "instant" / "sweep.csv")


def test_recommends_the_smallest_grid_point_meeting_the_target(scenario, folder):
    r, d = advise(scenario, folder, "--target-hit-rate", 0.1)
    t = instant_table(folder)
    assert len(t) == 3 * 3 * 3  # sizes x write policies x host rules
    meeting = t[t[HIT] >= 0.1]
    smallest = meeting[SIZE].min()
    rec = d["recommendation"]
    assert d["target"] == {"kind": "hit_rate", "value": 0.1, "given": True, "met": True}
    assert rec["host_size_gb"] == smallest == 400
    assert (t[t[SIZE] < smallest][HIT] < 0.1).all()
    best_there = meeting[meeting[SIZE] == smallest][HIT].max()
    assert rec["hit_rate_instant"]["total"] == pytest.approx(best_there)
    cmd = rec["sglang_command"].split()
    assert cmd[cmd.index("--hicache-size") + 1] == str(smallest)
    if rec["write_policy"] != "write_through":  # SGLang's default is left out
        assert cmd[cmd.index("--hicache-write-policy") + 1] == rec["write_policy"]
    assert "--enable-hierarchical-cache" in cmd and f"SGLang: {rec['sglang_command']}" in r.output
    assert rec["ttft_p99_s"] > 0 and rec["hit_rate_timed"]["total"] > 0  # the chosen point was timed
    assert len(list((folder / "timed" / "points").glob("*.json"))) == 1
    assert "recommendation: 400 GB host memory per rank" in r.output
    assert "hardware uncalibrated" in r.output
    assert (folder / "advice.png").stat().st_size > 0
    before = (folder / "advice.json").read_bytes()
    advise(scenario, folder, "--target-hit-rate", 0.1)  # resumed: same bytes out
    assert (folder / "advice.json").read_bytes() == before


def test_unreachable_target_says_so_and_gives_the_best_point(scenario, folder):
    r, d = advise(scenario, folder, "--target-hit-rate", 0.9, "--instant-only")
    t = instant_table(folder)
    assert d["target"]["met"] is False
    assert "target NOT met by any host size up to 1600 GB per rank" in r.output
    best = t[HIT].max()
    assert d["recommendation"]["hit_rate_instant"]["total"] == pytest.approx(best)
    assert d["recommendation"]["host_size_gb"] == t[t[HIT] == best][SIZE].min()
    assert d["recommendation"]["ttft_p99_s"] is None and "not simulated (--instant-only)" in r.output


def test_ttft_target_times_smallest_sizes_first_and_stops(scenario, tmp_path):
    out = tmp_path / "ttft"
    r = invoke("advise", scenario, "--host-sizes-gb", SIZES, "--out", out, "--workers", 1, "--target-ttft-p99", 1e6)
    assert r.exit_code == 0, r.output
    d = json.loads((out / "advice.json").read_text(encoding="utf-8"))
    assert d["target"]["met"] is True and d["recommendation"]["host_size_gb"] == 100
    assert len(d["timed"]) == 1  # the first size met it: nothing larger was timed
    r = invoke("advise", scenario, "--host-sizes-gb", SIZES, "--out", out, "--workers", 1, "--target-ttft-p99", 1e-6)
    d = json.loads((out / "advice.json").read_text(encoding="utf-8"))
    assert d["target"]["met"] is False and len(d["timed"]) == 3
    fastest = min(d["timed"], key=lambda x: x["ttft_p99_s"])
    assert d["recommendation"]["ttft_p99_s"] == fastest["ttft_p99_s"]


def test_ttft_answer_with_a_proposal_rule_also_searches_sglangs_upstream_rule(monkeypatch, tmp_path):
    """boundary has the best instant hit rate at every size; timed, it meets the TTFT target at 4 GB,
    the upstream rule only at 16 GB. The advice names both, and the upstream search times the
    upstream configuration of each size, smallest first, and stops at 16."""
    import hicache_sim.advise as adv
    from hicache_sim.advise import TTFT, setup
    from hicache_sim.output.advice import advice_dict, advice_lines

    hits = {"evicted_only": 0.1, "reclaim_mirrors": 0.15, "boundary": 0.2}
    ttft = {("boundary", 4): 1.0, ("evicted_only", 4): 3.0, ("evicted_only", 8): 2.5, ("evicted_only", 16): 1.5}
    timed_calls = []

    def fake_sweep(base, source, out_dir, *, points=None, **kw):
        if base["mode"] == "instant":
            rows = [
                {SIZE: s, POLICY: pol, RULE: rule, HIT: hits[rule] + s / 1000}
                for s in (4, 8, 16, 32)
                for pol in ("write_through", "write_back")
                for rule in hits
            ]
        else:
            timed_calls.append([dict(p.overrides) for p in points])
            rows = [
                {**dict(p.overrides), HIT: 0.1, TTFT: ttft[dict(p.overrides)[RULE], dict(p.overrides)[SIZE]]}
                for p in points
            ]
        t = pd.DataFrame(rows)
        for tier in ("device", "host", "storage"):
            t[f"hit_rate.{tier}"] = 0.0
        t["hit_rate.total"] = t[HIT]
        t["ttft_s.p50"] = 0.5
        t["sizes.host_to_device_ratio"] = 1.0
        return type("R", (), {"table": t})()

    monkeypatch.setattr(adv, "run_sweep", fake_sweep)
    monkeypatch.setattr(adv, "plan", lambda *a, **k: [])
    monkeypatch.setattr(adv, "launch_command", lambda *a, **k: ("python -m sglang.launch_server", []))
    st = setup(SMALL, "small.yaml", [], None, [4, 8, 16, 32])
    a = adv.advise(
        SMALL,
        "small.yaml",
        tmp_path / "o",
        Target("ttft_p99", 2.0),
        st,
        set_args=[],
        workers=1,
        base_dir=None,
        instant_only=False,
        root=tmp_path,
    )
    assert a.met and a.chosen[RULE] == "boundary" and int(a.chosen[SIZE]) == 4
    assert [c[0][RULE] for c in timed_calls] == ["boundary", "evicted_only", "evicted_only", "evicted_only"]
    assert [c[0][SIZE] for c in timed_calls] == [4, 4, 8, 16]  # stops at the first upstream size that meets it
    assert a.upstream[RULE] == "evicted_only" and int(a.upstream[SIZE]) == 16
    text = "\n".join(advice_lines(a))
    assert (
        "with SGLang's upstream rule: meets it at 16 GB per rank, write_through, hit rate 0.100, TTFT p99 1.500 s"
        in text
    )
    up = advice_dict(a, "cmd")["upstream_rule"]
    assert up["host_size_gb"] == 16 and up["ttft_p99_s"] == 1.5 and up["meets_target"] is True


def row(size, policy, rule, hit):
    return {SIZE: size, POLICY: policy, RULE: rule, HIT: hit}


def test_order_prefers_small_host_then_hit_rate_then_upstream_rule(monkeypatch):
    import hicache_sim.output.advice_table as adv
    from hicache_sim.core.registry import Registry

    rules = Registry("host eviction rule", "cache.host_eviction")
    for name in ("boundary", "reclaim_mirrors", "evicted_only"):  # upstream registered last
        rules.add(name, name)
    monkeypatch.setattr(adv, "HOST_EVICTION_RULES", rules)
    t = pd.DataFrame(
        [
            row(8, "write_back", "boundary", 0.5),
            row(8, "write_back", "evicted_only", 0.5),
            row(4, "write_through", "boundary", 0.4),
            row(4, "write_through", "evicted_only", 0.3),
        ]
    )
    o = ordered(t)
    assert list(zip(o[SIZE], o[RULE])) == [(4, "boundary"), (4, "evicted_only"), (8, "evicted_only"), (8, "boundary")]
    hit = Target("hit_rate", 0.35)
    assert smallest_meeting(t, hit, 0.35)[RULE] == "boundary"
    assert smallest_meeting(t, hit, 0.45)[RULE] == "evicted_only"  # tie at 0.5: upstream first
    assert smallest_meeting(t, hit, 0.6) is None


def test_proposal_rule_is_said_not_to_be_an_sglang_flag(tmp_path):
    """A grid where only boundary meets the target: the output says SGLang has no flag for it."""
    from hicache_sim.advise import Advice, Setup
    from hicache_sim.output.advice import advice_lines

    t = pd.DataFrame(
        [
            {
                **row(4, "write_through", "evicted_only", 0.1),
                **{f"hit_rate.{k}": 0.0 for k in ("device", "host", "storage")},
            },
            {
                **row(4, "write_through", "boundary", 0.3),
                **{f"hit_rate.{k}": 0.1 for k in ("device", "host", "storage")},
            },
        ]
    )
    t["sizes.host_to_device_ratio"] = 1.0
    st = Setup({}, [4], {SIZE: [4], POLICY: ["write_through"], RULE: ["evicted_only", "boundary"]}, 4.0, 1, 1, None)
    chosen = t.iloc[1]
    a = Advice(Target("hit_rate", 0.2), 0.2, True, chosen, chosen, None, t, None, t.iloc[0], st, "v")
    text = "\n".join(advice_lines(a))
    assert "'boundary' is a hicache-sim proposal, not an SGLang option: SGLang has no flag for it" in text
    assert "with SGLang's upstream rule: best reachable: 4 GB per rank, write_through, hit rate 0.100" in text


def test_validation_error_is_read_from_results(tmp_path):
    assert validation_summary(tmp_path) == "timed mode not validated (no results/validation/results.json)"
    (tmp_path / "results" / "validation").mkdir(parents=True)
    rows = [
        {"metric": "hit_rate", "rel_err": 0.02},
        {"metric": "hit_rate", "rel_err": -0.10},
        {"metric": "hit_rate", "rel_err": None},
        {"metric": "ttft_mean_s", "rel_err": -0.5},
        # derived from published TTFTs, or a copy case's points: not published TTFT figures
        {"metric": "ttft_vs_round0", "rel_err": 0.0},
        {"metric": "ttft_ms_vs_copy_ms", "rel_err": 0.9},
        {"metric": "ttft_median_ms", "rel_err": 0.3},
    ]
    (tmp_path / "results" / "validation" / "results.json").write_text(json.dumps({"rows": rows}), encoding="utf-8")
    s = validation_summary(tmp_path)
    assert "hit rate median |error| 6% over 2 published figures" in s
    assert "TTFT median |error| 40% over 2 published figures" in s


def test_budget_caps_the_grid_and_is_a_point(scenario):
    from hicache_sim.advise import setup

    st = setup(SMALL, str(scenario), [], 500, None)
    assert max(st.sizes_gb) == 500 and all(s <= 500 for s in st.sizes_gb)
    device = 512 * 200 * 131072 / 1e9
    assert st.sizes_gb[0] == max(1, round(0.25 * device))


BAD = [
    (["--target-hit-rate", 0.5, "--target-ttft-p99", 1], ["--target-hit-rate and --target-ttft-p99", "not both"]),
    (["--target-hit-rate", 0], ["--target-hit-rate", "(0, 1]", "got 0"]),
    (["--target-hit-rate", 1.5], ["--target-hit-rate", "got 1.5"]),
    (["--target-ttft-p99", 0], ["--target-ttft-p99", "> 0"]),
    (["--host-budget-gb", 0], ["--host-budget-gb", "> 0"]),
    (["--host-budget-gb", -3], ["--host-budget-gb", "got -3"]),
    (["--host-budget-gb", 0.5], ["--host-budget-gb", "below 1 GB"]),
    (["--host-sizes-gb", "100,2000", "--host-budget-gb", 1000], ["--host-sizes-gb", "2000 GB is above"]),
    (["--host-sizes-gb", "a,b"], ["--host-sizes-gb", "whole GB"]),
    (["--host-sizes-gb", "0,4"], ["--host-sizes-gb", ">= 1"]),
    (["--target-ttft-p99", 2, "--instant-only"], ["--target-ttft-p99", "--instant-only"]),
    (["--workers", 0], ["--workers", ">= 1"]),
]


@pytest.mark.parametrize("args,fragments", BAD, ids=[" ".join(map(str, a)) for a, _ in BAD])
def test_bad_flags(scenario, tmp_path, args, fragments):
    out = tmp_path / "never"
    assert_user_error(invoke("advise", scenario, "--out", out, *args), *fragments)
    assert not out.exists()


BUFFER = {
    **SMALL,
    "cache": {**SMALL["cache"], "host_memory_mode": "buffer_only", "storage_backend": "3fs"},
    "workload": {"kind": "trace", "trace": {**SMALL["workload"]["trace"], "limit": 400}},
}


def test_buffer_only_is_sized_on_timed_runs(tmp_path):
    """A buffer_only host stages prefetches and writes: storage hits grow with it. Instant mode reaches
    total 0.072 at 2 GB, but under timed load the staging backlog leaves 0.065 there; the target 0.07
    is met, timed, at 4 GB, which is the advice (instant mode alone would say 2)."""
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump({**BUFFER, "cache": {**BUFFER["cache"], "host_alignment": "up_plus_one"}}))
    out = tmp_path / "o"
    r = invoke("advise", path, "--host-sizes-gb", "1,2,4,8", "--target-hit-rate", 0.07, "--out", out, "--workers", 1)
    assert r.exit_code == 0, r.output
    d = json.loads((out / "advice.json").read_text(encoding="utf-8"))
    assert d["grid"] == {
        SIZE: [1, 2, 4, 8],
        POLICY: ["write_through", "write_through_selective"],  # buffer_only forbids write_back
        RULE: ["evicted_only"],  # no host cache to evict from: SGLang's rule only
    }  # and no storage on/off axis: buffer_only always has storage
    inst = instant_table(out)
    best = inst.groupby(SIZE)[HIT].max()
    assert best[2] >= 0.07 > best[1]  # instant mode would stop at 2 GB
    timed = {x["host_size_gb"]: x["hit_rate"] for x in d["timed"]}
    assert list(timed) == [1, 2, 4] and timed[2] < 0.07 <= timed[4]  # timed, smallest first, stops at 4
    assert d["recommendation"]["host_size_gb"] == 4 and d["target"]["met"] is True
    assert "buffer_only: the hit-rate target is judged on timed runs" in r.output


def test_buffer_only_refusals(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump({**BUFFER, "cache": {**BUFFER["cache"], "storage_backend": "none"}}))
    out = tmp_path / "never"
    assert_user_error(invoke("advise", path, "--out", out), "b.yaml", "buffer_only", "give cache.storage_backend")
    path.write_text(yaml.safe_dump({**BUFFER, "cache": {**BUFFER["cache"], "host_alignment": "up_plus_one"}}))
    r = invoke("advise", path, "--host-sizes-gb", "1,2", "--instant-only", "--out", out)
    assert_user_error(r, "--instant-only", "sized on timed runs")
    assert not out.exists()


def test_exact_alignment_is_refused_with_the_fix(tmp_path):
    data = {**SMALL, "cache": {**SMALL["cache"], "host_alignment": "exact"}}
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    out = tmp_path / "never"
    assert_user_error(
        invoke("advise", path, "--host-sizes-gb", "3", "--out", out),
        "x.yaml",
        "cache.host_alignment",
        "--set cache.host_alignment=up_plus_one",
    )
    assert not out.exists()


def test_storage_is_swept_on_and_off_and_named_as_sglang_does(tmp_path):
    from hicache_sim.advise import STORAGE, launch_command, setup

    data = {**SMALL, "cache": {**SMALL["cache"], "storage_backend": "3fs"}}
    st = setup(data, "s.yaml", [], None, [4, 8])
    assert st.axes[STORAGE] == ["3fs", "none"]
    on = pd.Series({SIZE: 8, POLICY: "write_back", RULE: "boundary", STORAGE: "3fs"})
    cmd, notes = launch_command(st, "s.yaml", [], on)
    assert "--hicache-size 8 --hicache-write-policy write_back --hicache-storage-backend hf3fs" in cmd
    assert not any("host_eviction" in n for n in notes)  # the advice says the proposal once, itself
    off, _ = launch_command(st, "s.yaml", [], on.replace("3fs", "none"))
    assert "--hicache-storage-backend" not in off and "--hicache-size 8" in off


def test_readme_example_is_the_committed_advice():
    """The README's advise example prints what results/host_smaller_than_device-advise/advice.json holds."""
    root = Path(__file__).resolve().parents[1]
    d = json.loads((root / "results/host_smaller_than_device-advise/advice.json").read_text(encoding="utf-8"))
    readme = (root / "README.md").read_text(encoding="utf-8")
    rec = d["recommendation"]
    h, t = rec["hit_rate_instant"], rec["hit_rate_timed"]
    assert d["target"]["met"] and d["command"].startswith("hicache-sim advise builtin:host_smaller_than_device")
    for line in (
        f"recommendation: {rec['host_size_gb']} GB host memory per rank (x8 ranks = {rec['host_total_gb']} GB)",
        f"  write policy {rec['write_policy']}, host eviction {rec['host_eviction']}",
        f"  hit rate (instant): device {h['device']:.3f}, host {h['host']:.3f}, storage {h['storage']:.3f}, "
        f"total {h['total']:.3f}",
        f"  timed: hit rate total {t['total']:.3f} (device {t['device']:.3f}, host {t['host']:.3f}, storage "
        f"{t['storage']:.3f}); TTFT p50 {rec['ttft_p50_s']:.3f} s, p99 {rec['ttft_p99_s']:.3f} s",
        "  SGLang: " + rec["sglang_command"],
    ):
        assert line in readme, line
    assert f"confidence: {validation_summary(root)}" in readme  # from the committed results/validation


def test_no_target_takes_the_smallest_host_near_the_best(scenario, folder):
    r = invoke("advise", scenario, "--host-sizes-gb", SIZES, "--out", folder, "--workers", 2, "--instant-only")
    assert r.exit_code == 0, r.output
    d = json.loads((folder / "advice.json").read_text(encoding="utf-8"))
    t = instant_table(folder)
    aim = t[HIT].max() - 0.01
    assert d["target"]["given"] is False and d["target"]["value"] == pytest.approx(aim)
    assert d["recommendation"]["host_size_gb"] == t[t[HIT] >= aim][SIZE].min() == 1600
    assert "no target given" in r.output


def test_storage_scenario_says_what_storage_adds(tmp_path):
    data = {**SMALL, "cache": {**SMALL["cache"], "storage_backend": "3fs"}}
    path = tmp_path / "st.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    out = tmp_path / "o"
    r = invoke("advise", path, "--host-sizes-gb", "100,400", "--out", out, "--workers", 2, "--target-hit-rate", 0.2)
    assert r.exit_code == 0, r.output
    d = json.loads((out / "advice.json").read_text(encoding="utf-8"))
    t = instant_table(out)
    assert len(t) == 2 * 3 * 3 * 2  # storage on and off
    rec = d["recommendation"]
    assert rec["storage_backend"] == "3fs" and "--hicache-storage-backend hf3fs" in rec["sglang_command"]
    off = t[(t[SIZE] == rec["host_size_gb"]) & (t["cache.storage_backend"] == "none")][HIT].max()
    assert d["without_storage"]["hit_rate_instant"]["total"] == pytest.approx(off)
    assert f"without storage at {rec['host_size_gb']} GB: best total hit rate {off:.3f}" in r.output
