"""The standing guard for bad input: every case a user has hit (or could) gives exit code 2, exactly one
``error:`` line naming the file, flag or field and what was expected, no traceback, nothing written and
the user's files untouched. Add a row to a table for each new case.

A hypothesis test at the end feeds values of the wrong type or range to every schema field.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
import yaml
from conftest import TINY_SCENARIO, assert_user_error, invoke
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TINY = TINY_SCENARIO
CUSTOM_MODEL = {"num_layers": 4, "num_kv_heads": 6, "q_heads": 24, "head_dim": 64, "params_b": 1.0}
#: Rows of replay and validate-model, which need torch before they read the flag the row is about: without
#: the replay extra (`pip install -e '.[dev]'` alone) they answer "needs torch" first, one line, exit 2
#: (tests/test_replay_integrity.py::test_import_without_torch_names_the_extra).
needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="needs torch (the replay extra): without it replay and validate-model refuse first with 'needs torch'",
)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes (hidden ones included): what the user had."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def write_scenario(folder: Path, content) -> Path:
    path = folder / "bad.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content), encoding="utf-8")
    return path


def with_(section: str, **fields) -> dict:
    data = {**TINY, section: {**TINY.get(section, {}), **fields}}
    return data


# --------------------------------------------------------------------------- scenario files

SCENARIO_CASES = [
    pytest.param(b"name: x\ncache: {page_size: \xff\xfe}\n", ["bad.yaml", "not UTF-8"], id="non-utf8"),
    pytest.param("", ["bad.yaml", "empty scenario"], id="empty-file"),
    pytest.param("# only a comment\n", ["bad.yaml", "empty scenario"], id="comment-only"),
    pytest.param("- 1\n- 2\n", ["bad.yaml", "mapping at the top level"], id="top-level-list"),
    pytest.param(
        "name: a\ncache:\n  host_ratio: 2\n  host_ratio: 0.5\n",
        ["bad.yaml:4", "found duplicate key 'host_ratio'"],
        id="key-given-twice",
    ),
    pytest.param({**TINY, "name": ""}, ["bad.yaml", "name", "one plain folder name"], id="name-empty"),
    pytest.param({**TINY, "name": "."}, ["bad.yaml", "name", "one plain folder name"], id="name-dot"),
    pytest.param({**TINY, "name": ".."}, ["bad.yaml", "name", "one plain folder name"], id="name-dotdot"),
    pytest.param({**TINY, "name": "../../x"}, ["bad.yaml", "name", "one plain folder name"], id="name-escapes"),
    pytest.param({**TINY, "name": "/tmp/x"}, ["bad.yaml", "name", "one plain folder name"], id="name-absolute"),
    pytest.param({**TINY, "name": "a\\b"}, ["bad.yaml", "name", "one plain folder name"], id="name-backslash"),
    pytest.param(with_("cache", host_ratio=float("inf")), ["cache.host_ratio", "finite"], id="inf-ratio"),
    pytest.param(with_("cache", host_ratio=float("nan")), ["cache.host_ratio", "finite"], id="nan-ratio"),
    pytest.param(
        {**TINY, "scheduler": {"chunked_prefill_size": 256}},
        ["scheduler.chunked_prefill_size (256)", "cache.page_size (512)"],
        id="chunk-below-page",
    ),
    pytest.param(
        {**with_("cache", page_size=100_000), "scheduler": {"chunked_prefill_size": 8192}},
        ["chunked_prefill_size (8192)", "cache.page_size (100000)"],
        id="page-of-100k-tokens",
    ),
    pytest.param({**TINY, "hardware": {"tp": 3}}, ["hardware.tp", "32 attention heads"], id="tp-vs-heads"),
    pytest.param(
        with_("scheduler", max_running_requests="lots"),
        ["scheduler.max_running_requests", "expected a positive integer or auto", "'lots'"],
        id="running-cap-not-a-number",
    ),
    pytest.param(
        with_("scheduler", chunked_prefill_size=0),
        ["scheduler.chunked_prefill_size", "positive integer or auto or null / -1", "got 0"],
        id="chunk-zero",
    ),
    pytest.param(
        {**with_("cache", page_size=16384, device_tokens=16384 * 40), "scheduler": {"chunked_prefill_size": "auto"}},
        ["scheduler.chunked_prefill_size", "auto is 8192 tokens on h200", "cache.page_size (16384)"],
        id="auto-chunk-below-page",
    ),
    pytest.param(
        {**TINY, "mode": "timed", "model": CUSTOM_MODEL, "scheduler": {"chunked_prefill_size": None}},
        ["scheduler.max_running_requests", "auto", "model.context_len"],
        id="auto-running-cap-without-context-length",
    ),
    pytest.param(
        {**TINY, "cache": {**TINY["cache"], "host_ratio": None}, "hardware": {"host_memory_gib": 8}},
        ["hardware.host_memory_gib", "no host memory after SGLang's 10 GiB reserve"],
        id="host-memory-below-reserve",
    ),
    pytest.param(
        {**TINY, "cache": {**TINY["cache"], "host_ratio": None}, "hardware": {"host_memory_gib": 1e308}},
        ["hardware.host_memory_gib", "at most 4194304"],
        id="host-memory-past-what-a-node-addresses",
    ),
    pytest.param(
        # the target's MTP module overridden where model.nextn_params_b is meant (the line said
        # "model.speculative: model.speculative: ..." and named no remedy)
        {**TINY, "model": {"preset": "deepseek-v3", "speculative": {"algorithm": "nextn", "params_b": 3}}},
        ["bad.yaml: model.speculative: a draft given by dimensions needs num_layers", "model.nextn_params_b"],
        id="draft-parameters-without-layers",
    ),
    pytest.param(
        # a 200 B-parameter draft leaves no pool: the line named only the target's 8 B parameters
        {
            **TINY,
            "cache": {**TINY["cache"], "device_tokens": None},
            "model": {
                "preset": "llama-3.1-8b",
                "speculative": {"algorithm": "eagle3", "num_layers": 1, "params_b": 200},
            },
        },
        ["hardware.mem_fraction_static", "leaves no KV pool", "the speculative draft's 372.53 GiB"],
        id="draft-weights-leave-no-pool",
    ),
    pytest.param(
        {**TINY, "hardware": {"host_memory_gib": "2TB"}},
        ["hardware.host_memory_gib", "GiB as a bare number", "'2TB'"],
        id="host-memory-with-a-unit",
    ),
    pytest.param(
        with_("cache", host_memory_fraction=1.5), ["cache.host_memory_fraction", "less than or equal to 1"], id="frac>1"
    ),
    pytest.param(
        with_("scheduler", schedule_policy="shortest-prefill-first"),
        ["scheduler.schedule_policy", "'shortest-prefill-first' is not modelled", "modelled: fcfs"],
        id="unmodelled-schedule-policy",
    ),
    pytest.param(
        {**TINY, "model": CUSTOM_MODEL, "hardware": {"tp": 4}}, ["hardware.tp", "6 KV heads"], id="tp-vs-kv-heads"
    ),
    pytest.param(
        {**TINY, "hardware": {"pp": 3}}, ["hardware.pp", "3 does not divide the 32 layers"], id="pp-vs-layers"
    ),
    pytest.param({**TINY, "hardware": {"pp": 0}}, ["hardware.pp", "greater than 0"], id="pp-zero"),
    pytest.param(
        {**TINY, "hardware": {"mfu": 0.5, "linear_mfu": 0.6}}, ["hardware", "give mfu", "linear_mfu"], id="mfu-twice"
    ),
    pytest.param(
        {**TINY, "hardware": {"attention_mfu": 1.5}}, ["hardware.attention_mfu", "less than or equal to 1"], id="mfu>1"
    ),
    pytest.param(
        {**TINY, "hardware": {"request_overhead_us": -1}},
        ["hardware.request_overhead_us", "greater than or equal to 0"],
        id="negative-request-overhead",
    ),
    pytest.param({**TINY, "hardware": {"memory_mib": 0}}, ["hardware.memory_mib", "greater than 0"], id="memory-zero"),
    pytest.param(
        {**TINY, "hardware": {"allreduce_curve_exponent": 0}},
        ["hardware.allreduce_curve_exponent", "greater than 0"],
        id="allreduce-exponent-zero",
    ),
    pytest.param(
        {**TINY, "hardware": {"custom_allreduce_max_mib": -1}},
        ["hardware.custom_allreduce_max_mib", "greater than or equal to 0"],
        id="negative-custom-allreduce-cap",
    ),
    pytest.param(
        {**TINY, "model": {"preset": "llama-3.1-8b", "weights_dtype": "int4"}},
        ["model.weights_dtype", "'bf16', 'fp16' or 'fp8'"],
        id="weights-dtype",
    ),
    pytest.param(
        {
            **TINY,
            "model": "llama-3.1-70b",
            "hardware": {"gpu": "a10", "mem_fraction_static": 0.9},
            "cache": {"page_size": 512, "host_ratio": 0.5},
        },
        ["hardware.mem_fraction_static", "llama-3.1-70b leaves no KV pool on a10", "131.50 GiB weights"],
        id="weights-do-not-fit",
    ),
    pytest.param(
        {**TINY, "hardware": {"gpu": "a10", "cuda_graph_max_bs": 100000}},
        ["hardware.mem_fraction_static", "SGLang's default keeps nothing"],
        id="reserve-larger-than-gpu",
    ),
    pytest.param(
        {**TINY, "hardware": {"calibration": "builtin:no-such-calibration"}},
        ["no-such-calibration.yaml", "calibration file not found"],
        id="missing-calibration",
    ),
    pytest.param(
        {**TINY, "sweep": {"cache.host_ratio": [0.5, 1, 0.5]}},
        ["sweep", "cache.host_ratio", "twice"],
        id="duplicate-sweep-value",
    ),
    pytest.param(
        {**TINY, "sweep": {"cache": [{"host_ratio": 1}, {"host_ratio": 2}]}},
        ["sweep", "key 'cache'", "got a mapping", "sweep the dotted key inside it"],
        id="sweep-value-a-mapping",
    ),
    pytest.param(
        {**TINY, "hardware": {"pcie": {"latency_us": 1e24}}},
        ["hardware.pcie.latency_us", "less than"],
        id="cost-beyond-float-time",
    ),
    pytest.param(
        {**TINY, "workload": {"kind": "multiturn", "multiturn": {"num_clients": 100_000, "num_rounds": 200}}},
        ["workload.multiturn", "would generate"],
        id="workload-too-large",
    ),
    pytest.param(
        {**TINY, "workload": {"kind": "multiturn", "multiturn": {"ready_queue_policy": "lifo"}}},
        ["workload.multiturn.ready_queue_policy", "'random' or 'fifo'"],
        id="unknown-ready-queue-policy",
    ),
    pytest.param(
        {**TINY, "workload": {"kind": "bench_serving", "bench_serving": {"request_rate": -2}}},
        ["workload.bench_serving.request_rate", "positive number of requests per second or 'inf'"],
        id="bench-serving-negative-rate",
    ),
    pytest.param(
        {**TINY, "workload": {"kind": "bench_serving", "bench_serving": {"dataset_name": "sharegpt"}}},
        ["workload.bench_serving.dataset_name", "'random'"],
        id="bench-serving-unsupported-dataset",
    ),
    pytest.param(
        {**TINY, "workload": {"kind": "multiturn", "multiturn": {"min_rounds": 5, "max_rounds": 3}}},
        ["workload.multiturn", "min_rounds (5) must be <= max_rounds (3)"],
        id="round-range-reversed",
    ),
    pytest.param(
        {**TINY, "model": {"preset": "qwen3-30b-a3b", "experts_per_token": 300}},
        ["model.experts_per_token", "1 <= experts_per_token <= num_experts (128)"],
        id="moe-top-k-above-experts",
    ),
    pytest.param(
        {**TINY, "model": {"preset": "qwen3-30b-a3b", "moe_intermediate_size": 100_000}},
        ["model.num_experts", "routed experts alone hold", "params_b 30.5"],
        id="moe-experts-larger-than-the-model",
    ),
    pytest.param(with_("hardware", moe_mfu=1.5), ["hardware.moe_mfu", "1"], id="moe-mfu-above-one"),
    # pydantic reads true as 1 and false as 0: a boolean is never a size, a rate or a name
    pytest.param(with_("cache", page_size=True), ["cache.page_size", "expected an integer, got true"], id="bool-page"),
    pytest.param(with_("metrics", warmup_fraction=False), ["metrics.warmup_fraction", "a number"], id="bool-fraction"),
    pytest.param(with_("cache", write_policy=True), ["cache.write_policy", "a name, got true"], id="bool-policy"),
    pytest.param(
        {**TINY, "workload": {"kind": "multiturn", "multiturn": {"num_clients": True}}},
        ["workload.multiturn.num_clients", "an integer"],
        id="bool-in-a-workload-kind",
    ),
    pytest.param(
        with_("cache", eviction_policy="slru", eviction_policy_config={"protected_threshold": "abc"}),
        ["cache", "eviction_policy_config.protected_threshold", "non-negative integer", "'abc'"],
        id="slru-threshold-not-a-count",
    ),
    pytest.param(
        with_("cache", eviction_policy="slru", eviction_policy_config={"protected_treshold": 3}),
        ["eviction_policy_config", "unknown key 'protected_treshold'", "protected_threshold (slru)"],
        id="policy-config-typo",
    ),
    pytest.param(
        with_("cache", eviction_policy="tlru"),
        ["cache", "eviction_policy_config", "tlru needs threshold > next_prompt_estimate", "0 <= 0"],
        id="tlru-without-its-config",
    ),
    pytest.param(
        with_("cache", eviction_policy="tlru", eviction_policy_config={"threshold": 512, "next_prompt_estimate": 4096}),
        ["eviction_policy_config", "threshold > next_prompt_estimate", "512 <= 4096"],
        id="tlru-threshold-below-estimate",
    ),
    pytest.param(
        with_("cache", eviction_policy="tlru", eviction_policy_config={"threshold": -1}),
        ["eviction_policy_config.threshold", "non-negative integer", "-1"],
        id="tlru-negative-threshold",
    ),
    pytest.param(
        with_("cache", mem_layout="page_head", io_backend="direct"),
        ["cache.io_backend", "direct cannot copy the page_head host layout", "use kernel"],
        id="page-head-with-direct-io",
    ),
    pytest.param(
        with_("cache", mem_layout="page_first_kv_split"),
        ["cache.mem_layout", "page_first_kv_split", "kernel_ascend"],
        id="ascend-only-layout",
    ),
    # storage eviction models (core/stores.py): the name, a knob the model does not read, knob ranges
    pytest.param(
        {**with_("cache", storage_backend="file"), "hardware": {"storage": {"eviction": "fifo"}}},
        ["hardware.storage.eviction", "unknown storage eviction model 'fifo'", "mooncake"],
        id="store-model-unknown",
    ),
    pytest.param(
        {**with_("cache", storage_backend="file"), "hardware": {"storage": {"lease_s": 5}}},
        ["hardware.storage.lease_s", "the file store model does not read it", "mooncake"],
        id="store-knob-of-another-model",
    ),
    pytest.param(
        {**with_("cache", storage_backend="nixl"), "hardware": {"storage": {"low_watermark": 0.9}}},
        ["hardware.storage.low_watermark", "below high_watermark (0.8)", "0.9"],
        id="store-nixl-low-above-high",
    ),
    pytest.param(
        {**TINY, "hardware": {"storage": {"evict_ratio": 0.1}}},
        ["hardware.storage.evict_ratio", "no storage tier", "cache.storage_backend is none"],
        id="store-knob-without-store",
    ),
    pytest.param(
        {**with_("cache", storage_backend="mooncake"), "hardware": {"storage": {"high_watermark": 1.2}}},
        ["hardware.storage.high_watermark", "1"],
        id="store-watermark-above-one",
    ),
    # the offload disk behind a store (hardware.storage.offload, tests/test_storage_offload.py)
    pytest.param(
        {**with_("cache", storage_backend="file"), "hardware": {"storage": {"offload": {}}}},
        ["hardware.storage.offload", "the file backend does not offload", "mooncake"],
        id="offload-backend-that-does-not",
    ),
    pytest.param(
        {**TINY, "hardware": {"storage": {"offload": {"device": "local_nvme"}}}},
        ["hardware.storage.offload", "no storage tier", "cache.storage_backend is none"],
        id="offload-without-store",
    ),
    pytest.param(
        {**with_("cache", storage_backend="mooncake"), "hardware": {"storage": {"offload": {"device": "hf3fs"}}}},
        ["hardware.storage.offload.device", "'hf3fs' is not a local disk", "local_nvme"],
        id="offload-device-not-a-disk",
    ),
    pytest.param(
        {**with_("cache", storage_backend="mooncake"), "hardware": {"storage": {"offload": {"device": "ssd"}}}},
        ["hardware.storage.offload.device", "unknown storage backend 'ssd'", "local_nvme"],
        id="offload-device-unknown",
    ),
    pytest.param(
        {**with_("cache", storage_backend="mooncake"), "hardware": {"storage": {"offload": {"read_gbps": 0}}}},
        ["hardware.storage.offload.read_gbps", "greater than 0"],
        id="offload-read-rate-zero",
    ),
    pytest.param(
        {**with_("cache", storage_backend="mooncake"), "hardware": {"storage": {"offload": {"capacity_gb": -1}}}},
        ["hardware.storage.offload.capacity_gb", "greater than or equal to 0"],
        id="offload-negative-space",
    ),
    pytest.param(
        {**with_("cache", storage_backend="mooncake"), "hardware": {"storage": {"offload": {"latency": 5}}}},
        ["hardware.storage.offload", "latency"],
        id="offload-unknown-key",
    ),
]


@pytest.mark.parametrize(("content", "fragments"), SCENARIO_CASES)
@pytest.mark.parametrize("verb", ["run", "validate"])
def test_bad_scenario(tmp_path, verb, content, fragments):
    refused_without_writing(tmp_path, verb, content, fragments)


def refused_without_writing(tmp_path, verb: str, content: dict, fragments: list[str]) -> None:
    """``verb`` (run or validate) on a scenario of ``content``: one line naming every fragment, exit code
    2, nothing written."""
    sc = write_scenario(tmp_path, content)
    before = snapshot(tmp_path)
    extra = ["--out", tmp_path / "out"] if verb == "run" else []
    assert_user_error(invoke(verb, sc, *extra), *fragments)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("compute", "fragments"),
    [
        ({"linear_mfu": 2}, ["cal.yaml", "compute.linear_mfu", "(0, 1]"]),
        ({"flux": 1}, ["cal.yaml", "compute.flux", "unknown field"]),
        ({"moe_mfu": 0}, ["cal.yaml", "compute.moe_mfu", "(0, 1]"]),
    ],
)
def test_bad_compute_section_of_a_calibration_file(tmp_path, compute, fragments):
    cal = tmp_path / "cal.yaml"
    cal.write_text(yaml.safe_dump({"kind": "hicache-sim-calibration", "groups": [], "compute": compute}))
    sc = write_scenario(tmp_path, {**TINY, "hardware": {"calibration": str(cal)}})
    before = snapshot(tmp_path)
    assert_user_error(invoke("run", sc, "--out", tmp_path / "out"), *fragments)
    assert snapshot(tmp_path) == before


def test_scenario_path_is_a_folder(tmp_path):
    assert_user_error(invoke("validate", tmp_path), str(tmp_path), "is a folder")


# --------------------------------------------------------------------------- trace files

TRACE_CASES = [
    pytest.param(
        b'{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n\xff\xfe\n',
        ["trace.jsonl:2", "not UTF-8"],
        id="non-utf8-trace",
    ),
    pytest.param(b"", ["trace.jsonl", "no requests"], id="empty-trace"),
    pytest.param(b"{not json\n", ["trace.jsonl:1", "not valid JSON"], id="bad-json"),
    pytest.param(
        b'{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": '
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}\n",
        ["trace.jsonl:1", "nested deeper than"],
        id="deeply-nested-json",
    ),
    pytest.param(
        b'{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1], "cached_tokens": 11}\n',
        ["trace.jsonl:1", "'cached_tokens'", "0..input_length (10)", "11"],
        id="cached-tokens-past-the-prompt",
    ),
]


@pytest.mark.parametrize(("content", "fragments"), TRACE_CASES)
def test_bad_trace(tmp_path, content, fragments):
    (tmp_path / "trace.jsonl").write_bytes(content)
    sc = write_scenario(tmp_path, {**TINY, "workload": {"kind": "trace", "trace": {"path": "trace.jsonl"}}})
    before = snapshot(tmp_path)
    assert_user_error(invoke("run", sc, "--out", tmp_path / "out"), *fragments)
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------- --set

SET_CASES = [
    pytest.param("cache.host_ratio=", ["--set 'cache.host_ratio='", "empty value"], id="empty-value"),
    pytest.param("cache.host_ratio", ["--set 'cache.host_ratio'", "dotted.key=value"], id="no-equals"),
    pytest.param("cache.host_ratio=.inf", ["cache.host_ratio", "finite"], id="inf"),
    pytest.param("cache.page_size.x=1", ["cache.page_size.x", "page_size is not a mapping"], id="into-scalar"),
    pytest.param("cache={page_sise: 64}", ["cache.page_sise", "unknown key"], id="merged-unknown-key"),
]


@pytest.mark.parametrize(("override", "fragments"), SET_CASES)
def test_bad_set(tmp_path, override, fragments):
    sc = write_scenario(tmp_path, TINY)
    before = snapshot(tmp_path)
    assert_user_error(invoke("run", sc, "--out", tmp_path / "out", "--set", override), *fragments)
    assert snapshot(tmp_path) == before


def test_set_mapping_is_merged_not_replaced(tmp_path):
    """``--set 'cache={...}'`` updates the named keys and keeps the section's others."""
    sc = write_scenario(tmp_path, TINY)
    r = invoke("validate", sc, "--set", "cache={host_ratio: 2}")
    assert r.exit_code == 0, r.output
    assert "300 pages" in r.output and "600 pages" in r.output  # device_tokens kept, ratio replaced


