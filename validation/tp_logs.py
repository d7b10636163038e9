"""Public SGLang start-up logs at TP > 1: the device pool they print against the simulator's (issue 29
item 7). ``python -m validation.tp_logs`` prints the tables and writes ``results/validation/tp_logs.md``.

SGLang sizes the pool from two readings of free memory (``hardware/memory.py``): ``pre``, after the
parallel groups are up and before the weights load, and ``post``, after them; the pool is ``post - pre x
(1 - mem_fraction_static)``. The simulator takes ``pre = capacity - in use``, where what is in use
before the weights is the CUDA context (1 GiB) plus, at TP > 1, what the parallel groups hold on the
GPU's interconnect: the median of the public logs' ``Init torch distributed ends. mem usage=`` readings
held in ``hicache_sim/hardware/commmem.py`` (``READINGS``, the second table here).

Each case is predicted *held out*: when a reading of the same machine is among those the median is
taken over, it is left out for that case. Columns: the pool the simulator gave before this term (1 GiB
in use at every TP), the held-out pool, and, where the log prints its ``pre`` reading (and its
weights), the simulator given that reading (and SGLang's rule given both), which checks the rest of
the rule. The error in GiB is the pool's, per rank (tokens x KV bytes per token).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from hicache_sim.hardware.commmem import CUDA_CONTEXT_MIB, READINGS, in_use_before_weights_mib

GIB = 1 << 30
COMMAND = "python -m validation.tp_logs"
OUT = Path(__file__).resolve().parent.parent / "results" / "validation" / "tp_logs.md"
#: A held-out pool within this much of the printed one per rank (GiB of KV pool) passes
#: (``tests/test_tp_logs.py``): half the range of the counted NVLink readings (1.25-2.50 GiB), the
#: uncertainty of the median the term takes over them.
TOLERANCE_GIB = 0.5


@dataclass(frozen=True)
class TPLog:
    """One public log: where it is, what it prints (verbatim), the scenario it states, its readings, and
    the sources in ``commmem.READINGS`` taken from the same machine (left out when predicting it)."""

    name: str
    url: str
    quotes: tuple[str, ...]
    scenario: dict
    printed_tokens: int  # "KV Cache is allocated. #tokens: N" (= max_total_num_tokens)
    pre_load_avail_gib: float | None  # "Load weight begin. avail mem=X GB" (GiB), the smallest over ranks
    assumed: tuple[str, ...] = field(default_factory=tuple)
    same_machine: tuple[str, ...] = ()
    weights_gib: float | None = None  # "Load weight end. ... mem usage=X GB"


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
        same_machine=("https://github.com/sgl-project/sglang/pull/11716",),
    ),
    TPLog(
        name="llms_in_clouds_qwq32b_tp4_l4",
        url="https://github.com/didier-durand/llms-in-clouds/blob/main/docs/sglang.md",
        quotes=(
            "EC2 instance of type g6.12xlarge EC2, featuring 4 x NVIDIA L4 Tensor Core GPUs with 24GB of RAM",
            "python3.12 -m sglang.launch_server   --model Qwen/QwQ-32B --model-path /home/model/Qwen/QwQ-32B   "
            "--host 0.0.0.0 --port 30000 --tensor-parallel-size 4",
            "mem_fraction_static=0.85, max_running_requests=None, max_total_tokens=None, chunked_prefill_size=2048",
            "[2025-03-08 12:29:12 TP0] sglang is using nccl==2.21.5",
            "[2025-03-08 12:29:13 TP0] Init torch distributed ends. mem usage=0.13 GB",
            "[2025-03-08 12:29:13 TP0] Load weight begin. avail mem=21.63 GB",
            "[2025-03-08 12:29:21 TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, "
            "avail mem=6.09 GB, mem usage=15.54 GB.",
            "[2025-03-08 12:29:21 TP0] KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB",
        ),
        scenario={
            "model": {"preset": "qwen3-32b", "params_b": 32.76, "context_len": 131072},
            "hardware": {"gpu": "l40s", "memory_mib": 23034, "tp": 4, "mem_fraction_static": 0.85},
        },
        printed_tokens=46611,
        pre_load_avail_gib=21.63,
        assumed=(
            "QwQ-32B as the qwen3-32b preset's KV shape (64 layers, 8 KV heads of 128: 65,536 B per token at "
            "tp 4, as the printed K size says) with QwQ-32B's 32.76 B parameters (its config.json: hidden "
            "5120, MLP 27648, vocab 152064, untied embeddings); the L4 (23,034 MiB) on the l40s preset's "
            "PCIe fabric",
            "SGLang 0.4.3.post3 (issue #4127 by the same author, same machine and readings)",
        ),
        same_machine=(next(r.source for r in READINGS if "issues/4127" in r.source),),
        weights_gib=15.54,
    ),
    TPLog(
        name="sglang_docs_k8s_dsr1_tp16_2x8_h20",
        url="https://github.com/sgl-project/sglang/blob/main/docs/references/deploy_on_k8s.md",
        quotes=(
            "At least two Kubernetes nodes, each with two H20 systems and eight GPUs, are required.",
            "- --mem-fraction-static",
            '-  "0.93"',
            '- "16" # Size of Tensor Parallelism',
            "[2025-02-17 05:27:24 TP0] max_total_num_tokens=712400, chunked_prefill_size=8192, "
            "max_prefill_tokens=16384, max_running_requests=50, context_len=163840",
        ),
        scenario={
            "model": {"preset": "deepseek-r1"},
            "hardware": {"gpu": "h20", "tp": 16, "nnodes": 2, "mem_fraction_static": 0.93},
        },
        printed_tokens=712400,
        pre_load_avail_gib=None,
        assumed=(
            "DeepSeek-R1 (the page's example; its FP8 checkpoint), 96 GB H20s (97,871 MiB); SGLang of February 2025",
            "the TP group spans two nodes: the interconnect's single-node median is applied (the two "
            "multi-node readings, 0.27 and 1.90 GiB, are not counted)",
        ),
    ),
)


def _scenario(case: TPLog, context_mib: float | None) -> dict:
    data = {"name": case.name, "mode": "instant", **case.scenario}
    data["hardware"] = dict(data["hardware"])
    if context_mib is not None:
        data["hardware"]["cuda_context_mib"] = context_mib
    return data


def _resolved(case: TPLog, context_mib: float | None = None):
    from hicache_sim.scenario import build_scenario, resolve

    return resolve(build_scenario(_scenario(case, context_mib), case.name))


def simulated_tokens(case: TPLog, context_mib: float | None = None) -> int:
    """The device pool (tokens) the simulator resolves for the case; ``context_mib`` replaces the
    modelled memory in use before the weights (``hardware.cuda_context_mib``)."""
    return _resolved(case, context_mib).device_tokens


def held_out_context_mib(case: TPLog) -> float:
    """The modelled memory in use before the weights with this machine's own readings left out."""
    from hicache_sim.hardware.presets import GPUS

    fabric = GPUS.get(case.scenario["hardware"]["gpu"]).allreduce_fabric
    mib, _ = in_use_before_weights_mib(fabric, case.scenario["hardware"]["tp"], case.same_machine)
    return mib


