"""``hicache-sim calibrate`` end to end, its bad-input cases, and the calibration file reaching a
scenario's link parameters; the shipped calibration files load."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_user_error, invoke
from test_calibrate_fit import DIRECT, KERNEL, synthetic

from hicache_sim.hardware.calibration import load_calibration, preset_calibration
from hicache_sim.hardware.presets import LINKS
from hicache_sim.scenario import PACKAGE_DATA, build_scenario, resolve

SCENARIO = {
    "name": "cal",
    "model": "llama-3.1-8b",
    "cache": {
        "page_size": 64,
        "device_tokens": 64 * 100,
        "host_ratio": 2,
        "mem_layout": "page_first",
        "io_backend": "kernel",
    },
    "workload": {"kind": "poisson_synthetic", "poisson_synthetic": {"num_requests": 5}},
}


@pytest.fixture
def measurements_csv(tmp_path) -> Path:
    return write_measurements(tmp_path / "m.csv")


def write_measurements(path: Path) -> Path:
    """A CSV of synthetic kernel H2D and D2H measurements with 2 % noise: enough to fit every group."""
    import pandas as pd

    df = pd.concat(
        [
            synthetic(KERNEL, noise=0.02, layout="page_first"),
            synthetic(DIRECT, direction="d2h", io="kernel", layout="page_first", noise=0.02, launches_per_layer=False),
        ],
        ignore_index=True,
    )
    df.to_csv(path, index=False)
    return path


def test_calibrate_writes_a_file_that_changes_a_scenarios_links(tmp_path, measurements_csv):
    out = tmp_path / "cal" / "calibration.yaml"
    r = invoke("calibrate", measurements_csv, "--out", out)
    assert r.exit_code == 0, r.output
    assert "h2d/kernel/page_first" in r.output and "held-out median" in r.output
    for name in ("calibration.yaml", "calibration_errors.md", "calibration_holdout.png"):
        assert (tmp_path / "cal" / name).is_file(), name
    cal = load_calibration(out)
    assert set(cal.groups) == {("h2d", "kernel", "page_first"), ("d2h", "kernel", "page_first")}
    assert cal.errors[("h2d", "kernel", "page_first")]["n_holdout"] > 0
    assert "| h2d | kernel | page_first |" in (tmp_path / "cal" / "calibration_errors.md").read_text()

    preset = resolve(build_scenario(SCENARIO, "s")).links
    with_cal = resolve(build_scenario({**SCENARIO, "hardware": {"calibration": str(out)}}, "s")).links
    assert with_cal["h2d"] == cal.get("h2d", "kernel", "page_first") != preset["h2d"]
    assert with_cal["h2d"].bandwidth_Bps == pytest.approx(KERNEL.bandwidth_Bps, rel=0.05)
    assert with_cal["d2h"] == cal.get("d2h", "kernel", "page_first")
    # a layout the file does not cover keeps the preset (the kernel's curve for that layout)
    layer_first = {**SCENARIO, "cache": {**SCENARIO["cache"], "mem_layout": "layer_first"}}
    other = {**layer_first, "hardware": {"calibration": str(out)}}
    assert resolve(build_scenario(other, "s")).links == resolve(build_scenario(layer_first, "s")).links


def test_calibrate_missing_file(tmp_path):
    out = tmp_path / "c.yaml"
    assert_user_error(
        invoke("calibrate", tmp_path / "nope.parquet", "--out", out), "nope.parquet", "measurements file not found"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    "edit,fragments",
    [
        (lambda text: text.replace("h2d,kernel", "h2d,kernal", 1), ("row 1", "io_backend", "'kernal'")),
        (
            lambda text: "\n".join(
                ln if i != 5 else ln.rsplit(",", 1)[0] + ",soon" for i, ln in enumerate(text.splitlines())
            ),
            ("row 5", "duration_s"),
        ),
        (lambda text: text.replace("duration_s", "time_s", 1), ("missing column(s) duration_s",)),
        (lambda text: text.splitlines()[0] + "\n", ("no measurements",)),
        (lambda text: '\x00\x01 not a csv "\n,,\n', ("m.csv",)),
    ],
)
def test_calibrate_malformed_rows(tmp_path, measurements_csv, edit, fragments):
    measurements_csv.write_text(edit(measurements_csv.read_text()))
    out = tmp_path / "out" / "calibration.yaml"
    assert_user_error(invoke("calibrate", measurements_csv, "--out", out), *fragments)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing half-written


def test_calibrate_bad_flags(tmp_path, measurements_csv):
    assert_user_error(
        invoke("calibrate", measurements_csv, "--holdout", "1.5", "--out", tmp_path / "c.yaml"), "--holdout"
    )
    assert_user_error(invoke("calibrate", measurements_csv, "--out", tmp_path), "is a folder")
    assert_user_error(invoke("calibrate", tmp_path / "m.txt", "--out", tmp_path / "c.yaml"), "m.txt")


@pytest.mark.parametrize("name", ["cpu-ci", "h100-pcie-public", "h200-pcie-public"])
def test_shipped_calibrations_load_and_cover_every_group(name):
    cal = load_calibration(PACKAGE_DATA / "calibration" / f"{name}.yaml")
    assert len(cal.groups) == 12  # 2 directions x 2 io backends x 3 layouts
    if name.endswith("public"):
        assert "uncalibrated" in cal.source.lower()
    else:
        assert all(e["median_ape_pct"] is not None for e in cal.errors.values())
    sc = {**SCENARIO, "hardware": {"calibration": str(PACKAGE_DATA / "calibration" / f"{name}.yaml")}}
    assert resolve(build_scenario(sc, "s")).links["h2d"] == cal.get("h2d", "kernel", "page_first")


@pytest.mark.parametrize("name", ["h100-pcie-public", "h200-pcie-public"])
def test_public_calibrations_are_the_gen5_link_preset(name):
    """The uncalibrated files are the preset written out: the same curve per io backend and layout."""
    shipped = load_calibration(PACKAGE_DATA / "calibration" / f"{name}.yaml")
    assert shipped.groups == preset_calibration(LINKS.get("gen5"), "", "").groups
    # kernel and direct differ in per-piece cost (efficiency vs per-call) and in peak
    assert shipped.get("h2d", "kernel", "page_first").half_efficiency_bytes == 1047
    assert shipped.get("h2d", "direct", "page_first_direct").segment_overhead_s == 5e-6
