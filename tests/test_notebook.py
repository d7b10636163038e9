"""The analysis notebook runs end to end on a sweep made by the CLI."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from hicache_sim.cli import app

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "hit_rate_vs_ratio.ipynb"


def test_notebook_plots_a_sweep(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    scenario = {
        "name": "nb",
        "mode": "instant",
        "model": "llama-3.1-8b",
        "cache": {"page_size": 512, "device_tokens": 512 * 200, "host_alignment": "exact"},
        "scheduler": {"chunked_prefill_size": None},
        "workload": {"kind": "trace", "trace": {"path": "builtin:mooncake/conversation_trace.jsonl", "limit": 300}},
        "sweep": {"cache.host_eviction": ["evicted_only", "boundary"], "cache.host_ratio": [0.5, 2.0]},
    }
    sc = tmp_path / "nb.yaml"
    sc.write_text(yaml.safe_dump(scenario))
    out = tmp_path / "sweep"
    r = CliRunner().invoke(app, ["sweep", str(sc), "--out", str(out), "--workers", "1"])
    assert r.exit_code == 0, r.output
    monkeypatch.setenv("HICACHE_SWEEP_DIR", str(out))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    client.execute()
    png = out / "notebook_hit_rate_vs_ratio.png"
    assert png.is_file() and png.stat().st_size > 5000
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert f"4 points from {out}" in outputs
    assert len(pd.read_parquet(out / "sweep.parquet")) == 4
