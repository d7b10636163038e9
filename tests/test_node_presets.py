"""The node's memory (issue 29 item 4): node presets from vendor pages, and ``--node-memory local``, which
reads this machine as SGLang 0.5.23 does (``MemAvailable`` within the memory cgroup's headroom). Expected
figures are worked out here from the vendors' numbers and SGLang's rule, not read back from the code."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from conftest import assert_user_error, invoke

from hicache_sim.hardware import local_memory
from hicache_sim.hardware.local_memory import read_local_memory
from hicache_sim.hardware.nodes import MEMORY_UNITS, NODES, aliases, node_preset
from hicache_sim.hardware.presets import GPUS
from hicache_sim.scenario import build_scenario, resolve
from hicache_sim.scenario.preflight import node_check

GIB = 1 << 30
RESERVE = 10 * GIB  # SGLang's HICACHE_HOST_MEMORY_RESERVE_BYTES
LAUNCH = ["python", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-70B-Instruct"]


def scenario(tmp_path, hardware: dict, cache: dict | None = None, model: str = "llama-3.1-70b"):
    data = {"name": "s", "mode": "instant", "model": model, "hardware": hardware, "cache": cache or {"page_size": 64}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, data


def kv_pool_bytes(gb: int, bytes_per_token: int, page: int = 64) -> int:
    """One rank's KV host pool for --hicache-size GB: whole pages of the tokens that fit, plus one page."""
    return (int(gb * 10**9 // bytes_per_token) // page + 1) * page * bytes_per_token


# Llama-3.1-70B at TP 8: 80 layers x 1 KV head per rank x 128 dims x K and V x 2 bytes.
LLAMA70_TP8 = 80 * 1 * 128 * 2 * 2


# ------------------------------------------------------------------------------------------ presets


def test_every_node_preset_has_a_vendor_source_and_known_parts():
    """A registry guard: a row without a page to check it against, or naming a GPU or unit the simulator
    does not know, cannot be added."""
    assert len(NODES.names()) >= 10
    for name in NODES.names():
        n = NODES.get(name)
        assert re.match(r"https://\S+\.\S+", n.source), (name, n.source)
        assert n.gpu in GPUS, (name, n.gpu)
        assert n.unit in MEMORY_UNITS and n.memory > 0 and n.gpus > 0, name
        assert name == name.lower(), name  # looked up in any case


def test_presets_match_the_vendors_figures():
    """The installed memory each vendor prints, in bytes (binary units, as the module says why)."""
    assert node_preset("p5.48xlarge").memory_bytes == 2 * 2**40
    assert node_preset("P4d.24xlarge").memory_bytes == 1152 * 2**30
    assert node_preset("ND-H100-v5").memory_bytes == 1900 * 2**30  # an alias, any case
    assert node_preset("a3-highgpu-8g").memory_bytes == 1872 * 2**30
    assert node_preset("dgx-h100").memory_bytes == 32 * 64 * 2**30  # 32 x 64 GB DIMMs


def test_a_preset_name_is_its_memory_in_the_check(tmp_path):
    """Llama-3.1-70B at TP 8 with --hicache-size 240: 8 pools of 240 GB on a p5.48xlarge (2 TiB) fit with
    SGLang's 10 GiB reserve; on a p4de.24xlarge (1152 GiB) they do not."""
    per_rank = kv_pool_bytes(240, LLAMA70_TP8)
    needed = 8 * per_rank + RESERVE
    assert needed < 2048 * GIB and needed > 1152 * GIB
    for name, gib in (("p5.48xlarge", 2048), ("p4de.24xlarge", 1152)):
        _, data = scenario(
            tmp_path, {"gpu": "h100", "tp": 8, "host_memory_gib": name}, {"page_size": 64, "host_size_gb": 240}
        )
        sc = build_scenario(data, "s.yaml")
        assert sc.hardware.host_memory_gib == gib
        check = node_check(resolve(sc))
        assert (check.node_bytes, check.needed_bytes) == (gib * GIB, needed)
        assert check.overcommits is (needed > gib * GIB)

    path, _ = scenario(tmp_path, {"gpu": "h100", "tp": 8}, {"page_size": 64, "host_size_gb": 240})
    fits = invoke("validate", path, "--node-memory", "p5.48xlarge")
    assert fits.exit_code == 0, fits.output
    assert f"of 2048.0 GiB on the node: fits ({(2048 * GIB - needed) / GIB:+.1f} GiB spare)" in fits.output
    assert "node memory p5.48xlarge: 2 TiB installed (https://aws.amazon.com/ec2/instance-types/p5/)" in fits.output
    short = invoke("validate", path, "--node-memory", "p4de.24xlarge")
    assert "valid, but not on this node" in short.output and "of 1152.0 GiB on the node: does NOT fit" in short.output


def test_a_preset_of_another_gpu_or_fewer_gpus_is_flagged(tmp_path):
    path, _ = scenario(tmp_path, {"gpu": "h200", "tp": 8, "dp": 2}, {"page_size": 64, "host_size_gb": 10})
    r = invoke("validate", path, "--node-memory", "p5.48xlarge")
    assert "node preset p5.48xlarge has h100 GPUs, the scenario runs on h200" in r.output
    assert "node preset p5.48xlarge has 8 GPUs, the scenario puts 16 ranks on one node" in r.output


def test_from_sglang_keeps_the_preset_name_in_the_scenario(tmp_path):
    out = tmp_path / "s.yaml"
    hicache = ["--tp", "8", "--enable-hierarchical-cache", "--hicache-size", "100", "--page-size", "64"]
    r = invoke("from-sglang", "--out", out, "--gpu", "h100", "--node-memory", "DGX-H100", "--", *LAUNCH, *hicache)
    assert r.exit_code == 0, r.output
    assert yaml.safe_load(out.read_text())["hardware"]["host_memory_gib"] == "dgx-h100"
    assert "of 2048.0 GiB on the node" in r.output and "has h100 GPUs" not in r.output
    again = invoke("validate", out)
    assert "of 2048.0 GiB on the node" in again.output


def test_from_sglang_runs_on_the_node_presets_gpu_unless_told(tmp_path):
    """A node preset names its GPUs: without --gpu the scenario runs on them (not the h200 default), and
    the auto-sizing note that asks for the node's memory is not printed when it was given."""
    out = tmp_path / "s.yaml"
    line = [*LAUNCH, "--tp", "8", "--enable-hierarchical-cache", "--page-size", "64"]
    r = invoke("from-sglang", "--out", out, "--node-memory", "p4de.24xlarge", "--", *line)
    assert r.exit_code == 0, r.output
    assert yaml.safe_load(out.read_text())["hardware"]["gpu"] == "a100"
    assert "has a100 GPUs" not in r.output and "set hardware.host_memory_gib" not in r.output
    # a node that holds the pools is a fact, not a warning
    assert "note: host memory: 8 rank(s) on the node" in r.output and "warning: host memory" not in r.output
    told = invoke(
        "from-sglang", "--out", tmp_path / "t.yaml", "--gpu", "h100", "--node-memory", "p4de.24xlarge", "--", *line
    )
    assert yaml.safe_load((tmp_path / "t.yaml").read_text())["hardware"]["gpu"] == "h100"
    assert "node preset p4de.24xlarge has a100 GPUs, the scenario runs on h100" in told.output
    bare = invoke("from-sglang", "--out", tmp_path / "u.yaml", "--", *line)
    assert yaml.safe_load((tmp_path / "u.yaml").read_text())["hardware"]["gpu"] == "h200"
    assert "set hardware.host_memory_gib to model that" in bare.output


def test_advise_caps_at_what_the_preset_node_holds(tmp_path):
    """Llama-3.1-8B at TP 8 (16384 B per token per rank) on an ND A100 v4 (900 GiB): the largest whole
    GB per rank whose 8 pools fit 900 GiB less the reserve."""
    path, _ = scenario(
        tmp_path,
        {"gpu": "a100-40g", "tp": 8},
        {"page_size": 64},
        model="llama-3.1-8b",
    )
    data = yaml.safe_load(path.read_text())
    data["workload"] = {"kind": "trace", "trace": {"path": "builtin:mooncake/conversation_trace.jsonl", "limit": 5}}
    path.write_text(yaml.safe_dump(data))
    cap = max(gb for gb in range(1, 200) if 8 * kv_pool_bytes(gb, 16384) <= 900 * GIB - RESERVE)
    out = tmp_path / "adv"
    r = invoke("advise", path, "--node-memory", "nd-a100-v4", "--instant-only", "--workers", "1", "--out", out)
    assert r.exit_code == 0, r.output
    assert f"capped at {cap} GB per rank" in r.output
    advice = json.loads((out / "advice.json").read_text())
    assert "--node-memory standard_nd96asr_v4" in advice["command"]


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("verb", "args"),
    [
        ("validate", []),
        ("from-sglang", ["--", *LAUNCH]),
        ("advise", ["--instant-only"]),
    ],
)
def test_unknown_node_names_the_close_ones(tmp_path, verb, args):
    path, _ = scenario(tmp_path, {"gpu": "h100", "tp": 8})
    before = sorted(p.name for p in tmp_path.iterdir())
    lead = [] if verb == "from-sglang" else [path]
    r = invoke(verb, *lead, "--node-memory", "p5.48xl", *args)
    assert_user_error(r, "--node-memory p5.48xl", "unknown node preset", "close: p5.48xlarge")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_unknown_node_in_a_scenario_file(tmp_path):
    path, _ = scenario(tmp_path, {"gpu": "h100", "tp": 8, "host_memory_gib": "dgx-h1000"})
    assert_user_error(invoke("validate", path), "hardware.host_memory_gib", "unknown node preset", "dgx-h100")


def test_local_is_refused_in_a_scenario_file(tmp_path):
    """The machine a scenario is run on must not change its result: local is for the command line."""
    path, _ = scenario(tmp_path, {"gpu": "h100", "tp": 8, "host_memory_gib": "local"})
    assert_user_error(invoke("validate", path), "hardware.host_memory_gib", "--node-memory local")


# ------------------------------------------------------------------------------------------ local


def fake_proc(tmp_path, *, available_gib: float, cgroup: str = "", mounts: list[str] = ()) -> object:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True, exist_ok=True)
    (proc / "meminfo").write_text(
        f"MemTotal:       999999999 kB\nMemFree:         1000 kB\nMemAvailable:   {int(available_gib * 2**20)} kB\n"
    )
    (proc / "self" / "cgroup").write_text(cgroup)
    (proc / "self" / "mountinfo").write_text("".join(f"{m}\n" for m in mounts))
    return proc