def measured_context_mib(case: TPLog) -> float | None:
    """What the log shows in use before the weights: the GPU's capacity less its ``pre`` reading, MiB."""
    if case.pre_load_avail_gib is None:
        return None
    from hicache_sim.hardware.presets import GPUS

    capacity = case.scenario["hardware"].get("memory_mib") or GPUS.get(case.scenario["hardware"]["gpu"]).memory_mib
    return capacity - case.pre_load_avail_gib * 1024


def rule_tokens(case: TPLog) -> int | None:
    """SGLang's rule on the log's own readings (``pre``, and ``post = pre - weights``), through the
    simulator's memory plan and KV bytes per token: None unless the log prints both."""
    if case.pre_load_avail_gib is None or case.weights_gib is None:
        return None
    import dataclasses

    r = _resolved(case, measured_context_mib(case))
    plan = dataclasses.replace(r.memory, weight_bytes=case.weights_gib * GIB)
    return plan.kv_tokens(r.bytes_per_token, r.scenario.cache.page_size)


def row(case: TPLog) -> dict:
    """One line of the table: the printed pool, before this term, held out, and with the log's reading."""
    r = _resolved(case)
    bpt = r.bytes_per_token
    before = simulated_tokens(case, CUDA_CONTEXT_MIB)
    ctx = held_out_context_mib(case)
    # no reading of its own among those the median is taken over: held out as the simulator runs it
    held = simulated_tokens(case, ctx) if case.same_machine else r.device_tokens
    out = {
        "case": case.name,
        "url": case.url,
        "printed": case.printed_tokens,
        "before": before,
        "error_before": before / case.printed_tokens - 1,
        "held_out_in_use_gib": ctx / 1024,
        "held_out": held,
        "error": held / case.printed_tokens - 1,
        "error_gib": (held - case.printed_tokens) * bpt / GIB,
        "error_before_gib": (before - case.printed_tokens) * bpt / GIB,
        "default": r.device_tokens,
    }
    measured = measured_context_mib(case)
    if measured is not None:
        with_pre = simulated_tokens(case, measured)
        out |= {"in_use_before_weights_gib": measured / 1024, "with_log_pre": with_pre}
        out["error_with_log_pre"] = with_pre / case.printed_tokens - 1
    rule = rule_tokens(case)
    if rule is not None:
        out |= {"rule_on_log_readings": rule, "error_rule": rule / case.printed_tokens - 1}
    return out


