"""Flag values as SGLang 0.5.23's parser checks them (issue 29 items 1 and 10): every command
``sglang-args`` prints is one SGLang takes, a scenario setting SGLang has no flag value for prints no
command, ``from-sglang`` refuses a value SGLang refuses at start-up, and flags of older SGLang
releases are read as SGLang itself renamed them or refused naming the versions that had them.

The oracle below reads the stored flag list (``data/sglang/server_args-0.5.23.json``, extracted from
the wheel) on its own: spellings, types and choices, nothing of ``hicache_sim.sglang.flags``."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from conftest import invoke

from hicache_sim.core import EVICTION_STRATEGIES, PREFETCH_STOP_POLICIES, WRITE_POLICIES
from hicache_sim.core.schedule import SCHEDULE_POLICIES
from hicache_sim.hardware.presets import IO_BACKENDS, MEM_LAYOUTS, STORAGE
from hicache_sim.scenario import load_scenario
from hicache_sim.sglang import SglangArgsError, from_command, to_command

DATA = Path(__file__).resolve().parent.parent / "hicache_sim" / "data" / "sglang"
FLAGS = json.loads((DATA / "server_args-0.5.23.json").read_text())["flags"]
SPELLING = {s: name for name, f in FLAGS.items() for s in (name, *f["aliases"])}
BUILTINS = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "scenarios").glob("*.yaml"))
LLAMA = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct"


def _converts(kind: str | None, raw: str) -> object:
    """``raw`` through the conversion argparse applies in SGLang 0.5.23 (raises ValueError)."""
    if kind == "int":
        return int(raw)
    if kind == "float":
        return float(raw)
    if kind == "json":
        return json.loads(raw)
    if kind == "human_int" and not re.fullmatch(r"\d+(Ki|Mi|Gi|Ti)|\d+(\.\d+)?(k|M|G|T)", raw.strip()):
        return int(raw)
    return raw


def sglang_refuses(tokens: list[str]) -> list[str]:
    """What SGLang 0.5.23's parser refuses in a launch command (empty: it starts)."""
    assert tokens[:3] == ["python", "-m", "sglang.launch_server"]
    problems, rest, i = [], tokens[3:], 0
    while i < len(rest):
        flag = rest[i]
        if flag not in SPELLING:
            problems.append(f"{flag}: not a flag")
            i += 1
            continue
        spec = FLAGS[SPELLING[flag]]
        i += 1
        values = []
        while i < len(rest) and not rest[i].startswith("--"):
            values.append(rest[i])
            i += 1
        want = {"none": 0, "one": 1}.get(spec["arity"])
        if (want is not None and len(values) != want) or (spec["arity"] == "many" and not values):
            problems.append(f"{flag}: {len(values)} values")
        for raw in values:
            try:
                value = _converts(spec["type"], raw)
            except ValueError:
                problems.append(f"{flag} {raw}: not {spec['type']}")
                continue
            if spec["choices"] is not None and value not in spec["choices"]:
                problems.append(f"{flag} {raw}: not in {spec['choices']}")
    return problems


# (scenario field, the flag it is written as, its values, the flag value each is written as, a builtin
# scenario where the flag is written at all)
GRID = [
    ("cache.eviction_policy", "--radix-eviction-policy", EVICTION_STRATEGIES.names(), str, "default"),
    ("cache.write_policy", "--hicache-write-policy", WRITE_POLICIES.names(), str, "default"),
    ("cache.io_backend", "--hicache-io-backend", IO_BACKENDS, str, "default"),
    ("cache.mem_layout", "--hicache-mem-layout", MEM_LAYOUTS, str, "default"),
    ("cache.host_memory_mode", "--hicache-host-memory-mode", ("cache", "buffer_only"), str, "long_context_l3"),
    ("scheduler.schedule_policy", "--schedule-policy", SCHEDULE_POLICIES.names(), str, "default"),
    (
        "cache.prefetch_policy",
        "--hicache-storage-prefetch-policy",
        PREFETCH_STOP_POLICIES.names(),
        str,
        "long_context_l3",
    ),
    (
        "cache.storage_backend",
        "--hicache-storage-backend",
        [n for n in STORAGE.names() if n != "none"],
        lambda n: STORAGE.get(n).sglang_backend,
        "long_context_l3",
    ),
]
# Numbers and sizes: each printed value must convert as SGLang converts it (int, float, JSON, k/Ki).
SIZES = [
    ["cache.host_ratio=1.5"],
    ["cache.host_ratio=null", "cache.host_size_gb=37.5", "cache.host_alignment=up_plus_one"],
    ["cache.host_ratio=null", "cache.host_size_gb=40", "cache.host_alignment=up_plus_one"],
    ["cache.page_size=64", "scheduler.chunked_prefill_size=4096", "scheduler.max_prefill_tokens=32000"],
    ["cache.device_tokens=500000", "scheduler.max_running_requests=64"],
    ["model.dtype=fp8", "hardware.mem_fraction_static=0.8", "hardware.cuda_graph_max_bs=96"],
    ["cache.eviction_policy=slru", 'cache.eviction_policy_config={"protected_threshold": 4}'],
]
# A strategy SGLang runs only with its config (tlru: SGLang refuses threshold <= next_prompt_estimate).
NEEDS_CONFIG = {"tlru": '{"threshold": 2048, "next_prompt_estimate": 512}'}


