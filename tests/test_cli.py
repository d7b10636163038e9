"""The CLI as a user meets it: run / validate / sweep / plot, and every bad-input case giving one line,
exit code 2, no traceback and nothing half-written."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import assert_user_error, invoke

TINY = {
    "name": "tiny",
    "seed": 3,
    "mode": "instant",
    "model": "llama-3.1-8b",
    "cache": {"page_size": 512, "device_tokens": 512 * 300, "host_ratio": 0.5, "host_alignment": "exact"},
    "scheduler": {"chunked_prefill_size": None},
    "workload": {"kind": "trace", "trace": {"path": "builtin:mooncake/conversation_trace.jsonl", "limit": 400}},
    "metrics": {"warmup_fraction": 0.1},
}


def write_yaml(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def test_run_writes_every_output(tmp_path):
    sc = write_yaml(tmp_path / "tiny.yaml", TINY)
    out = tmp_path / "out"
    r = invoke("run", sc, "--out", out, "--check-invariants")
    assert r.exit_code == 0, r.output
    for name in (
        "summary.json",
        "requests.parquet",
        "timeseries.parquet",
        "scenario.yaml",
        "residency.png",
        "hit_rate.png",
    ):
        assert (out / name).is_file(), name
    s = json.loads((out / "summary.json").read_text())
    assert s["requests"] == 400
    assert set(s["hit_rate"]) == {"device", "host", "storage", "total"}
    assert set(s["page_hit_rate"]) == {"device", "host", "storage", "total"}
    assert s["window"]["first_request"] == 40 and s["window"]["requests_measured"] == 360
    assert {"device_pages", "host_pages", "mirror_pages"} <= set(s["residency"])
    assert {"failed_host_allocations", "backup_failures", "prefetch_issued"} <= set(s["counters"])
    req = pd.read_parquet(out / "requests.parquet")
    assert len(req) == 400
    # Token hit rate recomputed from the per-request table over the stated window.
    w = req.iloc[40:]
    assert s["hit_rate"]["device"] == pytest.approx(w["device_hit_tokens"].sum() / w["prompt_tokens"].sum())
    assert s["window"]["prompt_tokens"] == int(w["prompt_tokens"].sum())
    # Scopes: the counters cover the whole run (warm-up included), the hit rates only the window.
    assert s["counters"]["prompt_pages"] == int(req["prompt_pages"].sum()) > s["window"]["prompt_pages"]
    assert s["scopes"]["counters"].startswith("whole run") and s["scopes"]["hit_rate"].startswith("window")
    assert set(s["scopes"]) == set(s) - {"mode", "scopes"}
    resolved = yaml.safe_load((out / "scenario.yaml").read_text())
    assert resolved["scenario"]["cache"]["host_ratio"] == 0.5 and resolved["hicache_sim_version"]
    env = json.loads((out / "environment.json").read_text())
    assert {"hicache_sim", "python", "pydantic", "pandas", "pyarrow"} <= set(env)


def test_run_is_deterministic_byte_for_byte(tmp_path):
    sc = write_yaml(tmp_path / "tiny.yaml", TINY)
    a, b = tmp_path / "a", tmp_path / "b"
    assert invoke("run", sc, "--out", a, "--no-figures").exit_code == 0
    assert invoke("run", sc, "--out", b, "--no-figures").exit_code == 0
    assert (a / "summary.json").read_bytes() == (b / "summary.json").read_bytes()


def test_set_overrides_any_key(tmp_path):
    sc = write_yaml(tmp_path / "tiny.yaml", TINY)
    out = tmp_path / "o"
    r = invoke(
        "run", sc, "--out", out, "--no-figures", "--set", "cache.host_ratio=2", "--set", "cache.host_eviction=boundary"
    )
    assert r.exit_code == 0, r.output
    resolved = yaml.safe_load((out / "scenario.yaml").read_text())["scenario"]
    assert resolved["cache"]["host_ratio"] == 2 and resolved["cache"]["host_eviction"] == "boundary"


def test_validate_prints_sizes(tmp_path):
    sc = write_yaml(tmp_path / "tiny.yaml", TINY)
    r = invoke("validate", sc)
    assert r.exit_code == 0, r.output
    assert "300 pages" in r.output and "150 pages" in r.output


def test_every_shipped_scenario_validates():
    root = Path(__file__).resolve().parent.parent / "scenarios"
    files = sorted(root.glob("*.yaml"))
    assert len(files) >= 6
    for f in files:
        r = invoke("validate", f)
        assert r.exit_code == 0, (f, r.output)


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        ("name: x\ncache: [1, 2\n", ["bad.yaml:", "YAML syntax error"]),
        ({**TINY, "bogus": 1}, ["bad.yaml", "bogus", "unknown key"]),
        ({**TINY, "cache": {**TINY["cache"], "page_sise": 64}}, ["cache.page_sise", "unknown key"]),
        ({**TINY, "cache": {**TINY["cache"], "page_size": "big"}}, ["cache.page_size", "integer"]),
        ({**TINY, "cache": {**TINY["cache"], "host_ratio": -1}}, ["cache.host_ratio", "greater than or equal to 0"]),
        ({**TINY, "cache": {**TINY["cache"], "device_tokens": -512}}, ["cache.device_tokens", "greater than 0"]),
        (
            {**TINY, "cache": {**TINY["cache"], "write_policy": "write_sometimes"}},
            ["cache.write_policy", "write_through"],
        ),
        ({**TINY, "model": "gpt-9"}, ["model.preset", "llama-3.1-8b"]),
        ({**TINY, "cache": {**TINY["cache"], "host_memory_mode": "buffer_only"}}, ["host_memory_mode", "storage"]),
    ],
)
def test_bad_scenario_is_one_line_exit_2(tmp_path, content, fragments):
    sc = write_yaml(tmp_path / "bad.yaml", content)
    out = tmp_path / "out"
    r = invoke("run", sc, "--out", out)
    assert_user_error(r, *fragments)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_missing_scenario_file(tmp_path):
    assert_user_error(invoke("run", tmp_path / "nope.yaml"), "nope.yaml", "not found")


def test_missing_trace_names_the_file(tmp_path):
    data = {**TINY, "workload": {"kind": "trace", "trace": {"path": str(tmp_path / "missing.jsonl")}}}
    sc = write_yaml(tmp_path / "s.yaml", data)
    out = tmp_path / "out"
    assert_user_error(invoke("run", sc, "--out", out), "missing.jsonl", "not found")
    assert not out.exists()


@pytest.mark.parametrize(
    ("line", "fragments"),
    [
        (
            '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n{not json}\n',
            [":2:", "not valid JSON"],
        ),
        ('{"timestamp": 0, "input_length": 600, "output_length": 5}\n', [":1:", "hash_ids"]),
        (
            '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1]}\n',
            [":1:", "expected ceil(600/512) = 2"],
        ),
        ('{"timestamp": -4, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n', [":1:", "timestamp"]),
    ],
)
def test_malformed_trace_line_is_cited(tmp_path, line, fragments):
    trace = tmp_path / "t.jsonl"
    trace.write_text(line)
    data = {**TINY, "workload": {"kind": "trace", "trace": {"path": str(trace)}}}
    sc = write_yaml(tmp_path / "s.yaml", data)
    out = tmp_path / "out"
    assert_user_error(invoke("run", sc, "--out", out), "t.jsonl", *fragments)
    assert not out.exists()


def test_page_larger_than_block_is_refused(tmp_path):
    sc = write_yaml(tmp_path / "s.yaml", {**TINY, "cache": {**TINY["cache"], "page_size": 1024}})
    assert_user_error(invoke("run", sc, "--out", tmp_path / "o"), "page_size 1024", "512-token blocks")


def test_bad_set_flag(tmp_path):
    sc = write_yaml(tmp_path / "s.yaml", TINY)
    assert_user_error(invoke("run", sc, "--set", "cache.host_ratio"), "--set", "dotted.key=value")
    assert_user_error(invoke("run", sc, "--set", "cache.host_ratio=lots"), "cache.host_ratio")


def test_rerun_replaces_folder_atomically(tmp_path):
    sc = write_yaml(tmp_path / "s.yaml", TINY)
    out = tmp_path / "out"
    assert invoke("run", sc, "--out", out, "--no-figures").exit_code == 0
    (out / "notes.txt").write_text("mine")  # a user's file: kept (issue 28), the rest is replaced whole
    assert invoke("run", sc, "--out", out, "--no-figures").exit_code == 0
    assert (out / "notes.txt").read_text() == "mine" and (out / "summary.json").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


SWEEP = {**TINY, "sweep": {"cache.host_eviction": ["evicted_only", "boundary"], "cache.host_ratio": [0.5, 2.0]}}


def test_sweep_runs_grid_resumes_and_plots(tmp_path):
    sc = write_yaml(tmp_path / "sw.yaml", SWEEP)
    out = tmp_path / "sw"
    r = invoke("sweep", sc, "--out", out, "--workers", "2")
    assert r.exit_code == 0, r.output
    table = pd.read_parquet(out / "sweep.parquet")
    assert len(table) == 4
    assert set(table["cache.host_ratio"]) == {0.5, 2.0}
    assert (out / "hit_rate_vs_ratio.png").is_file()
    # Each point equals a plain run with the same overrides.
    one = table[(table["cache.host_eviction"] == "boundary") & (table["cache.host_ratio"] == 0.5)].iloc[0]
    single = tmp_path / "single"
    assert (
        invoke(
            "run",
            sc,
            "--out",
            single,
            "--no-figures",
            "--set",
            "cache.host_eviction=boundary",
            "--set",
            "cache.host_ratio=0.5",
        ).exit_code
        == 0
    )
    s = json.loads((single / "summary.json").read_text())
    assert one["hit_rate.total"] == pytest.approx(s["hit_rate"]["total"])
    # Resume: delete one point, rerun: only that point runs again.
    victim = sorted((out / "points").glob("*.json"))[0]
    victim.unlink()
    r = invoke("sweep", sc, "--out", out, "--workers", "1")
    assert r.exit_code == 0, r.output
    assert "(1 run, 3 already done)" in r.output
    assert len(pd.read_parquet(out / "sweep.parquet")) == 4


def test_sweep_bad_grid_value_fails_before_running(tmp_path):
    bad = {**TINY, "sweep": {"cache.host_ratio": [0.5, -1]}}
    sc = write_yaml(tmp_path / "sw.yaml", bad)
    out = tmp_path / "sw"
    assert_user_error(invoke("sweep", sc, "--out", out), "cache.host_ratio")
    assert not (out / "sweep.parquet").exists()
    assert not out.exists()  # validated before anything is written: no folder, no points


def test_sweep_point_the_pools_cannot_size_fails_before_running(tmp_path):
    # 300 device pages x 0.501 is no whole number of pages: exact host alignment refuses it at resolve
    bad = {**TINY, "sweep": {"cache.host_ratio": [0.5, 0.501]}}
    sc = write_yaml(tmp_path / "sw.yaml", bad)
    out = tmp_path / "sw"
    assert_user_error(invoke("sweep", sc, "--out", out, "--workers", "1"), "host_alignment")
    assert not out.exists()


def test_sweep_on_a_local_dask_cluster(tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    sc = write_yaml(tmp_path / "sw.yaml", SWEEP)
    out = tmp_path / "sw"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl:
        r = invoke("sweep", sc, "--out", out, "--dask-scheduler", cl.scheduler_address)
        assert r.exit_code == 0, r.output
        table = pd.read_parquet(out / "sweep.parquet")
        # Each worker parsed the trace once for all its points: one workload in its cache.
        with distributed.Client(cl.scheduler_address) as client:
            cached = client.run(lambda: sorted(__import__("sys").modules["hicache_sim.sweep"]._WORKLOADS))
        assert all(len(keys) <= 1 for keys in cached.values()), cached
        assert len({k for keys in cached.values() for k in keys}) == 1, cached
        # Resume on the cluster: only the point whose file is gone runs again, with the same result.
        victim = sorted((out / "points").glob("*.json"))[0]
        before = json.loads(victim.read_text())
        victim.unlink()
        r = invoke("sweep", sc, "--out", out, "--dask-scheduler", cl.scheduler_address)
        assert r.exit_code == 0, r.output
        assert "(1 run, 3 already done)" in r.output
        assert json.loads(victim.read_text())["hit_rate.total"] == before["hit_rate.total"]
    assert len(table) == 4
    local = tmp_path / "local"
    assert invoke("sweep", sc, "--out", local, "--workers", "1").exit_code == 0
    t2 = pd.read_parquet(local / "sweep.parquet")
    cols = ["point", "hit_rate.device", "hit_rate.host", "hit_rate.total"]
    pd.testing.assert_frame_equal(
        table[cols].sort_values("point").reset_index(drop=True), t2[cols].sort_values("point").reset_index(drop=True)
    )


def test_plot_redraws_run_and_sweep(tmp_path):
    sc = write_yaml(tmp_path / "s.yaml", TINY)
    out = tmp_path / "o"
    assert invoke("run", sc, "--out", out, "--no-figures").exit_code == 0
    r = invoke("plot", out)
    assert r.exit_code == 0, r.output
    assert (out / "residency.png").stat().st_size > 1000
    assert_user_error(invoke("plot", tmp_path), "expected a run folder")


@pytest.mark.parametrize(
    ("damage", "fragments"),
    [
        ({"summary.json": "{not json"}, ("summary.json: cannot be read", "double quotes")),
        ({"summary.json": "[1, 2]"}, ("summary.json: expected a mapping, got list",)),
        ({"scenario.yaml": "not: [valid"}, ("scenario.yaml: cannot be read",)),
        ({"scenario.yaml": b"\xff\xfe"}, ("scenario.yaml: cannot be read", "utf-8")),
        ({"timeseries.parquet": "garbage!!"}, ("timeseries.parquet: cannot be read", "Parquet")),
        ({"requests.parquet": pd.DataFrame({"x": [1]})}, ("requests.parquet", "missing prompt_tokens")),
        (
            {"summary.json": "{}", "requests.parquet": None, "timeseries.parquet": None},
            ("nothing to draw",),
        ),
    ],
)
def test_plot_names_a_damaged_file_and_draws_nothing(tmp_path, damage, fragments):
    """A run folder with one damaged or foreign file: one line naming that file, exit 2, and no figure
    drawn (every file is read before the first figure)."""
    sc = write_yaml(tmp_path / "s.yaml", TINY)
    out = tmp_path / "o"
    assert invoke("run", sc, "--out", out, "--no-figures").exit_code == 0
    for name, content in damage.items():
        target = out / name
        if content is None:
            target.unlink()
        elif isinstance(content, pd.DataFrame):
            content.to_parquet(target)
        else:
            target.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert_user_error(invoke("plot", out), *fragments)
    assert not list(out.glob("*.png"))


@pytest.mark.parametrize(
    ("table", "fragment"),
    [("not parquet", "sweep.parquet: cannot be read"), (pd.DataFrame({"point": []}), "missing hit_rate.device")],
)
def test_plot_refuses_a_damaged_sweep_table(tmp_path, table, fragment):
    folder = tmp_path / "sw"
    folder.mkdir()
    if isinstance(table, pd.DataFrame):
        table.to_parquet(folder / "sweep.parquet")
    else:
        (folder / "sweep.parquet").write_text(table)
    assert_user_error(invoke("plot", folder), fragment)


def test_sweep_figure_x_axis_is_the_swept_key(tmp_path):
    """A sweep over page size is drawn against page size (not the unchanged host ratio), with a line per
    write policy; `plot` redraws the same file from the folder's recorded grid."""
    data = {**TINY, "sweep": {"cache.write_policy": ["write_through", "write_back"], "cache.page_size": [64, 512]}}
    sc = write_yaml(tmp_path / "ps.yaml", data)
    out = tmp_path / "ps"
    r = invoke("sweep", sc, "--out", out, "--workers", "1")
    assert r.exit_code == 0, r.output
    assert "wrote" in r.output and "hit_rate_vs_page_size.png" in r.output
    assert not (out / "hit_rate_vs_ratio.png").exists()
    (out / "hit_rate_vs_page_size.png").unlink()
    r = invoke("plot", out)
    assert r.exit_code == 0 and (out / "hit_rate_vs_page_size.png").stat().st_size > 5000, r.output


