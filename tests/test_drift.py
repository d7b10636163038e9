"""The drift check (``hicache-sim drift``): an SGLang ``/metrics`` snapshot against a simulated run.

A snapshot written from a run's own figures compares to zero drift; a perturbed one reports exactly
the drift put in; a snapshot of an older SGLang says what that version does not export; a real
excerpt from a public SGLang pull request parses and its version is recognised from its names."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from conftest import TINY_SCENARIO, invoke

from hicache_sim.runner import simulate
from hicache_sim.scenario import build_scenario
from hicache_sim.sglang.metrics import (
    FIGURES,
    VERSIONS,
    SimFigures,
    catalogue,
    compare,
    exported,
    expose,
    matching_versions,
    parse_snapshot,
)

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def sim() -> SimFigures:
    out = simulate(build_scenario(TINY_SCENARIO, "tiny"))
    return SimFigures.from_output("tiny", out)


def _write(tmp_path: Path, text: str, name: str = "metrics.txt") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_a_snapshot_of_the_runs_own_figures_has_zero_drift(tmp_path, sim):
    assert sim.requests == 60 and sum(sim.cached.values()) > 0 and sim.evicted_tokens > 0
    rep = compare(parse_snapshot(_write(tmp_path, expose(sim))), sim)
    assert rep.version == "0.5.23" and rep.not_exported == [] and rep.absent == []
    assert len(rep.rows) == len(FIGURES)
    for row in rep.rows:
        assert row.drift == 0.0, row


def test_a_perturbed_snapshot_reports_the_drift_put_in(tmp_path, sim):
    text = expose(sim)
    device = float(sim.cached["device"])
    text = text.replace(
        f'cache_source="device"}} {device!r}', f'cache_source="device"}} {device - 0.05 * sim.prompt_tokens!r}'
    )
    evicted = float(sim.evicted_tokens)
    text = text.replace(f"}} {evicted!r}\n", f"}} {1.1 * evicted!r}\n")
    rows = {r.key: r for r in compare(parse_snapshot(_write(tmp_path, text)), sim).rows}
    assert rows["cached share, device"].drift == pytest.approx(-0.05)
    assert rows["cached share, all tiers"].drift == pytest.approx(-0.05)
    assert rows["cached share, host"].drift == 0.0
    assert rows["device evicted tokens"].drift == pytest.approx(0.10)
    assert rows["prompt tokens"].drift == 0.0


def test_ranks_count_once_and_dp_ranks_add(tmp_path, sim):
    """Each TP rank reports the same evictions (one is read); DP ranks serve different requests (summed)."""

    def line(tp: int, dp: int) -> str:
        return f'sglang:evicted_tokens_total{{tp_rank="{tp}",pp_rank="0",dp_rank="{dp}"}} {sim.evicted_tokens}\n'

    lines = expose(sim).splitlines(keepends=True)
    text = "".join(
        "".join(line(tp, 0) for tp in range(4)) if x.startswith("sglang:evicted_tokens_total") else x for x in lines
    )
    rows = {r.key: r for r in compare(parse_snapshot(_write(tmp_path, text)), sim).rows}
    assert rows["device evicted tokens"].drift == 0.0
    text += line(0, 1)
    rows = {r.key: r for r in compare(parse_snapshot(_write(tmp_path, text)), sim).rows}
    assert rows["device evicted tokens"].drift == pytest.approx(1.0)


@pytest.mark.parametrize("version", VERSIONS)
def test_an_older_version_says_what_it_does_not_export(tmp_path, sim, version):
    snap = parse_snapshot(_write(tmp_path, expose(sim, version)))
    rep = compare(snap, sim)
    if version == "0.4.10":  # its three figures' names are 0.5.2's too: read as the newer, unless told
        assert rep.version == "0.5.2" and "fits sglang 0.4.10, 0.5.2" in rep.version_note
        assert rep.absent == ["host->storage backup tokens", "storage->host prefetch tokens"]
        rep = compare(snap, sim, version)
    assert rep.version == version
    assert rep.not_exported == [f.key for f in FIGURES if not exported(f, version)]
    assert all(r.drift == 0.0 for r in rep.rows if r.key not in rep.not_exported)
    if version != "0.5.23":
        assert "cached share, device" in rep.not_exported and "device evicted tokens" in rep.not_exported
        assert "cached share, all tiers" not in rep.not_exported  # every version counts cached tokens


def test_what_each_version_exports():
    """Hand-read from each wheel: per-tier cached tokens and the L1/L2 counters are 0.5.23's; the storage
    counters came with 0.5.2; 0.4.10 has only the request, prompt and cached-token totals."""
    table = {v: [f.key for f in FIGURES if exported(f, v)] for v in VERSIONS}
    assert table["0.4.10"] == ["requests finished", "prompt tokens", "cached share, all tiers"]
    assert table["0.5.2"] == table["0.4.10"] + ["host->storage backup tokens", "storage->host prefetch tokens"]
    assert set(table["0.5.23"]) == {f.key for f in FIGURES}
    assert catalogue("0.5.23")["sglang:cached_tokens_total"] == "counter"
    assert catalogue("0.5.2")["sglang:token_usage"] == "gauge"


def test_a_real_snapshot_excerpt_parses_and_its_version_is_recognised():
    snap = parse_snapshot(DATA / "sglang-metrics-pr7944.txt")
    assert [s.value for s in snap.series("sglang:num_requests_total")] == [217.0]
    assert snap.series("sglang:cached_tokens_total")[0].labels == {
        "model_name": "/home/moyun.zty/models/deepseek-ai__DeepSeek-R1"
    }
    assert snap.types["sglang:token_usage"] == "gauge"
    fits, _ = matching_versions(snap)
    assert fits == ["0.4.10", "0.5.2"]  # no cache_source label: before 0.5.23


def test_label_values_with_escapes_and_timestamps():
    from hicache_sim.sglang.metrics import _SAMPLE, _labels

    m = _SAMPLE.match('sglang:x_total{a="q\\"}{",b="c\\\\d",} 3.5 1700000000000')
    assert m is not None and m.group(3) == "3.5" and m.group(4) == "1700000000000"
    assert _labels(m.group(2), "f") == {"a": 'q"}{', "b": "c\\d"}


def test_cli_against_a_run_folder(tmp_path, sim):
    sc = tmp_path / "tiny.yaml"
    sc.write_text(yaml.safe_dump(TINY_SCENARIO), encoding="utf-8")
    assert invoke("run", sc, "--out", tmp_path / "run", "--no-figures").exit_code == 0
    figs = SimFigures.from_run_dir(tmp_path / "run")
    assert (figs.requests, figs.prompt_tokens, figs.cached) == (sim.requests, sim.prompt_tokens, sim.cached)
    metrics = _write(tmp_path, expose(figs, "0.5.2"))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    r = invoke("drift", metrics, "--run", tmp_path / "run")
    assert r.exit_code == 0, r.output
    assert "sglang 0.5.2 does not export: cached share, device; cached share, host;" in r.output
    r = invoke("drift", metrics, "--scenario", sc, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["sglang_version"] == "0.5.2"
    assert all(row["drift"] in (0.0, None) for row in doc["rows"])
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


def test_a_run_with_a_store_compares_every_tier(tmp_path):
    """With a storage tier every figure has a non-zero simulated value, and its own snapshot has no drift."""
    data = {**TINY_SCENARIO, "cache": {**TINY_SCENARIO["cache"], "storage_backend": "file"}}
    data["workload"] = {**data["workload"], "trace": {**data["workload"]["trace"], "limit": 300}}
    figs = SimFigures.from_output("store", simulate(build_scenario(data, "store")))
    assert min(figs.cached["storage"], figs.storage_backup_tokens, figs.prefetched_tokens, figs.load_back_tokens) > 0
    rep = compare(parse_snapshot(_write(tmp_path, expose(figs))), figs)
    assert [r.drift for r in rep.rows] == [0.0] * len(FIGURES)


def test_prefetched_tokens_mean_what_each_version_counts():
    """0.5.2 counts a prefetch's tokens new to the host tree; 0.5.23 every token it read."""
    f = dataclasses.replace(
        SimFigures("x", 1, 10, {"device": 0, "host": 0, "storage": 0}, 1, 10, 10, 0, 0, 0, 0, 0, 0, 0, 0),
        prefetched_tokens=10,
        prefetch_inserted_tokens=4,
    )
    fig = next(f for f in FIGURES if f.metric == "sglang:prefetched_tokens_total")
    assert (fig.simulated(f, "0.5.2"), fig.simulated(f, "0.5.23")) == (4.0, 10.0)
    assert "sglang:prefetched_tokens_total{" in expose(f, "0.5.2") and "} 4.0\n" in expose(f, "0.5.2")