# --------------------------------------------------------------------------- --out


def _user_folder(tmp_path: Path) -> Path:
    mine = tmp_path / "mine"
    (mine / "src").mkdir(parents=True)
    (mine / "notes.md").write_text("my notes\n")
    (mine / "src" / "model.py").write_text("x = 1\n")
    return mine


OUT_CASES = [
    pytest.param(lambda t: _user_folder(t), ["--out", "mine", "did not write"], id="user-folder"),
    pytest.param(
        lambda t: (t / "file.txt").write_text("keep") and t / "file.txt",
        ["file.txt", "not a folder"],
        id="existing-file",
    ),
    pytest.param(lambda t: Path("/dev/null"), ["/dev/null", "not a folder"], id="device-node"),
    pytest.param(
        lambda t: Path("/proc/hicache-sim-out"), ["/proc/hicache-sim-out", "cannot write"], id="unwritable-place"
    ),
    pytest.param(
        lambda t: (t / "link").symlink_to(_user_folder(t)) or t / "link", ["link", "not a folder"], id="symlink"
    ),
]


@pytest.mark.parametrize(("make", "fragments"), OUT_CASES)
@pytest.mark.parametrize("verb", ["run", "sweep"])
def test_bad_out(tmp_path, verb, make, fragments):
    data = {**TINY, "sweep": {"cache.host_ratio": [0.5, 1]}} if verb == "sweep" else TINY
    sc = write_scenario(tmp_path, data)
    target = make(tmp_path)
    before = snapshot(tmp_path)
    assert_user_error(
        invoke(verb, sc, "--out", target, "--workers", 1) if verb == "sweep" else invoke(verb, sc, "--out", target),
        *fragments,
    )
    assert snapshot(tmp_path) == before
    assert not [p for p in tmp_path.iterdir() if ".hicache-tmp-" in p.name]