@pytest.mark.parametrize(
    ("keys", "want"),
    [
        (["cache.write_policy", "cache.host_ratio"], ("host_to_device_ratio", ["cache.write_policy"])),
        (["cache.host_size_gb"], ("host_to_device_ratio", [])),
        (["cache.write_policy", "cache.page_size"], ("cache.page_size", ["cache.write_policy"])),
        (["cache.write_policy", "cache.host_eviction"], ("cache.write_policy", ["cache.host_eviction"])),
    ],
)
def test_sweep_axes(keys, want):
    from hicache_sim.output.plots import sweep_axes

    table = pd.DataFrame(
        {
            "cache.write_policy": ["write_through", "write_back"] * 2,
            "cache.host_eviction": ["evicted_only"] * 2 + ["boundary"] * 2,
            "cache.host_ratio": [0.5, 0.5, 2.0, 2.0],
            "cache.host_size_gb": [1.0, 1.0, 4.0, 4.0],
            "cache.page_size": [64, 512, 64, 512],
            "host_to_device_ratio": [0.5, 0.5, 2.0, 2.0],
        }
    )
    x, _, groups = sweep_axes(table, keys)
    assert (x, groups) == want


def test_timed_sweep_draws_ttft_vs_ratio(tmp_path):
    data = {
        **TINY,
        "mode": "timed",
        "cache": {**TINY["cache"], "page_size": 64, "device_tokens": 64 * 2000},
        "workload": {
            "kind": "trace",
            "trace": {"path": "builtin:mooncake/conversation_trace.jsonl", "limit": 60, "time_scale": 4.0},
        },
        "sweep": {"cache.host_ratio": [0.5, 2.0]},
    }
    sc = write_yaml(tmp_path / "t.yaml", data)
    out = tmp_path / "sw"
    r = invoke("sweep", sc, "--out", out, "--workers", "1")
    assert r.exit_code == 0, r.output
    table = pd.read_parquet(out / "sweep.parquet")
    assert table["ttft_s.p50"].notna().all() and (table["ttft_s.p99"] >= table["ttft_s.p50"]).all()
    assert (out / "ttft_vs_ratio.png").stat().st_size > 5000