def v2_proc(tmp_path, member: str, available_gib: float):
    """A process in cgroup v2 group ``member`` under a cgroup2 mount at ``tmp_path/cg``."""
    mount = f"30 23 0:26 / {tmp_path / 'cg'} rw - cgroup2 cgroup2 rw"
    return fake_proc(tmp_path, available_gib=available_gib, cgroup=f"0::{member}\n", mounts=[mount])


def group(directory, **files: str):
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name.replace("_", ".", 1)).write_text(text)


def stat_v2(active_gib: float, inactive_gib: float) -> str:
    return f"anon 1\nactive_file {int(active_gib * GIB)}\ninactive_file {int(inactive_gib * GIB)}\n"


def test_local_without_a_cgroup_limit_is_memavailable(tmp_path):
    """The root group has no memory.max: nothing lowers MemAvailable."""
    root = tmp_path / "cg"
    group(root, memory_stat=stat_v2(0, 0))
    proc = v2_proc(tmp_path, "/", 300)
    m = read_local_memory(proc)
    assert (m.bytes, m.cgroup) == (300 * GIB, None)
    assert "no cgroup memory limit" in m.describe()


def test_local_cgroup_v2_headroom_wins_when_lower(tmp_path):
    """memory.max 64 GiB, 10 GiB in use of which 4 GiB is file cache (reclaimable, as MemAvailable counts
    it): 64 - 6 = 58 GiB of headroom, below MemAvailable's 300."""
    root = tmp_path / "cg"
    group(root)
    group(
        root / "job",
        memory_max=str(64 * GIB),
        memory_high="max",
        memory_current=str(10 * GIB),
        memory_stat=stat_v2(1, 3),
    )
    proc = v2_proc(tmp_path, "/job", 300)
    m = read_local_memory(proc)
    assert m.bytes == 58 * GIB and m.uses_cgroup
    assert m.cgroup.file == "memory.max"
    assert "the cgroup's headroom is used" in m.describe()