@pytest.mark.parametrize("rel", [".", "..", "sub/.."])
def test_out_is_current_folder_or_parent(tmp_path, monkeypatch, rel):
    (tmp_path / "sub").mkdir()
    sc = write_scenario(tmp_path, TINY)
    (tmp_path / "keep.txt").write_text("keep")
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    assert_user_error(invoke("run", sc, "--out", rel), f"--out {rel}", "current folder")
    assert snapshot(tmp_path) == before


def test_run_into_a_sweep_folder_is_refused(tmp_path):
    sc = write_scenario(tmp_path, {**TINY, "sweep": {"cache.host_ratio": [0.5]}})
    assert invoke("sweep", sc, "--out", tmp_path / "sw", "--workers", 1).exit_code == 0
    before = snapshot(tmp_path)
    assert_user_error(invoke("run", sc, "--out", tmp_path / "sw"), "sweep folder, not a run folder")
    assert snapshot(tmp_path) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permission bits")
def test_out_in_read_only_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    sc = write_scenario(tmp_path, TINY)
    assert_user_error(invoke("run", sc, "--out", ro / "out"), "cannot write")


# ------------------------------------------------- --out of the verbs that add files to a folder


def _with_same_name(t: Path, name: str) -> Path:
    mine = _user_folder(t)
    (mine / name).write_text("my own file\n")
    return mine


FILES_OUT_CASES = [
    pytest.param(
        lambda t, _: (t / "file.txt").write_text("keep") and t / "file.txt",
        ["file.txt", "not a folder"],
        id="existing-file",
    ),
    pytest.param(
        lambda t, _: Path("/proc/hicache-sim-out"), ["/proc/hicache-sim-out", "cannot write"], id="unwritable"
    ),
    pytest.param(
        lambda t, name: _with_same_name(t, name), ["--out", "mine", "did not write it"], id="user-file-of-same-name"
    ),
]
FILES_VERBS = {"replay": "measurements.parquet", "validate-model": "validation.md"}


@needs_torch
@pytest.mark.parametrize(("make", "fragments"), FILES_OUT_CASES)
@pytest.mark.parametrize("verb", list(FILES_VERBS))
def test_bad_out_of_replay_and_validate_model(tmp_path, verb, make, fragments):
    """Refused before anything is simulated or copied; a user's file of the same name is never replaced."""
    sc = write_scenario(tmp_path, TINY)
    target = make(tmp_path, FILES_VERBS[verb])
    before = snapshot(tmp_path)
    assert_user_error(invoke(verb, sc, "--device", "cpu", "--limit", 1, "--out", target), *fragments)
    assert snapshot(tmp_path) == before


@needs_torch
def test_replay_into_a_run_folder_is_refused(tmp_path):
    sc = write_scenario(tmp_path, TINY)
    assert invoke("run", sc, "--out", tmp_path / "r").exit_code == 0
    before = snapshot(tmp_path)
    assert_user_error(invoke("replay", sc, "--limit", 1, "--out", tmp_path / "r"), "hicache-sim run folder")
    assert snapshot(tmp_path) == before


def _measurements(t: Path) -> Path:
    from test_calibrate_cli import write_measurements

    return write_measurements(t / "m.csv")


CALIBRATE_OUT_CASES = [
    pytest.param(lambda t: (t / "f.txt").write_text("keep") and t / "f.txt", ["f.txt", "did not write it"], id="file"),
    pytest.param(lambda t: Path("/proc/x.yaml"), ["/proc/x.yaml", "cannot write"], id="unwritable"),
    pytest.param(
        lambda t: (t / "c_errors.md").write_text("my notes") and t / "c.yaml",
        ["c_errors.md", "did not write it"],
        id="report-name-taken",
    ),
    pytest.param(lambda t: t, ["is a folder"], id="folder"),
]


@pytest.mark.parametrize(("make", "fragments"), CALIBRATE_OUT_CASES)
def test_bad_out_of_calibrate(tmp_path, make, fragments):
    m = _measurements(tmp_path)
    target = make(tmp_path)
    before = snapshot(tmp_path)
    assert_user_error(invoke("calibrate", m, "--out", target), *fragments)
    assert snapshot(tmp_path) == before


def test_calibrate_replaces_its_own_file(tmp_path):
    m = _measurements(tmp_path)
    assert invoke("calibrate", m, "--out", tmp_path / "c.yaml").exit_code == 0
    r = invoke("calibrate", m, "--out", tmp_path / "c.yaml", "--seed", 1)
    assert r.exit_code == 0, r.output
    assert "--seed 1" in (tmp_path / "c.yaml").read_text()


SERVER_DECODE = (
    "[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, "
    "gen throughput (token/s): 144.95, #queue-req: 0"
)
VLLM_LINE = (
    "INFO 05-01 10:00:00 [loggers.py:116] Engine 000: Avg prompt throughput: 1234.5 tokens/s, Avg generation "
    "throughput: 456.7 tokens/s, Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: 12.3%\n"
)


