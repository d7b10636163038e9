"""The data-parallel figures README.md's 'Data-parallel ranks' paragraph quotes, at the precision it
quotes them: the multi-turn scenario alone, as two replicas, and on Qwen3-8B over two GPUs as plain TP 2
and as two attention-DP groups that step in lockstep. A change to routing, per-rank pools, the lockstep
or the attention-DP weights moves one of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import invoke

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "multiturn_llama8b_h200.yaml"

# (the --set overrides, TTFT p50 s, TTFT p99 s, total hit rate) as README.md states them
QUOTED = {
    "one rank": ((), None, "2.38", "0.66"),
    "dp 2": (("hardware.dp=2",), None, "0.48", "0.50"),
    "qwen3 tp 2": (("model=qwen3-8b", "hardware.tp=2"), "0.046", "0.64", "0.67"),
    "qwen3 attn_dp 2": (("model=qwen3-8b", "hardware.tp=2", "hardware.attn_dp=2"), "0.119", "0.59", "0.50"),
}


def _decimals(quoted: str) -> int:
    return len(quoted.split(".")[1])


@pytest.mark.parametrize("case", sorted(QUOTED))
def test_readme_dp_figures(case, tmp_path):
    sets, p50, p99, hit = QUOTED[case]
    args = ["run", str(SCENARIO), "--out", str(tmp_path / "r"), "--no-figures"]
    for s in sets:
        args += ["--set", s]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    got = {"p50": summary["ttft_s"]["p50"], "p99": summary["ttft_s"]["p99"], "hit": summary["hit_rate"]["total"]}
    for key, quoted in (("p50", p50), ("p99", p99), ("hit", hit)):
        if quoted is not None:
            assert f"{got[key]:.{_decimals(quoted)}f}" == quoted, (case, key, got[key])


def test_readme_quotes_these_figures():
    text = " ".join((ROOT / "README.md").read_text().split())
    assert "TTFT p99 2.38 s -> 0.48 s, but the hit rate falls 0.66 -> 0.50" in text
    assert "TTFT p50 0.046 s, p99 0.64 s, hit rate 0.67" in text
    assert "p50 0.119 s, p99 0.59 s, hit rate 0.50, each group caching its own clients" in text
