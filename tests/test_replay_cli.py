"""``hicache-sim replay`` and ``validate-model`` on a tiny scenario, as a user meets them."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from conftest import assert_user_error, invoke

torch = pytest.importorskip("torch")

from test_replay_executor import TINY  # noqa: E402  (the same tiny scenario as the executor tests)


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


def test_replay_scenario(tmp_path, tiny):
    out = tmp_path / "rep"
    r = invoke("replay", tiny, "--device", "cpu", "--out", out)
    assert r.exit_code == 0, r.output
    assert "integrity passed" in r.output
    m = pd.read_parquet(out / "measurements.parquet")
    meta = json.loads((out / "replay.json").read_text())
    assert len(m) == meta["transfers"] > 0 and set(m["direction"]) == {"d2h", "h2d"}
    assert meta["integrity"]["passed"] and meta["layout"] == "page_first" and meta["device"] == "cpu"
    assert meta["pools"]["host_shape"] == [2, meta["pools"]["host_pages"] * 16, 2, 1, 32]  # page_first
    assert meta["bytes"] == int(m["bytes"].sum())
    first = r.output.splitlines()[0]  # the volume is said before anything is copied
    assert first == (
        f"replay tiny-replay: {meta['transfers']} host<->device transfers, {meta['bytes'] / 1e9:.3f} GB "
        "to copy; --limit N replays only the first N"
    ), first


def test_replay_transfer_log_with_its_scenario_beside_it(tmp_path, tiny):
    run_dir = tmp_path / "run"
    r = invoke(
        "run",
        tiny,
        "--out",
        run_dir,
        "--no-figures",
        "--set",
        "metrics.transfer_log=true",
        "--set",
        "cache.mem_layout=layer_first",
        "--set",
        "cache.io_backend=direct",
    )
    assert r.exit_code == 0, r.output
    out = tmp_path / "rep"
    r = invoke(
        "replay", run_dir / "transfers.parquet", "--out", out, "--limit", "5", "--h2d", "whole", "--repeats", "2"
    )
    assert r.exit_code == 0, r.output
    m = pd.read_parquet(out / "measurements.parquet")
    log = pd.read_parquet(run_dir / "transfers.parquet")
    assert m["transfer_id"].tolist() == log["id"].head(5).tolist() * 2 and m["repeat"].tolist() == [0] * 5 + [1] * 5
    assert json.loads((out / "replay.json").read_text())["transfers"] == 5
    n_copies = int(log["kind"].isin(["d2h", "h2d"]).sum())
    gb = int(log[log["kind"].isin(["d2h", "h2d"])]["bytes"].head(5).sum()) / 1e9
    assert r.output.splitlines()[0] == (
        f"replay tiny-replay: 5 host<->device transfers, {gb:.3f} GB x 2 passes to "
        f"copy (the first 5 of {n_copies}, --limit)"
    )
    m = m[m["repeat"] == 0]
    assert set(m["layout"]) == {"layer_first"} and set(m["io_backend"]) == {"direct"}
    assert set(m["launches"]) == {1}  # --h2d whole
    assert (m["bytes"].to_numpy() == log["bytes"].head(5).to_numpy()).all()


def test_replay_reduced_sweep_then_calibrate(tmp_path):
    out = tmp_path / "sweep"
    r = invoke("replay", "--sweep", "--limit", "16", "--repeats", "1", "--device", "cpu", "--out", out)
    assert r.exit_code == 0, r.output
    m = pd.read_parquet(out / "measurements.parquet")
    assert len(m) == 5 * 3 * 3 * 2 * 2  # counts 1..16 x page sizes x layouts x io x directions
    assert json.loads((out / "sweep.json").read_text())["page_counts"] == [1, 2, 4, 8, 16]
    r = invoke("calibrate", out / "measurements.parquet", "--out", out / "calibration.yaml", "--no-report")
    assert r.exit_code == 0, r.output
    assert (out / "calibration.yaml").is_file() and not (out / "calibration_errors.md").exists()


def test_validate_model_writes_table_and_plot(tmp_path, tiny):
    out = tmp_path / "val"
    r = invoke("validate-model", tiny, "--device", "cpu", "--out", out, "--limit", "20")
    assert r.exit_code == 0, r.output
    for name in ("validation.md", "validation.parquet", "predicted_vs_measured.png", "validation.json"):
        assert (out / name).is_file(), name
    v = pd.read_parquet(out / "validation.parquet")
    assert len(v) == 20 and {"measured_s", "predicted_s", "ape_pct"} <= set(v.columns)
    assert (v["predicted_s"] > 0).all() and (v["measured_s"] > 0).all()
    assert (v["repeats"] == 3).all()  # the median of three passes over the log per transfer
    md = (out / "validation.md").read_text()
    assert "| direction | transfers | median_ape_pct | p90_ape_pct" in md and "| all | 20 |" in md
    assert (out / "predicted_vs_measured.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_validate_model_with_the_shipped_cpu_calibration(tmp_path, tiny):
    from hicache_sim.scenario import PACKAGE_DATA

    cal = PACKAGE_DATA / "calibration" / "cpu-ci.yaml"
    r = invoke(
        "validate-model",
        tiny,
        "--device",
        "cpu",
        "--out",
        tmp_path / "v",
        "--limit",
        "10",
        "--set",
        f"hardware.calibration={cal}",
    )
    assert r.exit_code == 0, r.output
    assert "cpu-ci.yaml" in (tmp_path / "v" / "validation.md").read_text()


def test_replay_bad_input(tmp_path, tiny):
    assert_user_error(invoke("replay", tmp_path / "missing.yaml", "--out", tmp_path / "o"), "missing.yaml", "not found")
    assert_user_error(invoke("replay", "--out", tmp_path / "o"), "give a scenario or a transfer log")
    assert_user_error(invoke("replay", tmp_path / "log.parquet"), "log.parquet", "transfer log not found")
    assert_user_error(invoke("replay", tiny, "--h2d", "sideways"), "--h2d")
    assert_user_error(invoke("replay", tiny, "--device", "tpu"), "--device 'tpu'")
    (tmp_path / "alone.parquet").write_bytes(b"")
    pd.DataFrame(
        {"id": [0], "kind": ["d2h"], "pages": [1], "bytes": [1], "device_pages": [[0]], "host_pages": [[0]]}
    ).to_parquet(tmp_path / "alone.parquet")
    assert_user_error(invoke("replay", tmp_path / "alone.parquet"), "no scenario.yaml beside the log")
    r = invoke("replay", tmp_path / "alone.parquet", "--scenario", tiny, "--out", tmp_path / "o")
    assert_user_error(r, "transfer 0: the log says 1 bytes")
    assert not (tmp_path / "o").exists()
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**TINY, "cache": {**TINY["cache"], "page_size": -1}}))
    assert_user_error(invoke("validate-model", bad, "--out", tmp_path / "o"), "bad.yaml", "cache.page_size")
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present")
def test_cuda_asked_without_cuda(tiny, tmp_path):
    assert_user_error(invoke("replay", tiny, "--device", "cuda", "--out", tmp_path / "o"), "no CUDA device")


def test_replay_of_an_attention_dp_scenario_copies_a_groups_heads(tmp_path):
    """Under attention DP a rank holds the KV heads of its group's tp / attn_dp GPUs (2 of 2 heads at tp 2 /
    attn_dp 2), as the resolver sizes the page: the harness split them over all tp ranks and refused every
    such scenario ('KV shape gives 4096 B/page, the scenario 8192')."""
    data = {**TINY, "name": "tiny-adp", "hardware": {"tp": 2, "attn_dp": 2}}
    data["model"] = {**TINY["model"], "num_kv_heads": 2, "q_heads": 4}
    path = tmp_path / "adp.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "rep"
    r = invoke("replay", path, "--device", "cpu", "--out", out, "--limit", 4)
    assert r.exit_code == 0, r.output
    meta = json.loads((out / "replay.json").read_text())
    assert meta["integrity"]["passed"] and meta["pools"]["host_shape"][3] == 2  # page_first: heads, dim


def test_replay_refuses_side_pools_before_simulating(tmp_path):
    """A NEXTN scenario's transfers carry the MTP rows the harness does not copy: refused in one line before
    the instant run that would log them (the volume line came first)."""
    data = {
        **TINY,
        "name": "nextn",
        "model": {"preset": "deepseek-v3", "speculative": {"algorithm": "nextn"}},
        "hardware": {"gpu": "h200", "tp": 8},
        "cache": {"page_size": 64, "host_ratio": 2, "write_policy": "write_through"},
    }
    path = tmp_path / "nextn.yaml"
    path.write_text(yaml.safe_dump(data))
    r = invoke("replay", path, "--device", "cpu", "--out", tmp_path / "rep")
    assert_user_error(r, "copies the KV pool only", "MTP draft")
    assert "host<->device transfers" not in r.output and not (tmp_path / "rep").exists()