def _server_log(t: Path, content: bytes | str) -> Path:
    p = t / "server.log"
    (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
    return p


CALIBRATE_LOG_CASES = [
    pytest.param(lambda t: [_server_log(t, VLLM_LINE)], ["server.log:1", "a vLLM log"], id="vllm-log"),
    pytest.param(
        lambda t: [_server_log(t, f"{SERVER_DECODE}\n{SERVER_DECODE[:60]}\n")],
        ["server.log:2", "cut off"],
        id="truncated-line",
    ),
    pytest.param(
        lambda t: [_server_log(t, f"{SERVER_DECODE}\n{SERVER_DECODE[:-5]}\n")],
        ["server.log:2", "cut off at '#queue-r'"],
        id="line-cut-in-its-last-figure",
    ),
    pytest.param(lambda t: [_server_log(t, "")], ["server.log", "empty file"], id="empty-log"),
    pytest.param(
        lambda t: [_server_log(t, '[2026-04-08 14:05:21] INFO:     127.0.0.1:1 - "POST /generate HTTP/1.1" 200\n')],
        ["server.log", "no 'Prefill batch' or 'Decode batch' line"],
        id="no-scheduler-lines",
    ),
    pytest.param(
        lambda t: [_server_log(t, f"{SERVER_DECODE}\n{SERVER_DECODE.replace('TP0', 'DP1 TP1')}\n")],
        ["server.log:2", "rank DP1 TP1 after rank TP0", "one rank's lines"],
        id="mixed-ranks",
    ),
    pytest.param(
        lambda t: [_server_log(t, SERVER_DECODE.encode() + b"\n\xff\xfe\n")],
        ["server.log:2", "not UTF-8"],
        id="log-non-utf8",
    ),
    pytest.param(
        lambda t: [_server_log(t, SERVER_DECODE + "\n")],
        ["server.log", "no interval of one kind of work"],
        id="nothing-to-fit",
    ),
    pytest.param(
        lambda t: [_server_log(t, SERVER_DECODE + "\n"), "--format", "xml"],
        ["--format 'xml'", "sglang-log"],
        id="log-unknown-format",
    ),
]


@pytest.mark.parametrize(("make", "fragments"), CALIBRATE_LOG_CASES)
def test_bad_server_log_of_calibrate(tmp_path, make, fragments):
    sc = write_scenario(tmp_path, TINY)
    args = make(tmp_path)
    before = snapshot(tmp_path)
    assert_user_error(invoke("calibrate", *args, "--scenario", sc, "--out", tmp_path / "c.yaml"), *fragments)
    assert snapshot(tmp_path) == before


def test_server_log_needs_a_scenario(tmp_path):
    log = _server_log(tmp_path, SERVER_DECODE + "\n")
    before = snapshot(tmp_path)
    assert_user_error(invoke("calibrate", log, "--out", tmp_path / "c.yaml"), "server.log", "--scenario")
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------- benchmark results of calibrate

BENCH_SERVING = {
    **{k: v for k, v in TINY.items() if k not in ("workload", "mode")},
    "mode": "timed",
    "workload": {
        "kind": "bench_serving",
        "bench_serving": {"random_input_len": 512, "random_output_len": 8, "num_prompts": 4},
    },
}
BENCH_MULTITURN = {
    **BENCH_SERVING,
    "workload": {"kind": "multiturn", "multiturn": {"num_clients": 2, "num_rounds": 2, "request_length": 256}},
}
SERVING_LINE = '{"backend": "sglang", "duration": 2.5, "completed": 4, "mean_ttft_ms": 30.1, "mean_tpot_ms": 9.2}'
MULTITURN_LINE = '{"timestamp": "t", "tag": "", "summary": {"total_requests": 4, "average_ttft": 0.2}}'
SERVING_TEXT = "=== Serving Benchmark Result ===\nSuccessful requests:  4\nMean TTFT (ms):  30.1\n" + "=" * 50 + "\n"


def _bench(t: Path, content: bytes | str, name: str = "bench.jsonl") -> Path:
    p = t / name
    (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
    return p


CALIBRATE_BENCH_CASES = [
    pytest.param(
        lambda t: [_bench(t, SERVING_LINE + "\n"), "--format", "bench-multiturn"],
        ["bench.jsonl:1", "summary.average_ttft: missing", "a bench_serving --output-file line"],
        id="wrong-format",
    ),
    pytest.param(
        lambda t: [_bench(t, MULTITURN_LINE + "\n")],
        ["bench.jsonl", "a bench-multiturn result", "workload.kind bench_serving"],
        id="result-of-the-other-benchmark",
    ),
    pytest.param(
        lambda t: [_bench(t, SERVING_LINE + "\n" + SERVING_LINE[:40] + "\n")],
        ["bench.jsonl:2", "truncated"],
        id="truncated-jsonl-line",
    ),
    pytest.param(lambda t: [_bench(t, ""), "--format", "bench-serving"], ["bench.jsonl", "empty"], id="empty-result"),
    pytest.param(
        lambda t: [_bench(t, b"\xff\xfe" + SERVING_LINE.encode()), "--format", "bench-serving"],
        ["bench.jsonl:1", "not UTF-8"],
        id="result-non-utf8",
    ),
    pytest.param(
        lambda t: [_bench(t, SERVING_TEXT.replace("Mean TTFT (ms):  30.1\n", ""), "bench.txt")],
        ["bench.txt:1", "mean_ttft_ms: missing", "truncated"],
        id="truncated-block",
    ),
    pytest.param(
        lambda t: [_bench(t, SERVING_TEXT.replace("30.1", "n/a"), "bench.txt")],
        ["bench.txt:3", "mean_ttft_ms", "expected a number, got 'n/a'"],
        id="block-figure-not-a-number",
    ),
    pytest.param(
        lambda t: [_bench(t, SERVING_LINE.replace('"completed": 4', '"completed": 80') + "\n")],
        ["bench.jsonl:1", "completed: 80 requests", "sends 4", "num_prompts"],
        id="request-count-not-the-scenario's",
    ),
    pytest.param(
        lambda t: [_bench(t, SERVING_LINE.replace('"completed": 4', '"completed": "4"') + "\n")],
        ["bench.jsonl:1", "completed", "expected a number"],
        id="count-not-a-number",
    ),
]


@pytest.mark.parametrize(("make", "fragments"), CALIBRATE_BENCH_CASES)
def test_bad_benchmark_result_of_calibrate(tmp_path, make, fragments):
    sc = write_scenario(tmp_path, BENCH_SERVING)
    args = make(tmp_path)
    before = snapshot(tmp_path)
    assert_user_error(invoke("calibrate", *args, "--scenario", sc, "--out", tmp_path / "c.yaml"), *fragments)
    assert snapshot(tmp_path) == before


def test_bad_benchmark_result_needs_its_scenario(tmp_path):
    """No --scenario; a multi-turn count that is not the scenario's; --check of a server log."""
    result = _bench(tmp_path, SERVING_LINE + "\n")
    sc = write_scenario(tmp_path, BENCH_MULTITURN)
    log = _server_log(tmp_path, SERVER_DECODE + "\n")
    mt = _bench(tmp_path, MULTITURN_LINE.replace('"total_requests": 4', '"total_requests": 9') + "\n", "mt.jsonl")
    before = snapshot(tmp_path)
    out = tmp_path / "c.yaml"
    assert_user_error(invoke("calibrate", result, "--out", out), "bench.jsonl", "--scenario")
    assert_user_error(
        invoke("calibrate", mt, "--scenario", sc, "--out", out),
        "mt.jsonl:1",
        "summary.total_requests: 9 requests",
        "sends 4",
    )
    assert_user_error(invoke("calibrate", log, "--scenario", sc, "--check", "--out", out), "--check", "sglang-log")
    assert snapshot(tmp_path) == before
    serving = write_scenario(tmp_path, BENCH_SERVING)
    for foreign in (out, tmp_path / "c_bench.md"):  # a file hicache-sim did not write is never replaced
        foreign.write_text("mine\n")
        before = snapshot(tmp_path)
        assert_user_error(
            invoke("calibrate", result, "--scenario", serving, "--out", out), str(foreign.name), "did not write it"
        )
        assert snapshot(tmp_path) == before
        foreign.unlink()


GOOD_METRICS = 'sglang:prompt_tokens_total{model_name="m"} 1000.0\nsglang:num_requests_total{model_name="m"} 3.0\n'


def _metrics(t: Path, content: bytes | str) -> Path:
    p = t / "metrics.txt"
    (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
    return p


def _run_dir(t: Path, summary: str, parquet: bytes) -> Path:
    d = t / "run"
    d.mkdir()
    (d / "summary.json").write_text(summary)
    (d / "requests.parquet").write_bytes(parquet)
    return d


DRIFT_CASES = [
    pytest.param(
        lambda t: [_metrics(t, 'vllm:num_requests_running{model_name="m"} 0.0\n')],
        ["metrics.txt:1", "vllm:num_requests_running", "another server (vllm:)"],
        id="vllm-metrics",
    ),
    pytest.param(
        lambda t: [_metrics(t, GOOD_METRICS + 'sglang:cached_tokens_total{model_name="m"')],
        ["metrics.txt:3", "truncated"],
        id="metrics-truncated",
    ),
    pytest.param(
        lambda t: [_metrics(t, GOOD_METRICS + 'sglang:cached_tokens_total{model_name="m"\n')],
        ["metrics.txt:3", "not a Prometheus sample line"],
        id="metrics-line-cut",
    ),
    pytest.param(lambda t: [_metrics(t, "")], ["metrics.txt", "empty"], id="metrics-empty"),
    pytest.param(
        lambda t: [_metrics(t, GOOD_METRICS.encode() + b"# HELP x \xff\n")],
        ["metrics.txt:3", "not UTF-8"],
        id="metrics-non-utf8",
    ),
    pytest.param(
        lambda t: [_metrics(t, GOOD_METRICS.replace("1000.0", "lots"))],
        ["metrics.txt:1", "sglang:prompt_tokens_total", "'lots' is not a number"],
        id="metrics-value-not-a-number",
    ),
    pytest.param(
        lambda t: [_metrics(t, "# TYPE up gauge\nup 1.0\n")],
        ["metrics.txt:2", "no sglang:* sample", "--enable-metrics"],
        id="metrics-no-sglang",
    ),
    pytest.param(
        lambda t: [_metrics(t, 'sglang:num_requests_total{model_name="m"} 3.0\n')],
        ["metrics.txt", "no sglang:prompt_tokens_total"],
        id="metrics-before-any-request",
    ),
    pytest.param(lambda t: [t / "absent.txt"], ["absent.txt", "not found"], id="metrics-missing"),
    pytest.param(
        lambda t: [_metrics(t, GOOD_METRICS), "--sglang-version", "0.3"],
        ["--sglang-version 0.3", "known: 0.4.10, 0.5.2, 0.5.23"],
        id="metrics-unknown-version",
    ),
    pytest.param(
        lambda t: [_metrics(t, GOOD_METRICS), "--run", t / "nowhere"],
        ["--run", "nowhere", "not a folder"],
        id="drift-run-missing",
    ),
    pytest.param(
        lambda t: [_metrics(t, GOOD_METRICS), "--run", t],
        ["--run", "no summary.json"],
        id="drift-run-not-a-run",
    ),
    pytest.param(
        lambda t: [
            _metrics(t, GOOD_METRICS),
            "--run",
            _run_dir(t, '{"counters": {}, "sizes": {}, "residency": {}}', b"PAR1 not"),
        ],
        ["--run", "requests.parquet", "cannot read the request rows"],
        id="drift-run-bad-parquet",
    ),
    pytest.param(
        lambda t: [_metrics(t, GOOD_METRICS), "--run", _run_dir(t, '{"mode": "instant"}', b"")],
        ["--run", "summary.json", "no counters, sizes or residency"],
        id="drift-run-summary-without-counters",
    ),
]


@pytest.mark.parametrize(("make", "fragments"), DRIFT_CASES)
def test_bad_input_of_drift(tmp_path, make, fragments):
    sc = write_scenario(tmp_path, TINY)
    args = make(tmp_path)
    if "--run" not in args:
        args += ["--scenario", sc]
    before = snapshot(tmp_path)
    assert_user_error(invoke("drift", *args), *fragments)
    assert snapshot(tmp_path) == before


def test_drift_needs_one_source_of_simulated_figures(tmp_path):
    m = _metrics(tmp_path, GOOD_METRICS)
    assert_user_error(invoke("drift", m), "--run DIR", "--scenario SCENARIO")
    assert_user_error(invoke("drift", m, "--run", tmp_path, "--scenario", "x"), "--run DIR", "--scenario SCENARIO")


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        pytest.param(["replay", "--device", "tpu"], ["--device", "tpu"], marks=needs_torch, id="bad-device"),
        pytest.param(["replay", "--h2d", "sideways"], ["--h2d 'sideways'", "per_layer or whole"], id="bad-h2d"),
        pytest.param(
            ["replay", "--sweep", "--clock", "sundial"],
            ["--clock 'sundial'", "cpu or wall"],
            marks=needs_torch,
            id="bad-sweep-clock",
        ),
        pytest.param(
            ["replay", "--sweep", "--clock", "cpu", "--threads", "2"],
            ["clock cpu", "1 torch thread, not 2"],
            marks=needs_torch,
            id="cpu-clock-many-threads",
        ),
        pytest.param(["plot", "nowhere"], ["nowhere"], id="plot-missing-folder"),
    ],
)
def test_bad_flags_of_other_verbs(tmp_path, args, fragments):
    sc = write_scenario(tmp_path, TINY)
    verb, *rest = args
    full = [verb, sc, *rest, "--out", tmp_path / "o"] if verb == "replay" else [verb, tmp_path / rest[0]]
    assert_user_error(invoke(*full), *fragments)


# --------------------------------------------------------------------------- trace convert | stats

GOOD_LOG = '{"timestamp": 0, "prompt": "hello there", "usage": {"completion_tokens": 3}}\n'


def _log(t: Path, content: bytes | str = GOOD_LOG) -> Path:
    p = t / "log.jsonl"
    (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
    return p


CONVERT_CASES = [
    pytest.param(lambda t: [t / "nowhere.jsonl"], ["nowhere.jsonl", "log file not found"], id="missing-log"),
    pytest.param(
        lambda t: [t], ["is a folder with no *.pkl request dump", "--log-requests-target"], id="log-is-folder"
    ),
    pytest.param(lambda t: [_log(t), "--format", "xml"], ["--format 'xml'", "openai, sglang"], id="unknown-format"),
    pytest.param(lambda t: [_log(t), "--block-size", 0], ["--block-size 0", ">= 1"], id="block-size-zero"),
    pytest.param(lambda t: [_log(t), "--run", 0], ["--run 0", ">= 1"], id="run-zero"),
    pytest.param(
        lambda t: [_log(t), "--tokenizer", t / "no-such-model"],
        ["no-such-model", "nothing is downloaded"],
        id="no-tokenizer",
    ),
    pytest.param(
        lambda t: [_log(t), "--tokenizer", (t / "tok.json").write_text("{}") and t / "tok.json"],
        ["tok.json", "not a tokenizer.json"],
        id="bad-tokenizer-json",
    ),
    pytest.param(lambda t: [_log(t, "")], ["log.jsonl", "no JSON object"], id="empty-log"),
    pytest.param(
        lambda t: [_log(t, '{"prompt": "no time", "usage": {"completion_tokens": 1}}\n')],
        ["log.jsonl", "no request could be converted", "line 1", "'timestamp'"],
        id="nothing-convertible",
    ),
    pytest.param(
        lambda t: [_log(t, GOOD_LOG.encode() + b"\xff\xfe\n"), "--strict"],
        ["log.jsonl:2", "not UTF-8", "--strict"],
        id="strict-non-utf8",
    ),
    pytest.param(
        lambda t: [_log(t, '{"summary": {"average_ttft": 0.4, "total_requests": 8}}\n')],
        ["log.jsonl", "bench_multiturn", "no requests"],
        id="bench-multiturn-summary",
    ),
    pytest.param(
        lambda t: [_log(t, '{"backend": "sglang", "completed": 4}\n')],
        ["log.jsonl:1", "--output-details"],
        id="bench-serving-without-details",
    ),
    pytest.param(
        lambda t: [_log(t, "[" * 100_000 + "]" * 100_000 + "\n")],
        ["log.jsonl", "line 1", "nested deeper than"],
        id="deeply-nested-json",
    ),
    pytest.param(
        lambda t: [_log(t, '{"timestamp": 3e16, "prompt": "hi", "usage": {"completion_tokens": 1}}\n')],
        ["log.jsonl", "line 1", "3e+16", "no clock"],
        id="timestamp-no-clock-gives",
    ),
    pytest.param(lambda t: [_log(t), "--time-unit", "h"], ["--time-unit 'h'", "auto, s, ms"], id="bad-time-unit"),
]


@pytest.mark.parametrize(("make", "fragments"), CONVERT_CASES)
def test_bad_trace_convert(tmp_path, make, fragments):
    args = make(tmp_path)
    before = snapshot(tmp_path)
    assert_user_error(invoke("trace", "convert", *args, "--out", tmp_path / "out.jsonl"), *fragments)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("existing", ["file", "folder"])
def test_trace_convert_never_replaces_a_file(tmp_path, existing):
    log = _log(tmp_path)
    target = tmp_path / "trace.jsonl"
    target.mkdir() if existing == "folder" else target.write_text("my trace\n")
    before = snapshot(tmp_path)
    assert_user_error(invoke("trace", "convert", log, "--out", target), "--out", "trace.jsonl")
    assert snapshot(tmp_path) == before


STATS_CASES = [
    pytest.param(lambda t: ["nowhere.jsonl"], ["nowhere.jsonl", "trace file not found"], id="missing-trace"),
    pytest.param(lambda t: [_log(t, "{oops\n")], ["log.jsonl:1", "not valid JSON"], id="bad-json"),
    pytest.param(
        lambda t: [
            _log(t, '{"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [1]}\n'),
            "--block-size",
            16,
        ],
        ["log.jsonl:1", "ceil(40/16) = 3"],
        id="block-size-mismatch",
    ),
    pytest.param(lambda t: [_log(t), "--format", "azure"], ["--format 'azure'", "mooncake, bailian"], id="bad-format"),
    pytest.param(lambda t: [_log(t, "\n")], ["log.jsonl", "no requests"], id="empty-trace"),
    pytest.param(
        lambda t: [_log(t, "[" * 100_000 + "]" * 100_000 + "\n")], ["log.jsonl:1", "nested deeper than"], id="deep-json"
    ),
]


@pytest.mark.parametrize(("make", "fragments"), STATS_CASES)
def test_bad_trace_stats(tmp_path, make, fragments):
    args = make(tmp_path)
    before = snapshot(tmp_path)
    assert_user_error(invoke("trace", "stats", *args, "--out", tmp_path / "st"), *fragments)
    assert snapshot(tmp_path) == before


def test_trace_block_size_must_hold_whole_pages(tmp_path):
    (tmp_path / "t.jsonl").write_text(
        '{"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [1, 2, 3]}\n'
    )
    data = {
        **TINY,
        "cache": {**TINY["cache"], "page_size": 64},
        "workload": {"kind": "trace", "trace": {"path": "t.jsonl", "block_size": 16}},
    }
    sc = write_scenario(tmp_path, data)
    before = snapshot(tmp_path)
    assert_user_error(invoke("run", sc, "--out", tmp_path / "out"), "t.jsonl", "page_size 64 must divide", "16-token")
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------- sweeps


def test_unreachable_dask_scheduler(tmp_path):
    sc = write_scenario(tmp_path, {**TINY, "sweep": {"cache.host_ratio": [0.5, 1]}})
    before = snapshot(tmp_path)
    r = invoke("sweep", sc, "--out", tmp_path / "sw", "--dask-scheduler", "tcp://127.0.0.1:9", "--dask-timeout", 1)
    assert_user_error(r, "--dask-scheduler tcp://127.0.0.1:9", "no scheduler answered")
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "sw").exists()


def test_sweep_point_that_cannot_be_sized_fails_before_any_work(tmp_path):
    """A point whose host size breaks exact alignment used to fail inside a worker (its ConfigError did
    not pickle: BrokenProcessPool traceback); now plan() resolves every point first."""
    data = {**with_("cache", host_alignment="exact", host_ratio=None), "sweep": {"cache.host_size_gb": [1.0, 2.0]}}
    sc = write_scenario(tmp_path, data)
    r = invoke("sweep", sc, "--out", tmp_path / "sw", "--workers", 2)
    assert_user_error(r, "cache.host_alignment", "page-aligned")
    assert not (tmp_path / "sw").exists()


@pytest.mark.parametrize(
    ("later_trace", "fragments"),
    [
        (None, ["missing.jsonl", "trace file not found"]),
        ('{"timestamp": 0, "input_length": 10, "hash_ids": [1]}\n', ["bad.jsonl:1", "output_length"]),
    ],
)
def test_sweep_point_with_a_bad_trace_fails_before_any_work(tmp_path, later_trace, fragments):
    """The second point's trace is missing or malformed: found while planning, not after the first point
    ran (which left a sweep folder with sweep.json and no table)."""
    later = tmp_path / ("missing.jsonl" if later_trace is None else "bad.jsonl")
    if later_trace is not None:
        later.write_text(later_trace)
    paths = [TINY["workload"]["trace"]["path"], str(later)]
    sc = write_scenario(tmp_path, {**TINY, "sweep": {"workload.trace.path": paths}})
    r = invoke("sweep", sc, "--out", tmp_path / "sw", "--workers", 1)
    assert_user_error(r, *fragments)
    assert not (tmp_path / "sw").exists()


def test_config_error_survives_a_worker_process():
    import pickle

    from hicache_sim.core.errors import ConfigError

    e = pickle.loads(pickle.dumps(ConfigError("cache.x", "bad")))
    assert (e.field, e.message, str(e)) == ("cache.x", "bad", "cache.x: bad")


def test_bad_workers(tmp_path):
    sc = write_scenario(tmp_path, {**TINY, "sweep": {"cache.host_ratio": [0.5]}})
    assert_user_error(invoke("sweep", sc, "--workers", 0), "--workers", ">= 1")


# ------------------------------------------------------------------ every schema field, fuzzed


def _leaf_fields(model_cls, prefix: str = "") -> list[tuple[str, object]]:
    """Every (dotted key, field info) of the scenario schema, nested sections expanded."""
    from pydantic import BaseModel

    out = []
    for name, info in model_cls.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += _leaf_fields(ann, f"{prefix}{name}.")
        else:
            out.append((f"{prefix}{name}", info))
    return out


def _schema_keys() -> list[str]:
    from hicache_sim.scenario import Scenario

    return [k for k, _ in _leaf_fields(Scenario)]


WRONG_VALUES = st.one_of(
    st.sampled_from(
        [-1, 0, -0.5, 10**30, 1e308, "", "x", "big", True, [], [1, 2], {}, {"a": 1}, None, 1.5, "builtin:nope", "-1"]
    ),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)


def test_schema_has_many_fields():
    keys = _schema_keys()
    assert len(keys) > 60 and "cache.host_ratio" in keys and "workload.multiturn.num_clients" in keys


@settings(
    max_examples=250, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(key=st.sampled_from(_schema_keys()), value=WRONG_VALUES)
def test_any_field_any_value_never_a_traceback(tmp_path, key, value):
    """Whatever value lands in whatever field: either it is valid, or one error line and exit 2."""
    data = yaml.safe_load(yaml.safe_dump(TINY))
    node = data
    parts = key.split(".")
    for p in parts[:-1]:
        if isinstance(node.get(p), str):
            node[p] = {"preset": node[p]}
        node = node.setdefault(p, {})
    node[parts[-1]] = value
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    r = invoke("validate", path)
    assert "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code in (0, 2), r.output
    if r.exit_code == 2:
        assert_user_error(r)


def test_short_help_and_version():
    from hicache_sim import __version__

    r = invoke("-h")
    assert r.exit_code == 0 and "run" in r.output and "sweep" in r.output, r.output
    assert invoke("run", "-h").exit_code == 0
    r = invoke("--version")
    assert r.exit_code == 0 and r.output.strip() == f"hicache-sim {__version__}"


def _verbs() -> list[str]:
    """Every registered verb, and every subcommand of a verb group (``trace convert``)."""
    from hicache_sim.cli import app

    verbs = [c.name or c.callback.__name__ for c in app.registered_commands]
    for g in app.registered_groups:
        verbs += [f"{g.name} {c.name or c.callback.__name__}" for c in g.typer_instance.registered_commands]
    return sorted(verbs)


@pytest.mark.parametrize("verb", _verbs())
def test_help_has_no_type_tags(verb):
    """Values are shown as click does (N, X, PATH, TEXT) or by their metavar, never as typer's tags."""
    import re

    out = invoke(*verb.split(), "--help").output
    assert not re.search(r"<(bool|str|int|float|path|list\[)[^>]*>", out), out
    args = re.findall(r"^  ([A-Za-z]+)  ", out.split("Options:")[0], flags=re.M)
    assert all(a.isupper() for a in args), args  # arguments are named in capitals, as in the usage line


# --------------------------------------------------------------------------- from-sglang

LAUNCH = ["python", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct"]
FROM_SGLANG_CASES = [
    pytest.param([*LAUNCH, "--hicache-rattio", "2"], ["--hicache-rattio", "not a flag", "--hicache-ratio"], id="typo"),
    pytest.param(
        # sgl-project/sglang benchmark/hicache/disk.sh: flags of an older SGLang
        [*LAUNCH, "--enable-hierarchical-cache", "--hicache-use-disk"],
        ["--hicache-use-disk", "not a flag of sglang 0.5.23"],
        id="flag-of-another-version",
    ),
    # --cuda-graph-max-bs, ambiguous in 0.5.23, is read as SGLang renamed it (tests/test_sglang_flag_values.py);
    # --cuda-graph is ambiguous in every stored version
    pytest.param([*LAUNCH, "--cuda-graph", "8"], ["--cuda-graph", "ambiguous"], id="ambiguous-prefix"),
    pytest.param(
        # sgl-project/sglang PR #5932's launch line: a flag of sglang 0.4.x / 0.5.2
        [*LAUNCH, "--tp", "8", "--quantization", "fp8", "--enable-ep-moe"],
        ["--enable-ep-moe", "a flag of sglang 0.4.10, 0.5.2", "refuses it at start-up", "remove it"],
        id="flag-of-an-older-release",
    ),
    pytest.param(
        [*LAUNCH, "--radix-eviction-policy", "fifo"],
        ["--radix-eviction-policy fifo", "choices (lru, lfu, slru, priority, tlru)", "refuses it at start-up"],
        id="value-sglang-refuses",
    ),
    pytest.param(
        [*LAUNCH, "--radix-eviction-policy", "tlru"],
        ["eviction_policy_config", "tlru needs threshold > next_prompt_estimate", "0 <= 0"],
        id="tlru-without-its-config",
    ),
    pytest.param(
        [*LAUNCH, "--max-total-tokens", "1e3k"],
        ["--max-total-tokens", "'1e3k'", "Ki", "refuses it at start-up"],
        id="human-int",
    ),
    pytest.param([*LAUNCH, "--page-size"], ["--page-size", "expected a value"], id="missing-value"),
    pytest.param([*LAUNCH, "--page-size", "big"], ["--page-size", "integer", "'big'"], id="not-an-int"),
    pytest.param([*LAUNCH, "--enable-hicache=1"], ["--enable-hicache", "takes no value"], id="switch-with-value"),
    pytest.param([*LAUNCH, "stray"], ["'stray'", "expected an SGLang flag"], id="stray-word"),
    pytest.param(
        [*LAUNCH, "--enable-hierarchical-cache", "--hicache-io-backend", "kernel_ascend"],
        ["--hicache-io-backend kernel_ascend", "not modelled", "direct, kernel"],
        id="unmodelled-value",
    ),
    pytest.param(
        [*LAUNCH, "--enable-hierarchical-cache", "--hicache-host-memory-fraction", "1.5"],
        ["--hicache-host-memory-fraction", "fraction in (0, 1]", "'1.5'"],
        id="host-memory-fraction",
    ),
    pytest.param(
        [*LAUNCH, "--max-running-requests", "0"],
        ["--max-running-requests", "expected a positive integer", "'0'"],
        id="running-cap-zero",
    ),
    pytest.param(
        [*LAUNCH, "--schedule-policy", "hrrn"],
        ["--schedule-policy hrrn", "SGLang schedule policy 'hrrn' is not modelled", "dfs-weight"],
        id="policy",
    ),
    pytest.param(
        [*LAUNCH, "--schedule-policy", "priority"],
        ["--schedule-policy priority", "its scheduler rejects it"],
        id="policy-sglang-rejects",
    ),
    pytest.param(
        [*LAUNCH, "--enable-hierarchical-cache", "--hicache-storage-backend", "aibrix"],
        ["--hicache-storage-backend aibrix", "hf3fs"],
        id="unmodelled-storage",
    ),
    pytest.param(
        [*LAUNCH, "--enable-hierarchical-cache", "--hicache-storage-backend", "npu_memcache"],
        ["--hicache-storage-backend npu_memcache", "not modelled", "file, sim, mooncake"],
        id="unmodelled-storage-names-sim",
    ),
    pytest.param(
        [
            *LAUNCH,
            "--enable-hierarchical-cache",
            "--hicache-storage-backend",
            "sim",
            "--hicache-storage-backend-extra-config",
            '{"sim_write_gbps": 0}',
        ],
        ["--hicache-storage-backend-extra-config", "sim_write_gbps 0", "rate <= 0 as infinite", "not modelled"],
        id="sim-infinite-rate",
    ),
    pytest.param(
        [
            *LAUNCH,
            "--enable-hierarchical-cache",
            "--hicache-storage-backend",
            "sim",
            "--hicache-storage-backend-extra-config",
            '{"sim_op_latency_us": "fast"}',
        ],
        ["--hicache-storage-backend-extra-config", "sim_op_latency_us", "expected a number"],
        id="sim-latency-not-a-number",
    ),
    pytest.param(
        [*LAUNCH, "--enable-hierarchical-cache", "--hicache-mem-layout", "page_head", "--hicache-io-backend", "direct"],
        ["cache.io_backend", "direct cannot copy the page_head host layout"],
        id="page-head-with-direct-io",
    ),
    pytest.param(
        [
            *LAUNCH,
            "--enable-hierarchical-cache",
            "--hicache-storage-backend",
            "hf3fs",
            "--hicache-storage-backend-extra-config",
            "{prefetch",
        ],
        ["--hicache-storage-backend-extra-config", "JSON object"],
        id="bad-json",
    ),
    pytest.param(
        # sgl-project/sglang benchmark/hicache/README.md
        [
            "python",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "Qwen/Qwen2.5-14B-Instruct",
            "--port",
            "30000",
            "--disable-radix-cache",
        ],
        ["--disable-radix-cache", "not modelled"],
        id="radix-cache-off",
    ),
    pytest.param(
        ["python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2.5-14B-Instruct", "--port", "30000"],
        ["--model-path Qwen/Qwen2.5-14B-Instruct", "--preset NAME", "config: path/to/config.json"],
        id="unknown-model",
    ),
    pytest.param(["python", "-m", "sglang.launch_server", "--tp", "2"], ["--model-path", "missing"], id="no-model"),
    pytest.param(
        # NVIDIA Dynamo's HiCache example: Dynamo's worker, not SGLang's launch_server
        ["python", "-m", "dynamo.sglang", "--model-path", "Qwen/Qwen3-0.6B"],
        ["'python -m dynamo.sglang'", "not an SGLang launch"],
        id="not-sglang",
    ),
    pytest.param([*LAUNCH, "--tp", "3"], ["hardware.tp", "32 attention heads"], id="tp-vs-heads"),
]


@pytest.mark.parametrize(("command", "fragments"), FROM_SGLANG_CASES)
def test_bad_sglang_command(tmp_path, command, fragments):
    before = snapshot(tmp_path)
    assert_user_error(invoke("from-sglang", "--out", tmp_path / "s.yaml", "--", *command), *fragments)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("options", "fragments"),
    [
        pytest.param(["--gpu", "h999"], ["--gpu h999", "unknown GPU preset"], id="gpu"),
        pytest.param(["--preset", "llama-9"], ["--preset llama-9", "unknown model preset"], id="preset"),
        pytest.param(["--mode", "fast"], ["--mode fast", "timed or instant"], id="mode"),
        pytest.param(["--out", "."], ["--out .", "is a folder"], id="out-folder"),
        pytest.param(["--out", "nowhere/s.yaml"], ["--out nowhere/s.yaml", "does not exist"], id="out-parent"),
    ],
)
def test_bad_from_sglang_option(tmp_path, monkeypatch, options, fragments):
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke("from-sglang", *options, "--", *LAUNCH), *fragments)
    assert snapshot(tmp_path) == {}


def test_from_sglang_replaces_only_its_own_file(tmp_path):
    mine = tmp_path / "notes.yaml"
    mine.write_text("name: mine\n")
    before = snapshot(tmp_path)
    assert_user_error(invoke("from-sglang", "--out", mine, "--", *LAUNCH), "notes.yaml", "not written by from-sglang")
    assert snapshot(tmp_path) == before
    made = tmp_path / "s.yaml"
    for tp in ("1", "2"):  # a file from-sglang wrote is replaced
        r = invoke("from-sglang", "--out", made, "--", *LAUNCH, "--tp", tp)
        assert r.exit_code == 0, r.output
    assert yaml.safe_load(made.read_text())["hardware"]["tp"] == 2


def test_sglang_args_of_a_bad_scenario(tmp_path):
    sc = write_scenario(tmp_path, with_("cache", page_sise=64))
    assert_user_error(invoke("sglang-args", sc), "bad.yaml", "cache.page_sise", "unknown key")


def test_sglang_args_of_a_scenario_sglang_cannot_run(tmp_path):
    """fifo is a simulator strategy: a valid scenario, but no SGLang 0.5.23 command runs it."""
    sc = write_scenario(tmp_path, with_("cache", eviction_policy="fifo"))
    assert invoke("validate", sc).exit_code == 0
    res = invoke("sglang-args", sc)
    assert_user_error(res, "bad.yaml", "cache.eviction_policy=fifo", "--radix-eviction-policy fifo", "lru, lfu")
    assert res.stdout == ""


def test_policy_config_sglang_accepts_is_accepted(tmp_path):
    """A key only another strategy reads is ignored, as SGLang ignores it; the chosen one's key is used."""
    lru = with_("cache", eviction_policy="lru", eviction_policy_config={"protected_threshold": 7})
    assert invoke("validate", write_scenario(tmp_path, lru)).exit_code == 0
    slru = with_("cache", eviction_policy="slru", eviction_policy_config={"protected_threshold": 3})
    assert invoke("validate", write_scenario(tmp_path, slru)).exit_code == 0
    flag = with_("scheduler", reserve_last_token=False)  # a boolean field still takes a boolean
    assert invoke("validate", write_scenario(tmp_path, flag)).exit_code == 0


def test_yaml_merge_keys_keep_their_meaning_and_a_written_twice_key_is_refused():
    """The duplicate-key check looks at the keys a mapping writes, not at those a merge key brings in."""
    from hicache_sim.yamlfile import load_yaml

    merged = load_yaml("base: &b {page_size: 512, host_ratio: 2}\ncache:\n  <<: *b\n  host_ratio: 4\n")
    assert merged["cache"] == {"page_size": 512, "host_ratio": 4}
    with pytest.raises(yaml.YAMLError, match="found duplicate key 'host_ratio'"):
        load_yaml("cache:\n  <<: {page_size: 512}\n  host_ratio: 4\n  host_ratio: 2\n")


# --------------------------------------------------------------------------- a timed run's clock

#: Timed scenarios small enough to end in about a second; each case pushes the simulated clock far out.
TIMED = {**TINY, "mode": "timed", "cache": {"page_size": 1, "host_ratio": 2}, "workload": {"kind": "trace"}}
TINY_PROMPTS = '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'


def _timed(t: Path, trace: str = TINY_PROMPTS, **hardware) -> Path:
    (t / "t.jsonl").write_text(trace)
    return write_scenario(
        t, {**TIMED, "hardware": hardware, "workload": {"kind": "trace", "trace": {"path": "t.jsonl"}}}
    )


def _slow_calibration(t: Path) -> Path:
    row = {"io_backend": "kernel", "layout": "page_first", "latency_s": 0, "half_efficiency_bytes": 0}
    groups = [{"direction": d, **row, "bandwidth_Bps": 1e-300, "segment_overhead_s": 0} for d in ("d2h", "h2d")]
    (t / "cal.yaml").write_text(yaml.safe_dump({"kind": "hicache-sim-calibration", "groups": groups}))
    return _timed(t, calibration=str(t / "cal.yaml"))


CLOCK_CASES = [
    pytest.param(
        lambda t: _timed(t, TINY_PROMPTS + TINY_PROMPTS.replace(": 0,", ": 30000000000000000,").replace("[1]", "[2]")),
        ["t.jsonl", "request r2 arrives at 3e+13 s", "before 8388608 s", "mooncake: ms"],
        id="trace-arrival-3e16-ms",
    ),
    pytest.param(
        _slow_calibration,
        ["cal.yaml", "groups[0].bandwidth_Bps", "in [1e+06, 1e+15]", "no PCIe link"],
        id="calibration-bandwidth-1e-300",
    ),
    pytest.param(
        lambda t: _timed(t, pcie={"h2d_gbps": 1e-290, "d2h_gbps": 1e-290}),
        ["bad.yaml", "simulated time", "before 8388608 s", "hardware.pcie"],
        id="pcie-that-the-schema-accepts-but-no-clock-reaches",
    ),
    pytest.param(
        lambda t: write_scenario(
            t,
            {
                **TIMED,
                "workload": {
                    "kind": "poisson_synthetic",
                    "poisson_synthetic": {"num_requests": 4, "request_rate": 1e-9, "input_length": 16},
                },
            },
        ),
        ["workload.poisson_synthetic", "arrives at", "before 8388608 s", "raise request_rate"],
        id="request-rate-1e-9",
    ),
]


@pytest.mark.parametrize(("make", "fragments"), CLOCK_CASES)
def test_timed_run_past_the_simulated_clock(tmp_path, make, fragments):
    """Inputs that once made a timed run spin for ever (the float clock stops resolving the world's small
    waits far out): refused in one line, in bounded time. In a subprocess with a timeout, so a regression
    fails instead of hanging the suite."""
    import subprocess
    import sys
    from types import SimpleNamespace

    sc = make(tmp_path)
    before = snapshot(tmp_path)
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "hicache_sim", "run", str(sc), "--out", str(tmp_path / "out")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert_user_error(SimpleNamespace(exit_code=r.returncode, output=r.stdout + r.stderr), *fragments)
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------- model config.json

#: A config.json SGLang 0.5.23 could load (LlamaForCausalLM), for the rows below to break one key of.
GOOD_MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "vocab_size": 1000,
    "torch_dtype": "bfloat16",
}


