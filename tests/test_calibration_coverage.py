"""A calibration file that lacks a direction x io backend x layout group the run uses is no longer used
silently: one warning line, on the terminal and in summary.json's ``sizes.warnings``, says which groups
are calibrated and which fall back to the link preset."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import TINY_SCENARIO, invoke

#: A timed run of one tiny prompt: about a second. Its links are kernel / page_first (the defaults).
TIMED = {
    **TINY_SCENARIO,
    "mode": "timed",
    "cache": {"page_size": 16, "host_ratio": 2},
    "workload": {"kind": "trace", "trace": {"path": "t.jsonl"}},
}
ROW = {"bandwidth_Bps": 2e10, "latency_s": 1e-5, "half_efficiency_bytes": 1e4, "segment_overhead_s": 0.0}


def _run(tmp_path, groups: list[tuple[str, str, str]]):
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_length": 40, "output_length": 2, "hash_ids": [1]}\n')
    rows = [{"direction": d, "io_backend": io, "layout": lay, **ROW} for d, io, lay in groups]
    (tmp_path / "cal.yaml").write_text(yaml.safe_dump({"kind": "hicache-sim-calibration", "groups": rows}))
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump({**TIMED, "hardware": {"calibration": str(tmp_path / "cal.yaml")}}))
    r = invoke("run", sc, "--out", tmp_path / "out")
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.output.splitlines() if "hardware.calibration" in ln]
    stored = [
        w
        for w in json.loads((tmp_path / "out" / "summary.json").read_text())["sizes"]["warnings"]
        if "calibration" in w
    ]
    return lines, stored


@pytest.mark.parametrize(
    ("groups", "calibrated", "fallback"),
    [
        pytest.param(
            [("h2d", "kernel", "page_first"), ("d2h", "kernel", "layer_first")],
            ["h2d/kernel/page_first"],
            ["d2h/kernel/page_first"],
            id="some",
        ),
        pytest.param(
            [("h2d", "direct", "page_first"), ("d2h", "direct", "page_first")],
            [],
            ["h2d/kernel/page_first, d2h/kernel/page_first"],
            id="none",
        ),
        pytest.param(
            [], [], ["h2d/kernel/page_first, d2h/kernel/page_first", "no link groups"], id="compute-only-file"
        ),
    ],
)
def test_groups_the_file_lacks_are_named_on_the_terminal_and_in_the_summary(tmp_path, groups, calibrated, fallback):
    lines, stored = _run(tmp_path, groups)
    assert len(lines) == 1 and lines[0].startswith("warning: ") and stored == [lines[0].removeprefix("warning: ")]
    line = lines[0]
    for key in calibrated:
        assert f"calibrated {key}" in line
    if not calibrated:
        assert "calibrated" not in line.split("(")[0]
    for frag in fallback:
        assert frag in line
    assert "not in the file, taken from the gen5 preset" in line


def test_a_file_with_every_group_the_run_uses_says_nothing(tmp_path):
    lines, stored = _run(tmp_path, [("h2d", "kernel", "page_first"), ("d2h", "kernel", "page_first")])
    assert lines == [] and stored == []


def test_the_note_names_each_used_group_once():
    """The note itself, without a run: used groups are the two directions of one backend x layout."""
    from hicache_sim.hardware.calibration import Calibration
    from hicache_sim.hardware.linkmodel import LinkParams

    cal = Calibration(groups={("d2h", "direct", "page_first_direct"): LinkParams(**ROW)})
    note = cal.coverage_note("c.yaml", "direct", "page_first_direct", "gen4")
    assert note.startswith("hardware.calibration c.yaml: calibrated d2h/direct/page_first_direct; ")
    assert "h2d/direct/page_first_direct not in the file, taken from the gen4 preset" in note
    assert cal.coverage_note("c.yaml", "direct", "page_first", "gen4").count("not in the file") == 1
