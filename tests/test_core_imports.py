"""The core is pure Python: importable without simpy, torch or pandas, and never imports them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import hicache_sim.core

CORE = Path(hicache_sim.core.__file__).resolve().parent
FORBIDDEN = {"simpy", "torch", "pandas", "numpy"}


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The module an ``import from`` names, with a relative one resolved against ``package`` (the module's
    own package): ``from ..yamlfile import x`` in a core module is ``hicache_sim.yamlfile``."""
    if node.level == 0:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def test_core_imports_and_runs_with_simpy_torch_and_pandas_blocked():
    code = (
        "import sys\n"
        "for m in ('simpy', 'torch', 'pandas', 'numpy'):\n"
        "    sys.modules[m] = None  # any import of them raises ImportError\n"
        "import hicache_sim.core as core\n"
        "from hicache_sim.core import sizing, invariants\n"
        "c = core.HiCache(core.CacheConfig(4, 8, 8, storage=True))\n"
        "pages = c.device.alloc(3)\n"
        "c.insert([1, 2, 3], pages)\n"
        "c.drain()\n"
        "core.check(c)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_core_modules_never_import_heavy_dependencies():
    for path in sorted(CORE.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [_absolute(node, "hicache_sim.core")]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name}:{node.lineno} imports {name}"
                inside = name == "hicache_sim.core" or name.startswith("hicache_sim.core.")
                assert not (name == "hicache_sim" or name.startswith("hicache_sim.")) or inside, (
                    f"{path.name}:{node.lineno} imports {name} from outside the core"
                )


def test_importing_the_core_loads_none_of_them():
    code = (
        "import sys, hicache_sim.core\n"
        "print(sorted(m for m in ('simpy', 'torch', 'pandas', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_core_modules_import_from_the_ground_floor_up():
    """No circle among the core's modules, type-checking imports included: each module can be read
    knowing only the modules below it (errors, tree, transfers, ... up to cache)."""
    graph = {}
    for f in CORE.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps |= {node.module} if node.module else {a.name for a in node.names}
        graph[f.stem] = {d.split(".")[0] for d in deps} - {f.stem}
    graph.pop("__init__")
    order, state = [], {}

    def visit(m, path):
        if state.get(m) == "done":
            return
        assert state.get(m) != "open", "import circle: " + " -> ".join([*path, m])
        state[m] = "open"
        for d in sorted(graph.get(m, ())):
            visit(d, [*path, m])
        state[m] = "done"
        order.append(m)

    for m in sorted(graph):
        visit(m, [])
    assert order.index("errors") < order.index("policies") < order.index("state") < order.index("cache")


#: The floors above each package: what it may never import, type-checking imports included (the
#: orchestrators that run simulations and write folders sit above output/, and output/ above sim/).
UPPER = ("hicache_sim.runner", "hicache_sim.sweep", "hicache_sim.advise", "hicache_sim.l3_pair", "hicache_sim.api")
UPPER += ("hicache_sim.cli", "hicache_sim.instant")
FLOORS = {
    # sim/ runs on simconfig's plain dataclasses, never on the pydantic scenario (Resolved.sim_config()).
    "sim": (
        *UPPER,
        "hicache_sim.output",
        "hicache_sim.calibration",
        "hicache_sim.replay",
        "hicache_sim.sglang",
        "hicache_sim.scenario",
    ),
    "output": UPPER,
    # The calibration file describes hardware and lives in hardware/: reading a scenario never loads the
    # fitting package (calibration/: numpy, scipy, pandas), and hardware/ stands on core/ alone.
    "scenario": (*UPPER, "hicache_sim.output", "hicache_sim.sim", "hicache_sim.calibration", "hicache_sim.replay"),
    "hardware": (
        *UPPER,
        "hicache_sim.output",
        "hicache_sim.sim",
        "hicache_sim.calibration",
        "hicache_sim.replay",
        "hicache_sim.scenario",
        "hicache_sim.sglang",
        "hicache_sim.workloads",
    ),
}


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_a_package_never_imports_the_floors_above_it(package):
    root = CORE.parent / package
    bad = []
    for path in sorted(root.glob("*.py")):
        pkg = f"hicache_sim.{package}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                names = [_absolute(node, pkg)]
                names += [f"{names[0]}.{a.name}" for a in node.names] if names[0] == "hicache_sim" else []
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if any(name == up or name.startswith(up + ".") for up in FLOORS[package]):
                    bad.append(f"{path.name}:{node.lineno} imports {name}")
    assert not bad, bad