def test_local_memavailable_wins_when_lower(tmp_path):
    root = tmp_path / "cg"
    group(root / "job", memory_max=str(64 * GIB), memory_current=str(GIB), memory_stat=stat_v2(0, 0))
    proc = v2_proc(tmp_path, "/job", 20)
    m = read_local_memory(proc)
    assert m.bytes == 20 * GIB and not m.uses_cgroup
    assert "MemAvailable is used" in m.describe()


def test_local_a_tighter_parent_and_memory_high_count(tmp_path):
    """Every level up to the mount's root, and memory.high as well as memory.max: the smallest headroom."""
    root = tmp_path / "cg"
    group(root / "a", memory_max=str(40 * GIB), memory_current=str(8 * GIB), memory_stat=stat_v2(0, 0))
    group(
        root / "a" / "b",
        memory_max="max",
        memory_high=str(100 * GIB),
        memory_current=str(GIB),
        memory_stat=stat_v2(0, 0),
    )
    proc = v2_proc(tmp_path, "/a/b", 500)
    m = read_local_memory(proc)
    assert m.bytes == 32 * GIB
    assert m.cgroup.directory == root / "a"


def test_local_protected_child_cancels_the_file_cache_credit(tmp_path):
    root = tmp_path / "cg"
    group(root / "job", memory_max=str(64 * GIB), memory_current=str(10 * GIB), memory_stat=stat_v2(2, 2))
    group(root / "job" / "db", memory_min=str(GIB))
    proc = v2_proc(tmp_path, "/job", 300)
    assert read_local_memory(proc).bytes == 54 * GIB