def _sets(field: str, value: str) -> list[str]:
    config = NEEDS_CONFIG.get(value) if field == "cache.eviction_policy" else None
    return [f"{field}={value}", *([f"cache.eviction_policy_config={config}"] if config else [])]


CASES = [
    *(pytest.param(f"builtin:{name}", [], None, id=f"builtin:{name}") for name in BUILTINS),
    *(pytest.param("builtin:default", sets, None, id=" ".join(sets)) for sets in SIZES),
    *(
        pytest.param(
            f"builtin:{base}", _sets(field, value), (field, value, flag, written(value)), id=f"{field}={value}"
        )
        for field, flag, values, written, base in GRID
        for value in values
    ),
]


@pytest.mark.parametrize(("scenario", "sets", "setting"), CASES)
def test_every_sglang_args_output_is_a_command_sglang_0_5_23_takes(scenario, sets, setting):
    """Every builtin scenario, sizes, and each value of each flag-backed cache setting: the command is
    one SGLang 0.5.23's parser takes, or, for a value SGLang has no flag value for (fifo, mru, filo),
    no command and an error naming the field, the flag and SGLang's choices."""
    sc = load_scenario(scenario, sets)
    field, value, flag, written = setting or (None, None, None, None)
    if setting is None or written in FLAGS[flag]["choices"]:
        tokens, _ = to_command(sc)
        assert sglang_refuses(tokens) == []
        return
    with pytest.raises(SglangArgsError) as err:
        to_command(sc)
    msg = str(err.value)
    assert msg.startswith(f"{field}={value}: SGLang 0.5.23 cannot run this scenario: {flag} {written}:"), msg
    assert ", ".join(FLAGS[flag]["choices"]) in msg


def test_sglang_args_prints_no_command_for_fifo_and_says_why_in_one_line():
    """The issue's own case: ``--set cache.eviction_policy=fifo`` printed ``--radix-eviction-policy fifo``."""
    res = invoke("sglang-args", "builtin:default", "--set", "cache.eviction_policy=fifo")
    assert res.exit_code == 2 and res.stdout == "", res.output
    (line,) = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert line.startswith("error: builtin:default: cache.eviction_policy=fifo: SGLang 0.5.23 cannot run")
    assert "--radix-eviction-policy fifo" in line and "lru, lfu, slru, priority, tlru" in line


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        # values the simulator models (or once took) that SGLang 0.5.23 refuses
        ("--radix-eviction-policy fifo", "--radix-eviction-policy fifo: not one of sglang 0.5.23's choices (lru, lfu"),
        ("--radix-eviction-policy=mru", "--radix-eviction-policy mru: not one of sglang 0.5.23's choices"),
        ("--enable-hierarchical-cache --hicache-mem-layout page_major", "(layer_first, page_first, page_first_direct"),
        ("--max-total-tokens 1e3k", "--max-total-tokens: expected an integer (suffixes"),
        # flags the simulator does not model are checked too
        ("--load-balance-method shortest_queue", "(sglang 0.4.10, 0.5.2 took it)"),
        ("--load-format safetensorz", "--load-format safetensorz: not one of sglang 0.5.23's choices (auto, pt"),
        ("--port http", "--port: expected an integer, got 'http'"),
        ("--watchdog-timeout soon", "--watchdog-timeout: expected a number, got 'soon'"),
    ],
)
def test_from_sglang_refuses_a_value_sglang_refuses_at_start_up(flags, says):
    with pytest.raises(SglangArgsError) as err:
        from_command(f"{LLAMA} {flags}")
    assert says in str(err.value), str(err.value)
    assert "refuses it at start-up" in str(err.value)


# ----------------------------------------------------------------------- older launch lines


