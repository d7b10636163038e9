"""``plot SWEEPDIR`` draws the figure ``sweep`` drew: the same x axis and the same lines, byte for byte.

The folder's manifest (sweep.json) is written with sorted keys, so its grid no longer says in which order
the keys were swept; the figure's axis and line grouping must not depend on that order."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from conftest import TINY_SCENARIO, invoke

GRIDS = {
    # Every key categorical: the first swept key is the x axis (sorted, host_eviction would be).
    "categorical": {
        "cache.write_policy": ["write_through", "write_back"],
        "cache.host_eviction": ["evicted_only", "boundary"],
    },
    # Drawn against the host ratio; write policy sets the line style, host rule the colour (sorted: swapped).
    "ratio": {
        "cache.write_policy": ["write_through", "write_back"],
        "cache.host_eviction": ["evicted_only", "boundary"],
        "cache.host_ratio": [0.5, 2.0],
    },
}


@pytest.mark.parametrize("grid", list(GRIDS.values()), ids=list(GRIDS))
def test_plot_redraws_the_figure_sweep_drew(tmp_path, grid):
    sc = tmp_path / "sw.yaml"
    sc.write_text(yaml.safe_dump({**TINY_SCENARIO, "sweep": grid}, sort_keys=False))
    out = tmp_path / "sw"
    r = invoke("sweep", sc, "--out", out, "--workers", "1")
    assert r.exit_code == 0, r.output
    assert list(json.loads((out / "sweep.json").read_text())["grid"]) != list(grid)  # the order plot cannot read
    drawn = figures(out)
    assert drawn, r.output
    for name in drawn:
        (out / name).unlink()
    r = invoke("plot", out)
    assert r.exit_code == 0, r.output
    assert figures(out) == drawn


def figures(folder: Path) -> dict[str, str]:
    """Every figure in ``folder``: name -> digest of its bytes."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.png"))}
