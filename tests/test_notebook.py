"""The analysis notebook: it runs end to end on a sweep made by the CLI, and the committed copy is
executed (inline figure, printed answer) against the committed sweep and still current."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from hicache_sim.cli import app

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "hit_rate_vs_ratio.ipynb"


def _execute(nb, env_dir: Path | None, monkeypatch):
    nbclient = pytest.importorskip("nbclient")
    if env_dir is not None:
        monkeypatch.setenv("HICACHE_SWEEP_DIR", str(env_dir))
    else:
        monkeypatch.delenv("HICACHE_SWEEP_DIR", raising=False)
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    client.execute()
    return nb


def _texts(nb) -> list[list[str]]:
    """Each code cell's text outputs (stdout and text/plain), the part that must not go stale."""
    out = []
    for c in nb.cells:
        if c.cell_type == "code":
            out.append(
                [
                    o.get("text", "") if o.output_type == "stream" else o.get("data", {}).get("text/plain", "")
                    for o in c.get("outputs", [])
                    if (o.output_type == "stream" and o.get("name") == "stdout") or "text/plain" in o.get("data", {})
                ]
            )
    return out


def _has_inline_figure(nb) -> bool:
    return any("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_notebook_plots_a_sweep(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    scenario = {
        "name": "nb",
        "mode": "instant",
        "model": "llama-3.1-8b",
        "cache": {"page_size": 512, "device_tokens": 512 * 200, "host_alignment": "exact"},
        "scheduler": {"chunked_prefill_size": None},
        "workload": {"kind": "trace", "trace": {"path": "builtin:mooncake/conversation_trace.jsonl", "limit": 300}},
        "sweep": {
            "cache.write_policy": ["write_through", "write_back"],
            "cache.host_eviction": ["evicted_only", "boundary"],
            "cache.host_ratio": [0.5, 2.0],
        },
    }
    sc = tmp_path / "nb.yaml"
    sc.write_text(yaml.safe_dump(scenario))
    out = tmp_path / "sweep"
    r = CliRunner().invoke(app, ["sweep", str(sc), "--out", str(out), "--workers", "1"])
    assert r.exit_code == 0, r.output
    nb = _execute(nbformat.read(NOTEBOOK, as_version=4), out, monkeypatch)
    text = "".join(t for cell in _texts(nb) for t in cell)
    assert f"8 points from {out}" in text
    assert "ratio  0.5: best" in text and "ratio  2.0: best" in text
    assert _has_inline_figure(nb)
    assert len(pd.read_parquet(out / "sweep.parquet")) == 8


def test_committed_notebook_is_executed_and_current(monkeypatch):
    """Re-executed against the committed sweep, every printed output is what the committed copy shows:
    regenerate the notebook (README of notebooks/) whenever the sweep changes."""
    nbformat = pytest.importorskip("nbformat")
    committed = nbformat.read(NOTEBOOK, as_version=4)
    assert _has_inline_figure(committed)
    assert all(c.get("outputs") for c in committed.cells if c.cell_type == "code")
    fresh = _execute(copy.deepcopy(committed), None, monkeypatch)
    assert _texts(fresh) == _texts(committed)