def cases_table() -> str:
    """The printed pools against the simulator's, as markdown."""
    lines = [
        "| case | printed #tokens | before (1 GiB in use) | error | held out: in use | held-out pool | error | "
        "error, GiB of pool per rank | log's own in use | simulated with it | error | SGLang's rule on the "
        "log's readings |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in CASES:
        r = row(case)
        log = (
            f"{r['in_use_before_weights_gib']:.2f} GiB | {r['with_log_pre']} | {r['error_with_log_pre']:+.2%}"
            if "with_log_pre" in r
            else "not printed | | "
        )
        rule = f"{r['rule_on_log_readings']} ({r['error_rule']:+.2%})" if "rule_on_log_readings" in r else ""
        lines.append(
            f"| [{r['case']}]({r['url']}) | {r['printed']} | {r['before']} | {r['error_before']:+.2%} "
            f"| {r['held_out_in_use_gib']:.2f} GiB | {r['held_out']} | {r['error']:+.2%} | "
            f"{r['error_before_gib']:+.2f} -> {r['error_gib']:+.2f} | {log} | {rule} |"
        )
    return "\n".join(lines) + "\n"


def readings_table() -> str:
    """``commmem.READINGS`` as markdown: per rank, GiB."""
    lines = [
        "| source | GPUs | interconnect | tp | nodes | when | parallel init (mem usage) | free before weights "
        "| in use before weights | of which context | counted | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in READINGS:
        free = "" if r.free_gib is None else f"{r.free_gib:.2f}"
        in_use = "" if r.in_use_gib is None else f"{r.in_use_gib:.2f}"
        context = "" if r.context_gib is None else f"{r.context_gib:.2f}"
        lines.append(
            f"| {r.source} | {r.gpu} | {r.fabric} | {r.tp} | {r.nnodes} | {r.when} | {r.distributed_gib:.2f} | "
            f"{free} | {in_use} | {context} | {'yes' if r.counted else 'no'} | {r.note} |"
        )
    return "\n".join(lines) + "\n"


def document() -> str:
    """The whole result file."""
    from hicache_sim.hardware.commmem import INTERCONNECTS, communicator_mib

    medians = ", ".join(f"{n} {communicator_mib(n) / 1024:.2f} GiB" for n in INTERCONNECTS.names())
    return (
        "# TP > 1: the device pool SGLang prints against the simulator's\n\n"
        f"Made by `{COMMAND}` (mechanism and sources: `hicache_sim/hardware/commmem.py`, "
        "`docs/reference/hardware-and-models.md` section 4.5). In use before the weights = CUDA context "
        f"({CUDA_CONTEXT_MIB / 1024:.2f} GiB) + at tp > 1 the median of the counted readings of the GPU's "
        f"interconnect: {medians}. Held out: each case without its own machine's readings. Tolerance "
        f"(tests/test_tp_logs.py): {TOLERANCE_GIB} GiB of pool per rank.\n\n"
        "## Cases\n\n" + cases_table() + "\n## Readings of the parallel init (per rank, GiB)\n\n" + readings_table()
    )


def main(argv: list[str] | None = None) -> int:
    """Print the tables; write them (``--out``, default ``results/validation/tp_logs.md``)."""
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT), help="result file (default: results/validation/tp_logs.md)")
    a = ap.parse_args(argv)
    doc = document()
    print(doc, end="")
    Path(a.out).write_text(doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