# Launch lines as users paste them, with flags of earlier SGLang releases.
OLD_LINES = [
    pytest.param(
        # shahidmuneer-skku/promptpeek-attack shahid/run_sglang.sh (continuations joined; a 1.5B Qwen2.5,
        # read as the qwen2.5-7b preset)
        "python -m sglang.launch_server --model Qwen/Qwen2.5-1.5B-Instruct --attention-backend triton "
        "--mem-fraction-static 0.85 --schedule-policy lpm --cuda-graph-max-bs 16 --disable-cuda-graph",
        "qwen2.5-7b",
        {"hardware.cuda_graph_max_bs": 16, "scheduler.schedule_policy": "lpm"},
        "--cuda-graph-max-bs: a flag of sglang 0.4.10, 0.5.2, 0.5.19, ambiguous in 0.5.23 (could be "
        "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill); read as --cuda-graph-max-bs-decode, as sglang "
        "0.5.19 did (its deprecated alias of --cuda-graph-max-bs-decode)",
        id="cuda-graph-max-bs",
    ),
    pytest.param(
        # benenzhu/sglang_P run_server.sh (the `=` form; --disable-radix-cache dropped: not modelled)
        "python -m sglang.launch_server --model /A/nvme4n1p1/DeepSeek-R1-0528 --cuda-graph-max-bs=8 --tp 8 "
        "--chunked-prefill-size=131072 --num-continuous-decode-steps=4 --max-prefill-tokens=131072 "
        "--kv-cache-dtype fp8_e4m3 --attention-backend aiter --mem-fraction-static=0.8 --load-format dummy",
        "deepseek-r1",
        {"hardware.cuda_graph_max_bs": 8, "hardware.tp": 8, "scheduler.chunked_prefill_size": 131072},
        "read as --cuda-graph-max-bs-decode",
        id="cuda-graph-max-bs=",
    ),
    pytest.param(
        # a prefill-graph switch of sglang 0.5.1x, as its --help listed it
        f"{LLAMA} --enable-breakable-cuda-graph",
        None,
        {"scheduler.cuda_graph_backend_prefill": "breakable"},
        "--enable-breakable-cuda-graph: a flag of sglang 0.5.19, gone from 0.5.23; read as "
        "--cuda-graph-backend-prefill breakable",
        id="switch-to-value",
    ),
]


@pytest.mark.parametrize(("line", "preset", "fields", "note"), OLD_LINES)
def test_a_renamed_flag_of_an_older_release_is_read_as_sglang_renamed_it(line, preset, fields, note):
    conv = from_command(line, preset=preset)
    for dotted, value in fields.items():
        node = conv.data
        for part in dotted.split("."):
            node = node[part]
        assert node == value, dotted
    assert any(note in n for n in conv.notes), conv.notes
    tokens, _ = to_command(conv.scenario)  # sglang-args prints the 0.5.23 name
    assert sglang_refuses(tokens) == []
    assert not any(t in ("--cuda-graph-max-bs", "--enable-breakable-cuda-graph") for t in tokens)


def test_a_flag_sglang_0_5_23_deprecates_is_read_with_its_replacement_named():
    """``--enable-dp-attention`` and ``--disable-cuda-graph`` still work in 0.5.23, with a warning."""
    conv = from_command(f"{LLAMA} --tp 8 --dp-size 8 --enable-dp-attention --disable-cuda-graph")
    assert conv.data["scheduler"]["cuda_graph_backend_prefill"] == "disabled"
    deprecated = sorted(n for n in conv.notes if "deprecated in sglang 0.5.23" in n)
    assert deprecated == [
        "--disable-cuda-graph: deprecated in sglang 0.5.23 (a warning at start-up); its replacement: "
        "--cuda-graph-backend-{decode,prefill}=disabled",
        "--enable-dp-attention: deprecated in sglang 0.5.23 (a warning at start-up); its replacement: "
        "--attn-dp-size <dp-size>",
    ]


def test_the_cli_prints_the_rename_as_a_warning(tmp_path):
    res = invoke("from-sglang", "--out", tmp_path / "s.yaml", "--", *shlex.split(f"{LLAMA} --cuda-graph-max-bs 64"))
    assert res.exit_code == 0, res.output
    assert any(ln.startswith("warning: --cuda-graph-max-bs: a flag of sglang") for ln in res.output.splitlines())
    assert load_scenario(tmp_path / "s.yaml").hardware.cuda_graph_max_bs == 64


@pytest.mark.parametrize(
    ("line", "says"),
    [
        pytest.param(
            # sgl-project/sglang PR #5932 description (its launch line, 8xH200)
            "python3 -m sglang.launch_server --model Qwen/Qwen3-235B-A22B-FP8  --tp 8  --reasoning-parser qwen3 "
            "--quantization fp8 --enable-ep-moe",
            "--enable-ep-moe: a flag of sglang 0.4.10, 0.5.2, gone from 0.5.23: SGLang 0.5.23 refuses it at "
            "start-up; remove it from the command",
            id="enable-ep-moe",
        ),
        pytest.param(
            f"{LLAMA} --collect-tokens-histogram",
            "--collect-tokens-histogram: a flag of sglang 0.4.10, 0.5.2, 0.5.19, gone from 0.5.23",
            id="deprecated-without-rename",
        ),
        pytest.param(
            # sglang 0.5.19 renamed it to --cuda-graph-backend-prefill=tc_piecewise, a value 0.5.23 removed
            f"{LLAMA} --enforce-piecewise-cuda-graph",
            "--enforce-piecewise-cuda-graph: a flag of sglang 0.5.19, gone from 0.5.23",
            id="renamed-to-a-removed-value",
        ),
    ],
)
def test_a_flag_only_older_releases_had_is_refused_naming_them(line, says):
    with pytest.raises(SglangArgsError) as err:
        from_command(line, preset="qwen3-235b-a22b")
    assert str(err.value) == says or str(err.value).startswith(says), str(err.value)
