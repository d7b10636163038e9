"""Public SGLang start-up logs at TP > 1: the device pool they print against the simulator's (issue 29
item 7). ``python -m validation.tp_logs`` prints the table.

SGLang sizes the pool from two readings of free memory (``hardware/memory.py``): ``pre``, after the
parallel groups are up and before the weights load, and ``post``, after them; the pool is ``post - pre x
(1 - mem_fraction_static)``. The simulator takes ``pre = capacity - hardware.cuda_context_mib`` (1 GiB,
from TP-1 logs). At TP > 1 more is in use by then: the NCCL communicators (per channel and peer, the
receive buffers of its three protocols, ``LL`` 512 KiB, ``LL128`` 4.69 MiB and ``SIMPLE`` 4 MiB, on as
many channels as NCCL's topology search picks), the custom all-reduce workspace (tens of MiB) and the
PyNccl communicator SGLang warms up. No code gives the channel count without the machine's topology,
so each case says what its log measured: where a log prints the ``pre`` reading, the simulator is run
with that reading too, which checks the rest of the rule (weights, fraction, bytes per token).
"""

from __future__ import annotations

from dataclasses import dataclass, field

GIB = 1 << 30


@dataclass(frozen=True)
class TPLog:
    """One public log: where it is, what it prints (verbatim), the scenario it states, and its readings."""

    name: str
    url: str
    quotes: tuple[str, ...]
    scenario: dict
    printed_tokens: int  # "KV Cache is allocated. #tokens: N" (= max_total_num_tokens)
    pre_load_avail_gib: float | None  # "Load weight begin. avail mem=X GB" (GiB), the smallest over ranks
    assumed: tuple[str, ...] = field(default_factory=tuple)


CASES: tuple[TPLog, ...] = (
    TPLog(
        name="vllm_21348_qwen3_235b_fp8_tp4_h100",
        url="https://github.com/vllm-project/vllm/issues/21348",
        quotes=(
            "launched `Qwen3-235B-A22B-FP8` on both vLLM and SGLang on 4xH100 GPUs",
            "python3 -m sglang.launch_server --model /path/to/Qwen3-235B-A22B-FP8 --tp 4 --trust-remote-code "
            "--host 0.0.0.0 --port 8000 --mem-fraction-static 0.93",
            "KV Cache is allocated. #tokens: 367404, K size: 8.23 GB, V size: 8.23 GB",
        ),
        scenario={
            "model": {"preset": "qwen3-235b-a22b", "weights_dtype": "fp8"},
            "hardware": {"gpu": "h100", "tp": 4, "mem_fraction_static": 0.93},
        },
        printed_tokens=367404,
        pre_load_avail_gib=None,
        assumed=(
            "SGLang of July 2025 (not stated); the 80 GB H100 (81,559 MiB)",
            "not checked: whether the checkpoint keeps its embedding, LM head and router in bf16 (as "
            "block-FP8 releases usually do): 0.37 GiB per rank more than parameters x 1 byte if it does",
        ),
    ),
    TPLog(
        name="sglang_11716_llama70b_tp8_h200",
        url="https://github.com/sgl-project/sglang/pull/11716",
        quotes=(
            "[2025-10-16 09:06:09 TP1] Init torch distributed ends. mem usage=2.01 GB",
            "[2025-10-16 09:06:10 TP1] Load weight begin. avail mem=137.29 GB",
            "Loading safetensors checkpoint shards:   0% Completed | 0/30",
            "[2025-10-16 09:06:22 TP1] KV Cache is allocated. #tokens: 2795207, K size: 53.31 GB, V size: 53.31 GB",
            "[2025-10-16 09:06:22 TP0] Capture cuda graph bs [1, 2, 4, ..., 496, 512]",
        ),
        scenario={"model": {"preset": "llama-3.1-70b"}, "hardware": {"gpu": "h200", "tp": 8}},
        printed_tokens=2795207,
        pre_load_avail_gib=137.29,
        assumed=(
            "Llama-3.x-70B: 53.31 GiB of K over 2,795,207 tokens is 20,480 B per token = 80 layers x one KV "
            "head x 128 x 2 B (8 KV heads over 8 ranks), in 30 checkpoint shards",
            "an H200 (141 GB; 137.29 GiB free before the weights); mem_fraction_static SGLang's default, "
            "whose rule SGLang 0.5.3 (October 2025) shares with 0.5.23: 0.897 at tp 8 with the printed "
            "CUDA-graph batch sizes up to 512",
        ),
    ),
)


def simulated_tokens(case: TPLog, context_mib: float | None = None) -> int:
    """The device pool (tokens) the simulator resolves for the case; ``context_mib`` replaces
    ``hardware.cuda_context_mib`` (the memory in use before the weights)."""
    from hicache_sim.scenario import build_scenario, resolve

    data = {"name": case.name, "mode": "instant", **case.scenario}
    data["hardware"] = dict(data["hardware"])
    if context_mib is not None:
        data["hardware"]["cuda_context_mib"] = context_mib
    return resolve(build_scenario(data, case.name)).device_tokens


def measured_context_mib(case: TPLog) -> float | None:
    """What the log shows in use before the weights: the GPU's capacity less its ``pre`` reading, MiB."""
    if case.pre_load_avail_gib is None:
        return None
    from hicache_sim.hardware.presets import GPUS

    capacity = case.scenario["hardware"].get("memory_mib") or GPUS.get(case.scenario["hardware"]["gpu"]).memory_mib
    return capacity - case.pre_load_avail_gib * 1024


def row(case: TPLog) -> dict:
    """One line of the table: the printed pool, the simulator's by default and with the log's reading."""
    default = simulated_tokens(case)
    out = {
        "case": case.name,
        "url": case.url,
        "printed": case.printed_tokens,
        "simulated": default,
        "error": default / case.printed_tokens - 1,
    }
    ctx = measured_context_mib(case)
    if ctx is not None:
        with_pre = simulated_tokens(case, ctx)
        out |= {"in_use_before_weights_gib": ctx / 1024, "with_log_pre": with_pre}
        out["error_with_log_pre"] = with_pre / case.printed_tokens - 1
    return out


def main() -> int:
    print(
        "| case | printed #tokens | simulated (default) | error | in use before weights (log) "
        "| simulated with it | error |"
    )
    print("|---|---|---|---|---|---|---|")
    for case in CASES:
        r = row(case)
        tail = (
            f"{r['in_use_before_weights_gib']:.2f} GiB | {r['with_log_pre']} | {r['error_with_log_pre']:+.2%}"
            if "with_log_pre" in r
            else "not printed | | "
        )
        print(f"| [{r['case']}]({r['url']}) | {r['printed']} | {r['simulated']} | {r['error']:+.2%} | {tail} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