def test_local_child_without_memory_min_also_cancels_the_credit(tmp_path):
    """SGLang counts a child group it cannot read memory.min of (memory controller off below) as protected."""
    root = tmp_path / "cg"
    group(root / "job", memory_max=str(64 * GIB), memory_current=str(10 * GIB), memory_stat=stat_v2(2, 2))
    group(root / "job" / "worker")
    assert read_local_memory(v2_proc(tmp_path, "/job", 300)).bytes == 54 * GIB
    (root / "job" / "worker" / "memory.min").write_text("0\n")
    assert read_local_memory(v2_proc(tmp_path, "/job", 300)).bytes == 58 * GIB


def test_local_cgroup_v1_limit(tmp_path):
    """v1: memory.limit_in_bytes less memory.usage_in_bytes without total_(in)active_file."""
    mem = tmp_path / "memory"
    stat = f"cache 5\ntotal_active_file {GIB}\ntotal_inactive_file {GIB}\n"
    group(
        mem / "docker" / "abc",
        memory_limit_in_bytes=str(32 * GIB),
        memory_usage_in_bytes=str(6 * GIB),
        memory_stat=stat,
    )
    proc = fake_proc(
        tmp_path,
        available_gib=300,
        cgroup="5:cpu:/\n4:memory:/docker/abc\n0::/\n",
        mounts=[
            f"35 31 0:32 / {mem} rw,relatime - cgroup cgroup rw,memory",
            f"32 31 0:29 / {tmp_path / 'cpu'} rw,relatime - cgroup cgroup rw,cpu",
        ],
    )
    m = read_local_memory(proc)
    assert m.bytes == 28 * GIB and m.cgroup.file == "memory.limit_in_bytes"


def test_validate_node_memory_local_uses_the_machine(tmp_path, monkeypatch):
    root = tmp_path / "cg"
    group(root / "job", memory_max=str(64 * GIB), memory_current=str(10 * GIB), memory_stat=stat_v2(1, 3))
    proc = v2_proc(tmp_path, "/job", 300)
    monkeypatch.setattr(local_memory, "PROC", proc)
    path, _ = scenario(tmp_path, {"gpu": "h100", "tp": 8}, {"page_size": 64, "host_size_gb": 5})
    r = invoke("validate", path, "--node-memory", "local")
    assert r.exit_code == 0, r.output
    assert "of 58.0 GiB on the node" in r.output
    assert "node memory local: cgroup" in r.output and "the cgroup's headroom is used" in r.output


def test_local_unlocatable_cgroup_is_one_line(tmp_path, monkeypatch):
    """SGLang's auto-sizing refuses to start when the process's memory cgroup is under no mount."""
    proc = fake_proc(tmp_path, available_gib=300, cgroup="0::/job\n", mounts=["30 23 0:26 / /sys rw - sysfs sysfs rw"])
    monkeypatch.setattr(local_memory, "PROC", proc)
    path, _ = scenario(tmp_path, {"gpu": "h100", "tp": 8})
    assert_user_error(
        invoke("validate", path, "--node-memory", "local"), "--node-memory local", "cgroup", "--node-memory GIB"
    )