def _model_config(t: Path, content) -> dict:
    """A scenario whose model is read from ``t/m/config.json`` (``content``: a dict, or text as is)."""
    (t / "m").mkdir(exist_ok=True)
    text = content if isinstance(content, str) else json.dumps(content)
    (t / "m" / "config.json").write_text(text)
    return {**TINY, "model": {"config": "m/config.json"}}


MODEL_CONFIG_CASES = [
    pytest.param(
        lambda t: {**TINY, "model": {"config": "nowhere/config.json"}},
        ["bad.yaml", "model.config", "config.json not found"],
        id="config-missing",
    ),
    pytest.param(lambda t: _model_config(t, "{not json"), ["config.json", "line 1", "not JSON"], id="config-not-json"),
    pytest.param(lambda t: _model_config(t, "[1, 2]"), ["config.json", "JSON object"], id="config-a-list"),
    pytest.param(
        lambda t: _model_config(t, {k: v for k, v in GOOD_MODEL_CONFIG.items() if k != "num_hidden_layers"}),
        ["config.json", "num_hidden_layers: missing"],
        id="config-no-layers",
    ),
    pytest.param(
        lambda t: _model_config(t, {**GOOD_MODEL_CONFIG, "num_attention_heads": "16"}),
        ["config.json", "num_attention_heads", "expected an integer"],
        id="config-heads-a-string",
    ),
    pytest.param(
        lambda t: _model_config(t, {**GOOD_MODEL_CONFIG, "architectures": ["NoSuchForCausalLM"]}),
        ["config.json", "architectures", "'NoSuchForCausalLM'", "SGLang 0.5.23"],
        id="config-unknown-architecture",
    ),
    pytest.param(
        lambda t: _model_config(t, {k: v for k, v in GOOD_MODEL_CONFIG.items() if k != "architectures"}),
        ["config.json", "architectures: missing"],
        id="config-no-architectures",
    ),
    pytest.param(
        lambda t: _model_config(t, {**GOOD_MODEL_CONFIG, "quantization_config": {"quant_method": "awq", "bits": 4}}),
        ["config.json", "quantization_config.quant_method", "'awq'", "fp8"],
        id="config-int4-checkpoint",
    ),
    pytest.param(
        lambda t: _model_config(t, {**GOOD_MODEL_CONFIG, "layer_types": ["sliding_attention", "full_attention"] * 2}),
        ["config.json", "layer_types", "sliding-window"],
        id="config-hybrid-attention",
    ),
    pytest.param(
        lambda t: _model_config(t, {**GOOD_MODEL_CONFIG, "torch_dtype": "int8"}),
        ["config.json", "torch_dtype", "'int8'"],
        id="config-odd-dtype",
    ),
    pytest.param(
        lambda t: _model_config(t, {**GOOD_MODEL_CONFIG, "torch_dtype": ["bfloat16"]}),
        ["config.json", "torch_dtype", "['bfloat16']"],
        id="config-dtype-a-list",
    ),
    pytest.param(
        lambda t: _model_config(t, {**GOOD_MODEL_CONFIG, "quantization_config": {"quant_method": ["fp8"]}}),
        ["config.json", "quantization_config.quant_method", "['fp8']"],
        id="config-quant-method-a-list",
    ),
    pytest.param(
        lambda t: {
            **_model_config(t, {**GOOD_MODEL_CONFIG, "torch_dtype": ["bfloat16"]}),
            "model": {"preset": "llama-3.1-8b", "speculative": {"algorithm": "eagle3", "config": "m"}},
        },
        ["model.speculative.config", "config.json", "torch_dtype", "['bfloat16']"],
        id="draft-config-dtype-a-list",
    ),
    pytest.param(
        lambda t: {**_model_config(t, GOOD_MODEL_CONFIG), "model": {"config": "m", "preset": "llama-3.1-8b"}},
        ["bad.yaml", "model", "preset or config, not both"],
        id="config-and-preset",
    ),
]


