"""Each verb imports only what it uses: loading the CLI (``--help`` included) pulls in none of the heavy
libraries, ``validate`` no table or plotting library, ``run --no-figures`` no plotting library, an
instant ``run`` no pandas (its summary, figures and parquet files are built from numpy and pyarrow). A
behaviour check on ``sys.modules`` in a fresh interpreter, not a timing test (bench/bench_cli.py times it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("scipy", "matplotlib", "pandas", "torch", "pyarrow", "numpy", "simpy", "dask", "distributed", "pydantic")

# Runs the CLI in a fresh interpreter and prints, at exit, which of HEAVY it had imported.
PROBE = (
    "import atexit, json, sys\n"
    "heavy = json.loads(sys.argv[1])\n"
    "atexit.register(lambda: print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))))\n"
    "sys.argv = ['hicache-sim', *sys.argv[2:]]\n"
    "from hicache_sim.cli import main\n"
    "main()\n"
)


def imported(*args: str) -> list[str]:
    """The HEAVY libraries a ``hicache-sim ARGS`` process imported (its last stdout line)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(HEAVY), *args], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_importing_the_cli_imports_no_heavy_library():
    code = "import json, sys, hicache_sim.cli\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loaded = set(json.loads(out.stdout))
    assert "typer" in loaded  # the probe sees the CLI's own imports
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["--version"]])
def test_help_imports_no_heavy_library(args):
    # typer itself imports pydantic to build a verb's options when pydantic is installed
    assert set(imported(*args)) <= {"pydantic"}


def test_validate_imports_only_the_schema():
    assert set(imported("validate", "builtin:default")) <= {"pydantic"}


def test_instant_run_without_figures_imports_no_table_plotting_or_fitting_library(tmp_path):
    loaded = set(
        imported(
            "run", "builtin:default", "--set", "workload.trace.limit=50", "--no-figures", "--out", str(tmp_path / "r")
        )
    )
    assert "pyarrow" in loaded  # the probe sees what the run really loads
    assert not loaded & {"pandas", "simpy", "matplotlib", "scipy", "torch", "dask", "distributed"}, sorted(loaded)
    assert (tmp_path / "r" / "requests.parquet").is_file()


def test_instant_run_with_figures_imports_matplotlib_but_no_table_or_fitting_library(tmp_path):
    loaded = set(imported("run", "builtin:default", "--set", "workload.trace.limit=50", "--out", str(tmp_path / "r")))
    assert "matplotlib" in loaded
    assert not loaded & {"pandas", "simpy", "scipy", "torch", "dask", "distributed"}, sorted(loaded)
    assert (tmp_path / "r" / "hit_rate.png").is_file()