def test_the_readme_transcript_is_what_drift_prints(tmp_path):
    """The README's drift session: results/default's own figures with the two changes it names."""
    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text(encoding="utf-8")
    block = readme.split("$ hicache-sim drift metrics.txt --run results/default\n", 1)[1].split("```", 1)[0]
    shown = [ln for ln in block.splitlines() if ln and ln != "..."]
    figs = SimFigures.from_run_dir(root / "results" / "default")
    text = expose(figs).replace('cache_source="device"} 20233216.0', 'cache_source="device"} 18703119.0')
    text = text.replace("} 124380672.0\n", "} 131017330.0\n")
    r = invoke("drift", _write(tmp_path, text), "--run", root / "results" / "default")
    assert r.exit_code == 0, r.output
    printed = [ln.replace(str(tmp_path / "metrics.txt"), "metrics.txt") for ln in r.output.splitlines()]
    printed = [ln.replace(str(root / "results" / "default"), "results/default") for ln in printed]
    assert all(ln in printed for ln in shown), (shown, printed)
    assert [ln for ln in printed if ln in shown] == shown  # in the README's order


def test_windows_line_ends_and_a_byte_order_mark_read_as_the_same_snapshot(tmp_path, sim):
    text = expose(sim)
    plain = parse_snapshot(_write(tmp_path, text, "a.txt"))
    (tmp_path / "b.txt").write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    other = parse_snapshot(tmp_path / "b.txt")
    assert [(s.name, s.labels, s.value) for s in other.samples] == [(s.name, s.labels, s.value) for s in plain.samples]