@pytest.mark.parametrize(("make", "fragments"), MODEL_CONFIG_CASES)
@pytest.mark.parametrize("verb", ["run", "validate"])
def test_bad_model_config(tmp_path, verb, make, fragments):
    refused_without_writing(tmp_path, verb, make(tmp_path), fragments)


def test_bad_config_of_a_local_model_path(tmp_path):
    """from-sglang reading a local --model-path folder: its config.json's fault, one line, nothing written."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    out = tmp_path / "s.yaml"
    launch = ["python", "-m", "sglang.launch_server", "--model-path", str(tmp_path / "m")]
    assert_user_error(invoke("from-sglang", "--out", out, "--", *launch), "config.json", "missing")
    assert not out.exists()


# --------------------------------------------------------------------------- node pre-flight (issue 29 item 4)

NODE_CASES = [
    pytest.param({**TINY, "hardware": {"tp": 2, "nnodes": 3}}, ["hardware.nnodes", "does not divide"], id="nnodes"),
    pytest.param({**TINY, "hardware": {"dp": 0}}, ["hardware.dp", "greater than 0"], id="dp-zero"),
    pytest.param(
        {**TINY, "model": {"preset": "llama-3.1-8b", "index_head_dim": -1}},
        ["model.index_head_dim", "greater than or equal to 0"],
        id="indexer-width",
    ),
]


@pytest.mark.parametrize(("content", "fragments"), NODE_CASES)
@pytest.mark.parametrize("verb", ["run", "validate"])
def test_bad_node_fields(tmp_path, verb, content, fragments):
    refused_without_writing(tmp_path, verb, content, fragments)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", "expected GiB > 0"),
        ("-8", "expected GiB > 0"),
        ("inf", "expected GiB > 0"),
        ("nan", "expected GiB > 0"),
        # finite, but its bytes overflow a float: was a traceback (OverflowError in the host ratio)
        ("1e308", "at most 4194304"),
        ("2TB", "GiB as a bare number"),
        ("512 GiB", "GiB as a bare number"),
    ],
)
def test_bad_node_memory_option(tmp_path, value, expected):
    sc = write_scenario(tmp_path, {**TINY, "cache": {**TINY["cache"], "host_ratio": None}})
    assert_user_error(invoke("validate", sc, "--node-memory", value), f"--node-memory {value}", expected)
    assert_user_error(
        invoke("advise", sc, "--instant-only", "--node-memory", value), f"--node-memory {value}", expected
    )
    before = snapshot(tmp_path)
    out = tmp_path / "s.yaml"
    assert_user_error(invoke("from-sglang", "--out", out, "--node-memory", value, "--", *LAUNCH), "--node-memory")
    assert snapshot(tmp_path) == before


# ----------------------------------------------------- bench_serving's mooncake dataset (issue 29 item 8)

MOONCAKE_LINE = b'{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]}\n'


def _mooncake(dataset_path: str | None = "trace.jsonl", **fields) -> dict:
    spec = {"dataset_name": "mooncake", **fields}
    if dataset_path is not None:
        spec["dataset_path"] = dataset_path
    return {**TINY, "workload": {"kind": "bench_serving", "bench_serving": spec}}


MOONCAKE_CASES = [
    pytest.param(
        {**TINY, "workload": {"kind": "bench_serving", "bench_serving": {"mooncake_num_rounds": 2}}},
        MOONCAKE_LINE,
        ["workload.bench_serving", "mooncake_num_rounds: only read with dataset_name: mooncake"],
        id="mooncake-option-with-random",
    ),
    pytest.param(
        _mooncake(earlier_runs=[{"random_input_len": 100, "num_prompts": 2}]),
        MOONCAKE_LINE,
        ["earlier_runs: only with dataset_name: random"],
        id="mooncake-earlier-runs",
    ),
    pytest.param(
        _mooncake(mooncake_slowdown_factor=0),
        MOONCAKE_LINE,
        ["mooncake_slowdown_factor", "greater than 0"],
        id="slowdown-0",
    ),
    pytest.param(
        _mooncake(mooncake_workload="bogus"),
        MOONCAKE_LINE,
        ["mooncake_workload", "'conversation'"],
        id="unknown-workload",
    ),
    pytest.param(
        _mooncake(None, mooncake_workload="toolagent"),
        MOONCAKE_LINE,
        ["mooncake_workload toolagent", "does not ship", "dataset_path"],
        id="toolagent-not-shipped",
    ),
    pytest.param(_mooncake("nope.jsonl"), MOONCAKE_LINE, ["nope.jsonl", "cannot read the trace"], id="no-such-trace"),
    pytest.param(_mooncake(), b"", ["trace.jsonl", "no requests"], id="mooncake-empty-trace"),
    pytest.param(
        _mooncake(), MOONCAKE_LINE + b"{not json\n", ["trace.jsonl:2", "not a JSON object"], id="mooncake-bad-json"
    ),
    pytest.param(_mooncake(), MOONCAKE_LINE + b"\xff\xfe\n", ["trace.jsonl:2", "not UTF-8"], id="mooncake-non-utf8"),
    pytest.param(
        _mooncake(),
        b'{"timestamp": "soon", "hash_ids": [1]}\n',
        ["trace.jsonl:1", "timestamp", "number of milliseconds", "'soon'"],
        id="mooncake-timestamp-text",
    ),
    pytest.param(
        _mooncake(),
        b'{"timestamp": 0, "hash_ids": [1, -2]}\n',
        ["trace.jsonl:1", "hash_ids", "non-negative integers"],
        id="mooncake-negative-hash-id",
    ),
    pytest.param(
        _mooncake(),
        b'{"timestamp": 0, "hash_ids": [1], "output_length": -1}\n',
        ["trace.jsonl:1", "output_length", "non-negative integer"],
        id="mooncake-negative-output",
    ),
    pytest.param(
        _mooncake(),
        b'{"timestamp": 0, "hash_ids": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
        ["trace.jsonl:1", "nested too deep"],
        id="mooncake-deeply-nested",
    ),
    pytest.param(
        _mooncake(tokenizer="tok.json"),
        MOONCAKE_LINE,
        ["tok.json", "workload.bench_serving.tokenizer", "no such file or folder"],
        id="no-tokenizer",
    ),
]


@pytest.mark.parametrize(("content", "trace", "fragments"), MOONCAKE_CASES)
def test_bad_mooncake_dataset(tmp_path, content, trace, fragments):
    (tmp_path / "trace.jsonl").write_bytes(trace)
    sc = write_scenario(tmp_path, content)
    before = snapshot(tmp_path)
    assert_user_error(invoke("run", sc, "--out", tmp_path / "out"), *fragments)
    assert snapshot(tmp_path) == before


def test_bench_json_needs_a_timed_run(tmp_path):
    sc = write_scenario(tmp_path, TINY)
    before = snapshot(tmp_path)
    assert_user_error(invoke("run", sc, "--out", tmp_path / "out", "--bench-json"), "--bench-json", "mode: timed")
    assert snapshot(tmp_path) == before


# -------------------------------------------------------- data-parallel ranks (issue 29 item 5)

DP_CASES = [
    pytest.param(
        {**TINY, "hardware": {"tp": 2, "dp": 2, "attn_dp": 2}},
        ["hardware.dp 2 with hardware.attn_dp 2", "SGLang 0.5.23 refuses"],
        id="dp-and-attn-dp",
    ),
    pytest.param({**TINY, "hardware": {"tp": 4, "attn_dp": 3}}, ["hardware.attn_dp 3 does not divide"], id="attn-dp"),
    pytest.param({**TINY, "hardware": {"attn_dp": 0}}, ["hardware.attn_dp", "greater than 0"], id="attn-dp-zero"),
    pytest.param(
        {**TINY, "hardware": {"dp": 2, "load_balance_method": "follow_bootstrap_room"}},
        ["hardware.load_balance_method", "not modelled", "disaggregation"],
        id="pd-routing",
    ),
    pytest.param(
        {**TINY, "hardware": {"dp": 2, "load_balance_method": "shortest_queue"}},
        ["hardware.load_balance_method", "unknown load balance method", "round_robin"],
        id="old-method",
    ),
    pytest.param(
        {**TINY, "hardware": {"dp": 2, "load_balance_method": "total_requests"}},
        ["hardware.load_balance_method", "only a timed run has"],
        id="queue-method-instant",
    ),
    pytest.param(
        {**TINY, "hardware": {"dp": 2}, "cache": {**TINY["cache"], "storage_backend": "mooncake"}},
        ["share one L3 store", "mode: timed"],
        id="shared-store-instant",
    ),
]


@pytest.mark.parametrize(("content", "fragments"), DP_CASES)
@pytest.mark.parametrize("verb", ["run", "validate"])
def test_bad_dp_fields(tmp_path, verb, content, fragments):
    refused_without_writing(tmp_path, verb, content, fragments)


@pytest.mark.parametrize(
    ("flags", "fragments"),
    [
        (
            ["--dp-size", "2", "--load-balance-method", "follow_bootstrap_room"],
            ["--load-balance-method", "not modelled"],
        ),
        (["--tp", "2", "--dp-size", "2", "--attn-dp-size", "2"], ["hardware.dp 2 with hardware.attn_dp 2"]),
        (["--dp-size", "2", "--load-balance-method", "shortest_queue"], ["--load-balance-method", "shortest_queue"]),
    ],
    ids=["pd-routing", "dp-and-attn-dp", "0.5.2-method"],
)
def test_bad_dp_flags_of_from_sglang(tmp_path, flags, fragments):
    out = tmp_path / "s.yaml"
    assert_user_error(invoke("from-sglang", "--out", out, "--", *LAUNCH, *flags), *fragments)
    assert snapshot(tmp_path) == {}


# --------------------------------------------------------------------------- a Dask address that is no scheduler


def _listener(greeting: bytes | None, reply: bytes | None):
    """A local TCP server on a free port, in a daemon thread: sends ``greeting`` on accept (a banner),
    answers ``reply`` once a request's blank line arrives (an HTTP server), else reads in silence."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve(conn) -> None:
        with conn:
            if greeting:
                conn.sendall(greeting)
            seen = b""
            while chunk := conn.recv(65536):
                seen += chunk
                if reply and b"\r\n\r\n" in seen:
                    conn.sendall(reply)

    def accept() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return srv