def test_local_without_memavailable_is_one_line(tmp_path, monkeypatch):
    proc = fake_proc(tmp_path, available_gib=1, cgroup="0::/\n")
    (proc / "meminfo").write_text("MemTotal: 10 kB\n")
    monkeypatch.setattr(local_memory, "PROC", proc)
    path, _ = scenario(tmp_path, {"gpu": "h100", "tp": 8})
    assert_user_error(invoke("validate", path, "--node-memory", "local"), "--node-memory local", "MemAvailable")


def _cgroup_as_folder(proc, root):
    (proc / "self" / "cgroup").unlink()
    (proc / "self" / "cgroup").mkdir()


def _mountinfo_as_folder(proc, root):
    (proc / "self" / "mountinfo").unlink()
    (proc / "self" / "mountinfo").mkdir()


@pytest.mark.parametrize(
    ("spoil", "fragments"),
    [
        # an unreadable /proc/self/cgroup or mountinfo was a traceback (only a missing one was handled)
        pytest.param(_cgroup_as_folder, ["self/cgroup", "cannot read"], id="cgroup-unreadable"),
        pytest.param(_mountinfo_as_folder, ["self/mountinfo", "cannot read"], id="mountinfo-unreadable"),
        # bytes that are not text: the line named no file
        pytest.param(
            lambda proc, root: (proc / "meminfo").write_bytes(b"\xff\xfe"), ["meminfo", "not text"], id="meminfo-binary"
        ),
        pytest.param(
            lambda proc, root: (root / "job" / "memory.max").write_text("lots\n"),
            ["job/memory.max", "expected an integer", "'lots'"],
            id="limit-not-a-number",
        ),
        # a group using all it may: 0 GiB was blamed on the scenario file's hardware.host_memory_gib
        pytest.param(
            lambda proc, root: (root / "job" / "memory.current").write_text(str(64 * GIB)),
            ["cgroup", "no host memory available"],
            id="no-headroom",
        ),
    ],
)
def test_local_unreadable_or_empty_machine_is_one_line(tmp_path, monkeypatch, spoil, fragments):
    root = tmp_path / "cg"
    group(root / "job", memory_max=str(64 * GIB), memory_current=str(GIB), memory_stat=stat_v2(0, 0))
    proc = v2_proc(tmp_path, "/job", 300)
    spoil(proc, root)
    monkeypatch.setattr(local_memory, "PROC", proc)
    path, _ = scenario(tmp_path, {"gpu": "h100", "tp": 8})
    assert_user_error(invoke("validate", path, "--node-memory", "local"), "--node-memory local", *fragments)


def test_local_memory_is_printed_to_a_tenth_of_a_gib(tmp_path):
    """The lowered host ratio's warning printed --node-memory local's figure as a float's every digit
    ('of 22.27517318725586 GiB less its 10 GiB reserve')."""
    _, data = scenario(tmp_path, {"gpu": "h100", "tp": 8, "host_memory_gib": 22.27517318725586})
    warnings = resolve(build_scenario(data, "s.yaml")).warnings
    assert any("of 22.3 GiB less its 10 GiB reserve" in w for w in warnings), warnings


def test_presets_lists_every_node():
    r = invoke("presets", "nodes")
    assert r.exit_code == 0
    for name in NODES.names():
        assert re.search(rf"^{re.escape(name)}: ", r.output, flags=re.M), name
    assert_user_error(invoke("presets", "racks"), "presets racks", "nodes, gpus, models")


def test_every_node_preset_has_its_documented_row():
    """docs/reference/hardware-and-models.md's node table carries each preset's figure, unit, GPUs and
    other names."""
    from pathlib import Path

    doc = Path(__file__).resolve().parent.parent / "docs" / "reference" / "hardware-and-models.md"
    rows = {}
    for line in doc.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.strip().startswith("| `") and len(cells) == 5:
            rows[cells[0].strip("`")] = cells
    for name in NODES.names():
        n = NODES.get(name)
        assert name in rows, f"{name}: no row in {doc.name}'s node table"
        _, also, installed, gpus, source = rows[name]
        assert installed == f"{n.memory:g} {n.unit}", name
        assert gpus == f"{n.gpus} x {n.gpu}", name
        assert re.findall(r"`([^`]+)`", also) == aliases(name), name
        assert len(source) > 10, name
