"""The notebook API: ``hs.run`` and ``hs.sweep`` give what the CLI computes, in memory, and
``import hicache_sim`` loads none of the heavy libraries."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from conftest import TINY_SCENARIO, invoke

import hicache_sim as hs
from hicache_sim.runner import simulate
from hicache_sim.scenario import ScenarioError, load_scenario


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY_SCENARIO), encoding="utf-8")
    return path


def test_import_is_light():
    code = (
        "import sys, hicache_sim as hs; hs.run; hs.sweep; "
        "print(sorted(m for m in ('pandas', 'numpy', 'pydantic', 'simpy', 'yaml', 'typer') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_run_gives_the_summary_requests_and_time_series_of_the_cli_run(tiny, tmp_path):
    r = hs.run(tiny, cache__host_ratio=2.0)
    cli = simulate(load_scenario(tiny, ["cache.host_ratio=2.0"]))
    assert r.summary == cli.summary
    assert len(r.requests) == r.summary["requests"] == 60
    assert list(r.requests.columns) == list(cli.requests.columns)
    assert len(r.timeseries) > 0
    assert r.hit_rate["total"] == r.summary["hit_rate"]["total"]
    # the section form merges, as --set does
    assert hs.run(tiny, cache={"host_ratio": 2.0}).summary == r.summary
    assert hs.run(tiny).summary != r.summary  # the override changed something
    res = invoke("run", tiny, "--out", tmp_path / "cli", "--no-figures", "--set", "cache.host_ratio=2.0")
    assert res.exit_code == 0, res.output
    saved = r.save(tmp_path / "api", figures=False)
    assert json.loads((saved / "summary.json").read_text()) == json.loads(
        (tmp_path / "cli" / "summary.json").read_text()
    )


def test_run_takes_a_mapping_or_a_scenario():
    a = hs.run(TINY_SCENARIO)
    b = hs.run(load_scenario_from(TINY_SCENARIO))
    assert a.summary == b.summary


def load_scenario_from(data):
    from hicache_sim.scenario import build_scenario

    return build_scenario(data, "tiny")


def test_sweep_runs_the_grid_in_order_with_the_swept_keys_first(tiny):
    s = hs.sweep(tiny, {"cache.host_ratio": [0.25, 2.0], "cache.write_policy": ["write_through", "write_back"]})
    assert s.keys == ["cache.host_ratio", "cache.write_policy"]
    assert list(s.table.columns[:2]) == s.keys
    assert s.table[s.keys].values.tolist() == [
        [0.25, "write_through"],
        [0.25, "write_back"],
        [2.0, "write_through"],
        [2.0, "write_back"],
    ]
    assert len(s.results) == 4
    one = hs.run(tiny, cache__host_ratio=2.0, cache__write_policy="write_back")
    assert s.table["hit_rate.total"][3] == one.summary["hit_rate"]["total"]
    assert s.results[3].summary == one.summary


def test_sweep_stays_the_function_after_the_sweep_module_is_imported():
    import hicache_sim.sweep  # noqa: F401  (binds the submodule's name on the package)
    from hicache_sim.sweep import grid

    assert callable(hs.sweep) and callable(grid)


def test_a_bad_override_names_the_field(tiny):
    with pytest.raises(ScenarioError, match=r"cache\.host_ratoi: unknown key"):
        hs.run(tiny, cache__host_ratoi=2)
    with pytest.raises(ScenarioError, match="non-empty list"):
        hs.sweep(tiny, {"cache.host_ratio": []})