DASK_PORT_CASES = [
    pytest.param(
        None, b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "no Dask handshake within 2 s", id="http"
    ),
    pytest.param(b"SSH-2.0-OpenSSH_9.6\r\n", None, "not a Dask handshake", id="banner"),
]


@pytest.mark.skipif(importlib.util.find_spec("distributed") is None, reason="needs dask.distributed")
@pytest.mark.parametrize(("greeting", "reply", "fragment"), DASK_PORT_CASES)
def test_dask_scheduler_address_that_is_another_server(tmp_path, greeting, reply, fragment):
    """An HTTP port held the sweep past --dask-timeout for ever; a banner was read as a frame length (an
    exabyte allocation, a traceback). One line, exit 2, within the timeout, nothing written. In a
    subprocess with a timeout, so a hang fails instead of stalling the suite."""
    import subprocess
    import sys
    import time
    from types import SimpleNamespace

    srv = _listener(greeting, reply)
    address = f"tcp://127.0.0.1:{srv.getsockname()[1]}"
    sc = write_scenario(tmp_path, {**TINY, "sweep": {"cache.host_ratio": [0.5, 1]}})
    before = snapshot(tmp_path)
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    args = ["sweep", str(sc), "--out", str(tmp_path / "sw"), "--dask-scheduler", address, "--dask-timeout", "2"]
    t0 = time.monotonic()
    try:
        r = subprocess.run(
            [sys.executable, "-m", "hicache_sim", *args], capture_output=True, text=True, timeout=60, env=env
        )
    finally:
        srv.close()
    assert time.monotonic() - t0 < 30
    assert_user_error(
        SimpleNamespace(exit_code=r.returncode, output=r.stdout + r.stderr), f"--dask-scheduler {address}", fragment
    )
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "sw").exists()
