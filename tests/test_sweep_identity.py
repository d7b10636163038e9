"""A resumed sweep reuses a point only when everything that computed it is the same (issue 30 item 1):
the point's seed and mode, the code, and a readable point file. Each test fails on the identity that
forgets one of them (a seed grid collapsing to one file, an upgraded hicache-sim returning old numbers,
a damaged file crashing the resume)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from conftest import TINY_SCENARIO, invoke

from hicache_sim.output import identity
from hicache_sim.sweep import Point, plan

TINY = {
    **TINY_SCENARIO,
    "workload": {"kind": "trace", "trace": {"path": "builtin:mooncake/conversation_trace.jsonl", "limit": 40}},
}


def _sweep(tmp_path: Path, grid: dict) -> tuple[Path, Path]:
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump({**TINY, "sweep": grid}), encoding="utf-8")
    return sc, tmp_path / "sw"


def _point_files(out: Path) -> list[Path]:
    return sorted((out / "points").glob("*.json"))


def test_points_differing_only_in_seed_or_mode_have_their_own_identity():
    points = [Point((("seed", s), ("mode", m))) for s in (1, 2) for m in ("instant", "timed")]
    planned = plan(TINY, "<test>", points=points)
    assert len({p.file_id for p in planned}) == 4


def test_a_seed_grid_keeps_one_point_per_seed(tmp_path):
    sc, out = _sweep(tmp_path, {"seed": [1, 2, 3]})
    r = invoke("sweep", sc, "--out", out, "--workers", 1)
    assert r.exit_code == 0 and "(3 run, 0 already done)" in r.output, r.output
    files = _point_files(out)
    assert len(files) == 3
    assert sorted(json.loads(f.read_text())["seed"] for f in files) == [1, 2, 3]


def test_another_code_fingerprint_recomputes_every_point(tmp_path, monkeypatch):
    sc, out = _sweep(tmp_path, {"cache.host_ratio": [0.5, 1.0]})
    assert invoke("sweep", sc, "--out", out, "--workers", 1).exit_code == 0
    r = invoke("sweep", sc, "--out", out, "--workers", 1)
    assert "(0 run, 2 already done)" in r.output, r.output
    monkeypatch.setattr(identity, "code_fingerprint", lambda: "an-upgraded-build")
    r = invoke("sweep", sc, "--out", out, "--workers", 1)
    assert r.exit_code == 0 and "(2 run, 0 already done)" in r.output, r.output


def test_a_damaged_point_file_is_recomputed_not_fatal(tmp_path):
    sc, out = _sweep(tmp_path, {"cache.host_ratio": [0.5, 1.0, 2.0]})
    assert invoke("sweep", sc, "--out", out, "--workers", 1).exit_code == 0
    whole = {f.name: f.read_text() for f in _point_files(out)}
    truncated, not_a_record, _untouched = _point_files(out)
    truncated.write_text(whole[truncated.name][: len(whole[truncated.name]) // 2])  # a write cut short
    not_a_record.write_text("null\n")  # valid JSON, not a point
    r = invoke("sweep", sc, "--out", out, "--workers", 1)
    assert r.exit_code == 0 and "(2 run, 1 already done)" in r.output, r.output
    assert {f.name: f.read_text() for f in _point_files(out)} == whole
