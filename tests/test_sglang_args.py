"""from-sglang and sglang-args: SGLang 0.5.23 launch commands <-> scenarios. Real command lines from
SGLang's docs and benchmark scripts (tests/data/sglang_commands.yaml, each with its source) go to a
scenario and back to the same modelled flags."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from conftest import invoke

from hicache_sim.scenario import load_scenario, resolve
from hicache_sim.sglang import from_command, to_command
from hicache_sim.sglang.flags import known_flags, parse_command
from hicache_sim.sglang.models import PRESET_MODELS, hf_id
from hicache_sim.sglang.table import ROWS

COMMANDS = yaml.safe_load((Path(__file__).parent / "data" / "sglang_commands.yaml").read_text())
LLAMA = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct"


def _args(line: str) -> dict:
    return parse_command(line).args


@pytest.mark.parametrize("case", COMMANDS, ids=[c["source"][:60] for c in COMMANDS])
def test_a_real_command_goes_to_a_scenario_and_back(case):
    conv = from_command(case["command"], preset=case.get("preset"))
    assert conv.unmodelled == case["unmodelled"]
    tokens, _ = to_command(conv.scenario)
    assert _args(shlex.join(tokens)) == _args(case["expected"])
    # the printed flags read back into a scenario that prints them again, with the same pools
    again = from_command(tokens, preset=case.get("preset"))
    assert to_command(again.scenario)[0] == tokens
    first, second = resolve(conv.scenario), resolve(again.scenario)
    assert (first.device_tokens, first.host_tokens) == (second.device_tokens, second.host_tokens)


def test_every_modelled_flag_is_a_flag_of_sglang_0_5_23():
    specs, _ = known_flags()
    assert len(specs) > 400
    for row in ROWS:
        for flag in row.flags:
            assert flag in specs, flag


def test_every_model_preset_has_a_hugging_face_id():
    from hicache_sim.hardware.presets import MODELS

    assert set(PRESET_MODELS) == set(MODELS.names())
    assert all("/" in hf_id(p) for p in PRESET_MODELS)


def _data(line: str, **kw) -> dict:
    return from_command(line, **kw).data


def test_flags_not_given_take_sglang_defaults():
    d = _data(LLAMA)
    assert d["cache"]["page_size"] == 1
    assert d["cache"]["host_tokens"] == 0  # no --enable-hierarchical-cache: no host tier
    assert d["scheduler"]["chunked_prefill_size"] == "auto"  # unset stays unset: SGLang's rule at resolve
    assert d["scheduler"]["max_running_requests"] == "auto"
    assert d["scheduler"]["max_prefill_tokens"] == 16384
    assert d["scheduler"]["schedule_policy"] == "fcfs"
    assert d["cache"]["eviction_policy"] == "lru"
    assert d["hardware"]["mem_fraction_static"] is None  # SGLang's rule, computed at resolve
    chunk = {g: resolve(from_command(LLAMA, gpu=g).scenario).chunked_prefill_size for g in ("h200", "b200", "a10")}
    assert chunk == {"h200": 8192, "b200": 16384, "a10": 4096}  # 141 GB: 8k; 183 GB: 16k; 24 GB: 4k
    assert any("--chunked-prefill-size unset: SGLang runs 8192" in n for n in from_command(LLAMA).notes)


def test_hicache_defaults_and_sizes_follow_sglang():
    on = from_command(f"{LLAMA} --enable-hierarchical-cache")
    c = on.data["cache"]
    assert (c["write_policy"], c["io_backend"], c["mem_layout"], c["storage_backend"]) == (
        "write_through",
        "kernel",
        "page_first",
        "none",
    )
    r = resolve(on.scenario)
    assert r.host_tokens == pytest.approx(2 * r.device_tokens, abs=2)  # ratio 2, +1 page alignment
    size = from_command(f"{LLAMA} --enable-hicache --hicache-ratio 3 --hicache-size 40")
    assert size.data["cache"]["host_size_gb"] == 40.0 and "host_ratio" not in size.data["cache"]
    assert any("overrides --hicache-ratio" in n for n in size.notes)


def test_max_running_requests_default_is_sglangs_rule_from_the_pool():
    conv = from_command(f"{LLAMA} --max-total-tokens 400000")
    # 400,000 tokens / 131,072 context x 512 = 1562, raised to 2048; at most half the pool
    assert resolve(conv.scenario).max_running_requests == 2048
    small = from_command(f"{LLAMA} --max-total-tokens 3000")
    assert resolve(small.scenario).max_running_requests == 1500
    given = from_command(f"{LLAMA} --max-total-tokens 3000 --max-running-requests 2000")
    assert given.data["scheduler"]["max_running_requests"] == 2000  # as given; SGLang lowers it at start
    assert resolve(given.scenario).max_running_requests == 1500


@pytest.mark.parametrize(
    ("flags", "field", "value"),
    [
        ("--tp 2", "hardware.tp", 2),
        ("--tensor-parallel-size 2", "hardware.tp", 2),
        ("--pp-size 2", "hardware.pp", 2),
        ("--mem-fraction-static 0.8", "hardware.mem_fraction_static", 0.8),
        ("--cuda-graph-max-bs-decode 64", "hardware.cuda_graph_max_bs", 64),
        ("--cuda-graph-backend-prefill disabled", "scheduler.cuda_graph_backend_prefill", "disabled"),
        ("--disable-prefill-cuda-graph", "scheduler.cuda_graph_backend_prefill", "disabled"),
        ("--disable-cuda-graph", "scheduler.cuda_graph_backend_prefill", "disabled"),
        ("--cuda-graph-backend-prefill full", "scheduler.cuda_graph_backend_prefill", "full"),
        ("--max-total-tokens 1M", "cache.device_tokens", 1_000_000),
        ("--max-total-tokens 512Ki", "cache.device_tokens", 524_288),
        ("--page-size 64", "cache.page_size", 64),
        ("--chunked-prefill-size -1", "scheduler.chunked_prefill_size", None),
        ("--chunked-prefill-size=4096", "scheduler.chunked_prefill_size", 4096),
        ("--max-prefill-tokens 32k", "scheduler.max_prefill_tokens", 32000),
        ("--max-running-requests 64", "scheduler.max_running_requests", 64),
        ("--schedule-policy lpm", "scheduler.schedule_policy", "lpm"),
        ("--radix-eviction-policy slru", "cache.eviction_policy", "slru"),
        (
            "--radix-eviction-policy-config '{\"protected_threshold\":4}'",
            "cache.eviction_policy_config",
            {"protected_threshold": 4},
        ),
        ("--kv-cache-dtype fp8_e4m3", "model.dtype", "fp8"),
        ("--enable-hicache --hicache-ratio 1.5", "cache.host_ratio", 1.5),
        ("--enable-hicache --hicache-write-policy write_back", "cache.write_policy", "write_back"),
        ("--enable-hicache --hicache-io-backend direct", "cache.io_backend", "direct"),
        ("--enable-hicache --hicache-mem-layout layer_first", "cache.mem_layout", "layer_first"),
        ("--enable-hicache --hicache-storage-backend 3fs", None, None),
        ("--enable-hicache --hicache-storage-backend file", "cache.storage_backend", "file"),
        (
            "--enable-hicache --hicache-storage-backend nixl --hicache-storage-prefetch-policy best_effort",
            "cache.prefetch_policy",
            "best_effort",
        ),
        (
            "--enable-hicache --hicache-storage-backend mooncake --hicache-storage-backend-extra-config "
            '\'{"prefetch_threshold":128,"prefetch_timeout_base":0.5}\'',
            "cache.prefetch_timeout_base_s",
            0.5,
        ),
        (
            "--enable-hicache --hicache-host-memory-mode buffer_only --hicache-storage-backend mooncake",
            "cache.host_memory_mode",
            "buffer_only",
        ),
        ("--attention-backend flashmla", "cache.page_size", 64),
        ("--tp-size 8 --disable-custom-all-reduce", "hardware.custom_allreduce_max_mib", 0.0),
    ],
)
def test_each_modelled_flag_sets_its_field(flags, field, value):
    line = f"{LLAMA} {flags}"
    if field is None:  # 3fs is this project's old name, not SGLang's: refused as SGLang would
        with pytest.raises(ValueError, match="3fs"):
            from_command(line)
        return
    node = from_command(line).data
    for part in field.split("."):
        node = node[part]
    assert node == value


def test_hicache_flags_without_hicache_are_noted_not_read():
    conv = from_command(f"{LLAMA} --hicache-ratio 4 --hicache-write-policy write_back")
    assert conv.data["cache"]["host_tokens"] == 0 and "write_policy" not in conv.data["cache"]
    assert any("--hicache-write-policy" in n and "without --enable-hierarchical-cache" in n for n in conv.notes)


def test_unmodelled_extra_config_keys_are_noted():
    line = (
        f"{LLAMA} --enable-hicache --hicache-storage-backend mooncake --hicache-storage-backend-extra-config "
        '\'{"master_server_address":"m:50051","prefetch_threshold":64}\''
    )
    conv = from_command(line)
    assert conv.data["cache"]["prefetch_threshold"] == 64
    assert any("not modelled: master_server_address" in n for n in conv.notes)


def test_sglang_args_names_storage_disks_by_sglangs_backend_and_says_what_no_flag_sets():
    sc = load_scenario("scenarios/long_context_l3.yaml", ["cache.host_eviction=reclaim_mirrors"])
    tokens, notes = to_command(sc)
    args = parse_command(tokens).args
    assert args["--hicache-storage-backend"] == "file"  # local_nvme: a disk the file backend writes to
    assert any("local_nvme" in n and "file backend" in n for n in notes)
    assert any(n.startswith("cache.host_eviction=reclaim_mirrors: no SGLang flag") for n in notes)


def test_a_host_size_sglang_cannot_say_is_printed_as_the_resolved_ratio():
    sc = load_scenario("builtin:default", ["cache.host_ratio=null", "cache.host_tokens=8192"])
    r = resolve(sc)
    tokens, notes = to_command(sc)
    assert float(parse_command(tokens).args["--hicache-ratio"]) == pytest.approx(
        r.host_tokens / r.device_tokens, rel=1e-3
    )
    assert any("host_tokens=8192" in n for n in notes)


def test_from_sglang_cli_writes_a_scenario_that_runs_and_lists_unmodelled_flags_in_one_warning(tmp_path):
    out = tmp_path / "s.yaml"
    res = invoke(
        "from-sglang",
        "--out",
        out,
        "--mode",
        "instant",
        "--",
        *shlex.split(f"{LLAMA} --host 0.0.0.0 --port 30000 --page-size 64 --enable-hicache --trust-remote-code"),
    )
    assert res.exit_code == 0, res.output
    warnings = [ln for ln in res.output.splitlines() if ln.startswith("warning: not modelled")]
    assert warnings == ["warning: not modelled (no effect on the simulation): --host --port --trust-remote-code"]
    text = out.read_text()
    assert text.startswith("# Made by hicache-sim from-sglang")
    sc = load_scenario(out)
    assert sc.cache.page_size == 64 and sc.model.preset == "llama-3.1-8b"
    line = invoke("sglang-args", out)
    assert line.exit_code == 0, line.output
    assert line.stdout.strip() == (
        "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --page-size 64 "
        "--enable-hierarchical-cache"
    )


def test_from_sglang_cli_takes_the_command_as_one_string_and_prints_to_stdout():
    res = invoke("from-sglang", "--", f"{LLAMA} \\\n  --tp 2")
    assert res.exit_code == 0, res.output
    assert yaml.safe_load(res.stdout)["hardware"]["tp"] == 2


def test_sglangs_spellings_load_in_scenarios_and_old_names_still_do():
    from hicache_sim.scenario import build_scenario

    assert build_scenario({"scheduler": {"chunked_prefill_size": -1}}, "s").scheduler.chunked_prefill_size is None
    old = resolve(build_scenario({"cache": {"storage_backend": "3fs"}}, "s"))
    new = resolve(build_scenario({"cache": {"storage_backend": "hf3fs"}}, "s"))
    assert old.cache.storage and (old.storage_read_Bps, old.storage_latency_s) == (
        new.storage_read_Bps,
        new.storage_latency_s,
    )
    tokens, _ = to_command(build_scenario({"cache": {"storage_backend": "3fs"}}, "s"))
    assert parse_command(tokens).args["--hicache-storage-backend"] == "hf3fs"


def test_from_sglang_says_what_the_scenario_cannot_follow():
    conv = from_command(
        f"{LLAMA} --enable-hicache --hicache-storage-backend hf3fs --schedule-policy lpm", mode="instant"
    )
    assert any("caps no storage prefetch timeout" in n for n in conv.notes)
    assert any("timed mode only" in n for n in conv.notes)


def test_disabling_sglangs_custom_all_reduce_round_trips_and_a_cap_no_flag_sets_is_noted():
    conv = from_command(f"{LLAMA} --tp-size 8 --disable-custom-all-reduce")
    assert "--disable-custom-all-reduce" in to_command(conv.scenario)[0]
    assert "--disable-custom-all-reduce" not in to_command(from_command(f"{LLAMA} --tp-size 8").scenario)[0]
    sc = from_command(f"{LLAMA} --tp-size 8").scenario
    sc = sc.model_copy(update={"hardware": sc.hardware.model_copy(update={"custom_allreduce_max_mib": 4.0})})
    tokens, notes = to_command(sc)
    assert "--disable-custom-all-reduce" not in tokens
    assert any("custom_allreduce_max_mib=4.0: no SGLang flag sets the cap (8 MiB" in n for n in notes)


def test_the_readme_transcript_is_what_from_sglang_prints(tmp_path, monkeypatch):
    """The README's from-sglang / sglang-args session, replayed: every line it shows, in its order."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    block = readme.split("$ hicache-sim from-sglang", 1)[1].split("```", 1)[0]
    first, second = block.split("$ hicache-sim sglang-args s.yaml")
    lines = first.splitlines()
    end = next(i for i, ln in enumerate(lines) if not ln.endswith("\\"))  # the command's last line
    args = shlex.split(" ".join(ln.rstrip("\\") for ln in lines[: end + 1]))
    shown = lines[end + 1 :]
    monkeypatch.chdir(tmp_path)
    res = invoke("from-sglang", *args)
    assert res.exit_code == 0, res.output
    assert res.output.splitlines() == [ln for ln in shown if ln], res.output
    line = invoke("sglang-args", "s.yaml")
    assert line.exit_code == 0 and line.stdout.strip() == second.strip(), line.output
