"""``hicache-sim calibrate SERVER_LOG --scenario S``: the SGLang server-log reader (real lines from public
logs, every format), what a pair of lines pins, and the fit recovering knobs from a log the simulator's
own step times wrote."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import TINY_SCENARIO, invoke

from hicache_sim.calibration.logfit import fit_log, model_with
from hicache_sim.calibration.serverlog import parse_line, parse_server_log
from hicache_sim.hardware.calibration import CalibrationError, load_calibration
from hicache_sim.scenario import build_scenario, resolve
from hicache_sim.sim.compute import ComputeParams

TRUE = {"hbm_efficiency": 0.61, "decode_us_per_layer": 31.0, "linear_mfu": 0.47, "attention_mfu": 0.33}
DECODE_SHAPES = [(1, 2_000), (8, 30_000), (32, 90_000), (64, 150_000), (16, 200_000), (4, 8_000)]
PREFILL_SHAPES = [(1, 512, 0), (1, 8192, 0), (1, 8192, 24576), (2, 4096, 30000), (4, 16384, 0), (1, 2048, 60000)]
LOG_INTERVAL = 40  # --decode-log-interval's default: decode steps between two decode lines


def _resolved(scenario: dict = TINY_SCENARIO):
    return resolve(build_scenario(dict(scenario), "t", []))


def decode_line(style: str, b: int, kv: int, tps: float) -> str:
    """A decode line as SGLang prints it: 0.4.x ``Decode batch.`` ending ``, ``; 0.5.x ``Decode batch,``."""
    if style == "0.4":
        return (
            f"[2025-02-27 04:37:29 TP0] Decode batch. #running-req: {b}, #token: {kv}, token usage: 0.13, "
            f"gen throughput (token/s): {tps:.2f}, #queue-req: 0, "
        )
    return (
        f"[2026-04-08 14:05:21 TP0] Decode batch, #running-req: {b}, #token: {kv}, token usage: 0.29, "
        f"cuda graph: True, gen throughput (token/s): {tps:.2f}, #queue-req: 0"
    )


def prefill_line(n: int, new: int, cached: int, tps: float, running: int = 0, queue: int = 5) -> str:
    """A 0.5.x prefill line (the form that prints input throughput)."""
    return (
        f"[2026-07-04 04:31:24 TP0] Prefill batch, #new-seq: {n}, #new-token: {new}, #cached-token: {cached}, "
        f"token usage: 0.14, #running-req: {running}, #queue-req: {queue}, #pending-token: 0, cuda graph: False, "
        f"input throughput (token/s): {tps:.2f}"
    )


def simulated_log(
    knobs: dict,
    style: str = "0.5",
    decode=DECODE_SHAPES,
    prefill=PREFILL_SHAPES,
    runs: int = 3,
    scenario: dict = TINY_SCENARIO,
) -> str:
    """A server log whose figures are the simulator's own step times for ``knobs``: per decode shape a
    prefill line then ``runs + 1`` decode lines ``LOG_INTERVAL`` steps apart (the first follows the
    prefill, so it pins nothing); per prefill shape ``runs + 1`` identical back-to-back batches."""
    model = model_with(ComputeParams.from_resolved(_resolved(scenario)), knobs)
    lines = []
    for b, kv in decode:
        lines.append(prefill_line(b, 100 * b, 0, 1234.5, running=0, queue=0))
        k = kv
        lines.append(decode_line(style, b, k, 99.0))
        for _ in range(runs):
            nxt = k + LOG_INTERVAL * b
            step = model.step_overhead_s + model.decode_time(b, round((k + nxt) / 2))  # as sim/engine.py
            lines.append(decode_line(style, b, nxt, b / step))
            k = nxt
    if style != "0.4":  # 0.4.x prints no input throughput outside a disaggregated prefill server
        for n, new, cached in prefill:
            step = model.step_overhead_s + model.prefill_time([(new / n, cached / n)] * n)
            lines += [prefill_line(n, new, cached, new / step) for _ in range(runs + 1)]
    lines.append('[2026-04-08 14:05:21] INFO:     127.0.0.1:40052 - "POST /generate HTTP/1.1" 200 OK')
    return "\n".join(lines) + "\n"


def write(tmp_path: Path, text: str, name: str = "server.log") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def write_scenario(tmp_path: Path, scenario: dict = TINY_SCENARIO) -> Path:
    p = tmp_path / "sc.yaml"
    p.write_text(yaml.safe_dump(scenario))
    return p


# --------------------------------------------------------------------------- the fit


@pytest.mark.parametrize("style", ["0.5", "0.4"])
def test_fit_recovers_knobs_of_a_simulated_log(tmp_path, style):
    parsed = parse_server_log(write(tmp_path, simulated_log(TRUE, style)))
    fit = fit_log(_resolved(), parsed.intervals, holdout=0.25, seed=0)
    expect = TRUE if style == "0.5" else {k: TRUE[k] for k in ("hbm_efficiency", "decode_us_per_layer")}
    assert set(fit.knobs) == set(expect)
    for k, v in expect.items():
        assert fit.knobs[k] == pytest.approx(v, rel=0.01), k
    for kind in fit.holdout_ape:  # the simulator's own figures: nothing left unexplained
        assert fit.holdout_ape[kind][1] < 0.1 and fit.fit_ape[kind] < 0.1, kind
    if style == "0.4":
        assert "no prefill-only interval" in fit.not_pinned["linear_mfu"]


def test_moe_prefill_pins_the_experts_efficiency(tmp_path):
    """A MoE's prefill time is mostly its routed experts: ``moe_mfu`` is fitted first, and the dense
    GEMMs' efficiency, whose effect on these steps is nearly the same, is kept and named."""
    moe = {**TINY_SCENARIO, "model": "qwen3-30b-a3b"}
    true = {**TRUE, "linear_mfu": _resolved(moe).compute_knobs["linear_mfu"], "moe_mfu": 0.18}
    text = simulated_log(true, scenario=moe, prefill=[*PREFILL_SHAPES, (8, 512, 0), (16, 2048, 4096)])
    fit = fit_log(_resolved(moe), parse_server_log(write(tmp_path, text)).intervals, holdout=0.25)
    assert set(fit.knobs) == {"hbm_efficiency", "decode_us_per_layer", "moe_mfu", "attention_mfu"}
    for k in fit.knobs:
        assert fit.knobs[k] == pytest.approx(true[k], rel=0.01), k
    assert "cannot tell it from moe_mfu" in fit.not_pinned["linear_mfu"]


def test_calibrate_writes_a_file_a_scenario_reads(tmp_path):
    log = write(tmp_path, simulated_log(TRUE))
    sc = write_scenario(tmp_path)
    out = tmp_path / "cal.yaml"
    r = invoke("calibrate", log, "--scenario", sc, "--out", out)
    assert r.exit_code == 0, r.output
    assert "held-out decode step time" in r.output and "not pinned: step_overhead_us" in r.output
    cal = load_calibration(out)
    assert set(cal.compute) == set(TRUE)
    scen = {**TINY_SCENARIO, "hardware": {"calibration": str(out)}}
    knobs = _resolved(scen).compute_knobs
    for k, v in TRUE.items():
        assert knobs[k] == pytest.approx(v, rel=0.01), k


def test_one_decode_shape_pins_one_decode_knob(tmp_path):
    """Steps of one shape cannot tell the HBM efficiency from the per-layer fixed cost: one is fitted,
    the other kept and named."""
    text = simulated_log(TRUE, decode=[(8, 30_000)], prefill=[], runs=1)
    fit = fit_log(_resolved(), parse_server_log(write(tmp_path, text)).intervals, holdout=0.0)
    assert list(fit.knobs) == ["hbm_efficiency"]
    assert "cannot tell it from hbm_efficiency" in fit.not_pinned["decode_us_per_layer"]


# --------------------------------------------------------------------------- what a pair of lines pins


def test_prefill_after_idle_pins_nothing(tmp_path):
    """eugr/llama-benchy#15: one 2048-token prompt at a time, nothing queued; input throughput 45 tok/s
    is the time between requests, not a prefill's."""
    line = (
        "[2026-05-15 12:31:24] Prefill batch, #new-seq: 1, #new-token: 2048, #cached-token: 0, full token usage: "
        "0.01, swa token usage: 0.02, #running-req: 0, #queue-req: 0, input throughput (token/s): 45.65, "
        "cuda graph: False"
    )
    parsed = parse_server_log(write(tmp_path, f"{line}\n{line.replace('45.65', '46.04')}\n"))
    assert parsed.intervals == []
    assert parsed.skipped == {"prefill: the server may have waited for a request": 1}


def test_speculative_decode_keeps_its_accept_len(tmp_path):
    """sgl-project/sgl-kernel-npu#608 (EAGLE on NPU): tokens per step vary with the accept length, so the
    interval keeps the line's (a round over it: tests/test_speculative_time.py times it)."""
    a = (
        "[2026-07-21 15:00:19 TP0 EP0] Decode batch, #running-req: 23, #token: 227968, token usage: 0.64, "
        "accept len: 2.63, accept rate: 0.54, npu graph: True, gen throughput (token/s): 631.96, #queue-req: 3"
    )
    parsed = parse_server_log(write(tmp_path, f"{a}\n{a}\n"))
    assert [(iv.shape, iv.accept_len) for iv in parsed.intervals] == [((23, 227968), 2.63)]
    assert parsed.accept_len == 2.63 and parsed.skipped == {}


def test_decode_after_prefill_or_batch_change_pins_nothing(tmp_path):
    text = "\n".join(
        [
            prefill_line(1, 100, 0, 1000.0, running=3),
            decode_line("0.5", 4, 1000, 500.0),
            decode_line("0.5", 3, 1100, 500.0),
            decode_line("0.5", 3, 1220, 400.0),
        ]
    )
    parsed = parse_server_log(write(tmp_path, text))
    assert [(iv.shape, iv.seconds) for iv in parsed.intervals] == [((3, 1160.0), 3 / 400.0)]
    assert parsed.skipped == {
        "decode line after a prefill line (mixed work)": 1,
        "decode: batch size changed between the lines": 1,
    }


# --------------------------------------------------------------------------- real lines of public logs

REAL_LINES = [
    pytest.param(
        # sgl-project/sglang#3909 (0.4.x: "Decode batch." and no graph flag)
        "[2025-02-27 04:37:29 TP0] Decode batch. #running-req: 8, #token: 67724, token usage: 0.13, "
        "gen throughput (token/s): 183.54, #queue-req: 0",
        ("decode", "TP0", {"running": 8, "kv_tokens": 67724, "gen_tps": 183.54, "queue": 0}),
        id="0.4-decode-sglang#3909",
    ),
    pytest.param(
        # sgl-project/sglang#22166 (0.5.x, no rank prefix)
        "[2026-04-05 20:02:51] Prefill batch, #new-seq: 1, #new-token: 158, #cached-token: 0, token usage: 0.08, "
        "#running-req: 31, #queue-req: 0, cuda graph: True, input throughput (token/s): 559.53",
        ("prefill", "", {"new_seqs": 1, "new_tokens": 158, "running": 31, "graph": True, "input_tps": 559.53}),
        id="0.5-prefill-sglang#22166",
    ),
    pytest.param(
        # sgl-project/sglang#22331 (0.5.x decode, cuda graph)
        "[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: "
        "True, gen throughput (token/s): 144.95, #queue-req: 0",
        ("decode", "TP0", {"running": 5, "kv_tokens": 20800, "graph": True, "gen_tps": 144.95}),
        id="0.5-decode-sglang#22331",
    ),
    pytest.param(
        # sgl-project/sglang#30047 (hybrid Mamba pool, NPU graph, #pending-token)
        "[2026-07-04 04:31:24 TP0] Prefill batch, #new-seq: 12, #new-token: 43008, #cached-token: 0, full token "
        "usage: 0.14, mamba usage: 0.20, #running-req: 1, #queue-req: 97, #pending-token: 109585, npu graph: "
        "False, input throughput (token/s): 15734.14",
        ("prefill", "TP0", {"new_seqs": 12, "usage": 0.14, "queue": 97, "graph": False, "input_tps": 15734.14}),
        id="mamba-npu-sglang#30047",
    ),
    pytest.param(
        # eugr/llama-benchy#15 (hybrid SWA pool)
        "[2026-05-15 12:31:24] Prefill batch, #new-seq: 1, #new-token: 2048, #cached-token: 0, full token usage: "
        "0.01, swa token usage: 0.02, #running-req: 0, #queue-req: 0, input throughput (token/s): 45.65, "
        "cuda graph: False",
        ("prefill", "", {"new_tokens": 2048, "usage": 0.01, "input_tps": 45.65, "graph": False}),
        id="swa-llama-benchy#15",
    ),
    pytest.param(
        # sgl-project/sgl-kernel-npu#608 (speculative, EP prefix)
        "[2026-07-21 15:00:13 TP0 EP0] Decode batch, #running-req: 24, #token: 233600, token usage: 0.66, "
        "accept len: 3.05, accept rate: 0.68, npu graph: True, gen throughput (token/s): 239.06, #queue-req: 2",
        ("decode", "TP0 EP0", {"running": 24, "kv_tokens": 233600, "accept_len": 3.05, "gen_tps": 239.06}),
        id="spec-npu-sgl-kernel-npu#608",
    ),
    pytest.param(
        # sgl-project/sglang#34924 (hybrid SWA decode: #full token, not #swa token, is the KV; spec cap len)
        "[2026-08-15 05:37:25 TP0] Decode batch, #running-req: 1, #full token: 768, full token usage: 0.00, "
        "#swa token: 512, swa token usage: 0.00, accept len: 4.25, accept rate: 0.65, cap len: 6.00, cuda graph: "
        "True, gen throughput (token/s): 453.13, #queue-req: 0",
        ("decode", "TP0", {"running": 1, "kv_tokens": 768, "usage": 0.0, "accept_len": 4.25, "gen_tps": 453.13}),
        id="swa-spec-decode-sglang#34924",
    ),
    pytest.param(
        # sgl-project/sglang#6291 (0.4.6 prefill: "Prefill batch." and no input throughput)
        "[2025-05-14 09:31:43] Prefill batch. #new-seq: 2, #new-token: 2, #cached-token: 8027, token usage: 0.26, "
        "#running-req: 28, #queue-req: 0",
        ("prefill", "", {"new_seqs": 2, "new_tokens": 2, "cached_tokens": 8027, "running": 28, "queue": 0}),
        id="0.4-prefill-sglang#6291",
    ),
    pytest.param(
        # sgl-project/sglang#6081 (0.4.x, DP attention rank prefix, MTP accept len)
        "[2025-05-31 18:31:21 DP0 TP0] Decode batch. #running-req: 8, #token: 37217, token usage: 0.13, accept len: "
        "2.90, cuda graph: True, gen throughput (token/s): 171.01, #queue-req: 0",
        ("decode", "DP0 TP0", {"running": 8, "kv_tokens": 37217, "accept_len": 2.90, "gen_tps": 171.01}),
        id="0.4-dp-spec-sglang#6081",
    ),
    pytest.param(
        # shifangx/Scripts-SGLang README.md at 125544551ee365e1714c26e9838dbec75895f880, line 88 (48-DP decode
        # run after "Scheduler.run_batch sleep 180.0s", 2025-10-16; 0.4.x form, PD decode server, trailing comma)
        "[2025-10-16 19:02:59 DP0 TP0 EP0] Decode batch. #running-req: 68, #token: 1201280, token usage: 0.69, "
        "pre-allocated usage: 0.63, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 0.38, "
        "#queue-req: 0,",
        ("decode", "DP0 TP0 EP0", {"running": 68, "kv_tokens": 1201280, "usage": 0.69, "gen_tps": 0.38, "queue": 0}),
        id="0.4-dp-ep-Scripts-SGLang@1255445",
    ),
    pytest.param(
        # shifangx/Scripts-SGLang README.md at 481e976d7e5a84d7e19dd32160795ad9ababf944, line 132 (0.5.x PD
        # decode server, DP attention; ends ", ")
        "[2025-11-22 23:24:43 DP0 TP0 EP0] Decode batch, #running-req: 1024, #token: 1922048, token usage: 0.62, "
        "pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, cuda graph: True, "
        "gen throughput (token/s): 12112.66, #queue-req: 853, ",
        ("decode", "DP0 TP0 EP0", {"running": 1024, "kv_tokens": 1922048, "gen_tps": 12112.66, "queue": 853}),
        id="0.5-dp-ep-Scripts-SGLang@481e976",
    ),
    pytest.param(
        # sgl-project/sglang test/srt/debug_utils/test_log_parser.py at 4a1e4b7df9aa9490c8379d102750adc67a8b597b
        # (a DP6 rank's line)
        "[2025-11-03 14:31:10 DP6 TP6 EP6] Decode batch, #running-req: 251, #token: 2811200, token usage: 1.00, "
        "cuda graph: True, gen throughput (token/s): 2055.94, #queue-req: 655,",
        ("decode", "DP6 TP6 EP6", {"running": 251, "kv_tokens": 2811200, "usage": 1.0, "queue": 655}),
        id="dp6-sglang-test_log_parser@4a1e4b7",
    ),
    pytest.param(
        # the same file: a Ray actor's prefix and SGLANG_LOG_FORWARD_ITERS's "Decode batch [N],"
        "(SGLangEngine pid=111711, ip=10.15.36.1) [2025-10-31 03:45:20 TP0] Decode batch [39913], #running-req: 78, "
        "#token: 432100, token usage: 0.27, cuda graph: True, gen throughput (token/s): 7269.16, #queue-req: 0,",
        ("decode", "pid=111711@10.15.36.1 TP0", {"running": 78, "kv_tokens": 432100, "gen_tps": 7269.16}),
        id="iter-ray-sglang-test_log_parser@4a1e4b7",
    ),
    pytest.param(
        # sgl-project/sglang#17499 (MUSA graph flag, DP prefix without attention DP)
        "[2026-01-21 19:37:32 DP0 TP0] Decode batch, #running-req: 1, #token: 128, token usage: 0.00, musa graph: "
        "False, gen throughput (token/s): 18.49, #queue-req: 0, ",
        ("decode", "DP0 TP0", {"running": 1, "kv_tokens": 128, "graph": False, "gen_tps": 18.49}),
        id="musa-dp-sglang#17499",
    ),
    pytest.param(
        # sgl-project/sglang#29162 (pipeline stage prefix under a Kubernetes container-log prefix)
        "2026-06-24T17:38:02.436246479+02:00 stderr F [2026-06-24 15:38:02 PP0] Decode batch, #running-req: 1, "
        "#token: 998080, token usage: 0.59, cuda graph: True, gen throughput (token/s): 205.21, #queue-req: 0",
        ("decode", "PP0", {"running": 1, "kv_tokens": 998080, "usage": 0.59, "gen_tps": 205.21}),
        id="pp-k8s-sglang#29162",
    ),
    pytest.param(
        # sgl-project/sglang#29600 (PP with attention context parallelism: the ATTN_CP tag is part of the rank)
        "[2026-06-27 10:02:58 PP0 ATTN_CP1 TP1 EP1] Prefill batch, #new-seq: 1, #new-token: 128, #cached-token: 0, "
        "token usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0, #bootstrap-req: 0, #inflight-req: 1, "
        "npu graph: False, input throughput (token/s): 2.94",
        ("prefill", "PP0 ATTN_CP1 TP1 EP1", {"new_tokens": 128, "running": 0, "graph": False, "input_tps": 2.94}),
        id="pp-attn-cp-sglang#29600",
    ),
    pytest.param(
        # sgl-project/sglang#22166 (a progress bar printed on the same terminal line before the logger's prefix)
        "  2% 1/64 [00:04<04:51,  4.62s/it][2026-04-05 20:02:49] Prefill batch, #new-seq: 1, #new-token: 172, "
        "#cached-token: 0, token usage: 0.08, #running-req: 31, #queue-req: 0, cuda graph: True, input throughput "
        "(token/s): 4042.20",
        ("prefill", "", {"new_seqs": 1, "new_tokens": 172, "cached_tokens": 0, "input_tps": 4042.20}),
        id="tqdm-prefix-sglang#22166",
    ),
    pytest.param(
        # sgl-project/sglang-omni#712 (Python logging's default format: time, level, logger name)
        "2026-06-07 10:59:31,659 [INFO] sglang.srt.managers.scheduler_metrics_mixin: Decode batch, #running-req: 1, "
        "#token: 227, token usage: 0.00, cuda graph: True, gen throughput (token/s): 126.29, #queue-req: 0,",
        ("decode", "", {"running": 1, "kv_tokens": 227, "graph": True, "gen_tps": 126.29}),
        id="pylogging-sglang-omni#712",
    ),
]


@pytest.mark.parametrize(("text", "expect"), REAL_LINES)
def test_real_lines_parse(text, expect):
    kind, rank, figures = expect
    line = parse_line(text, 7, "x.log")
    assert (line.kind, line.rank, line.lineno) == (kind, rank, 7)
    for k, v in figures.items():
        assert line.figures[k] == v, k


#: Real excerpts that mix the lines of several schedulers: (source, lines, the rank refused).
MIXED_RANKS = [
    pytest.param(
        [  # sgl-project/sglang#17499: two DP ranks, each with its own batch
            "[2026-01-21 19:37:32 DP0 TP0] Decode batch, #running-req: 1, #token: 128, token usage: 0.00, musa graph: "
            "False, gen throughput (token/s): 18.49, #queue-req: 0, ",
            "[2026-01-21 19:37:34 DP1 TP0] Decode batch, #running-req: 1, #token: 88, token usage: 0.00, musa graph: "
            "False, gen throughput (token/s): 17.16, #queue-req: 0, ",
        ],
        "DP1 TP0",
        id="dp-sglang#17499",
    ),
    pytest.param(
        [  # sgl-project/sglang#29162: every pipeline stage prints the same batch with its own throughput
            "2026-06-24T17:38:02.436246479+02:00 stderr F [2026-06-24 15:38:02 PP0] Decode batch, #running-req: 1, "
            "#token: 998080, token usage: 0.59, cuda graph: True, gen throughput (token/s): 205.21, #queue-req: 0",
            "2026-06-24T17:38:02.442425303+02:00 stderr F [2026-06-24 15:38:02 PP1] Decode batch, #running-req: 1, "
            "#token: 998080, token usage: 0.59, cuda graph: True, gen throughput (token/s): 203.25, #queue-req: 0",
        ],
        "PP1",
        id="pp-sglang#29162",
    ),
    pytest.param(
        [  # sgl-project/sglang test/srt/debug_utils/test_log_parser.py@4a1e4b7: two Ray engines, both TP0
            "(SGLangEngine pid=35555) [2025-10-31 03:45:20 TP0] Decode batch [51341], #running-req: 317, #token: "
            "1094261, token usage: 0.67, cuda graph: True, gen throughput (token/s): 14806.57, #queue-req: 0,",
            "(SGLangEngine pid=111711, ip=10.15.36.1) [2025-10-31 03:45:20 TP0] Decode batch [39913], #running-req: "
            "78, #token: 432100, token usage: 0.27, cuda graph: True, gen throughput (token/s): 7269.16, "
            "#queue-req: 0,",
        ],
        "pid=111711@10.15.36.1 TP0",
        id="ray-engines-sglang-test_log_parser",
    ),
]


@pytest.mark.parametrize(("lines", "second"), MIXED_RANKS)
def test_lines_of_two_schedulers_are_refused(tmp_path, lines, second):
    """Two schedulers' lines interleave in one file (DP ranks, pipeline stages, Ray engines); pairing one's
    line with the other's would time neither, so the log is refused naming the second rank."""
    log = write(tmp_path, "\n".join(lines) + "\n")
    with pytest.raises(CalibrationError, match=rf":2: lines of rank {re.escape(second)} after rank "):
        parse_server_log(log)


def test_terminal_truncated_real_line_is_refused():
    """sgl-project/sglang#25960 pastes lines a terminal cut to its width: refused, naming file and line."""
    text = (
        "[2026-05-28 02:59:50 TP0] Prefill batch, #new-seq: 1, #new-token: 896, #cached-tounning-req: 1, "
        "#queue-req: 51, #pending-token: 23787, npu graph: False, input thr"
    )
    with pytest.raises(CalibrationError, match=re.escape("x.log:3: Prefill batch line is cut off at 'input thr'")):
        parse_line(text, 3, "x.log")


def test_unknown_fields_are_ignored():
    """A figure a later version adds (or one without a value in the middle) is skipped, not fatal."""
    text = decode_line("0.5", 3, 900, 60.0).replace("cuda graph", "new figure: 12, odd, cuda graph")
    line = parse_line(text, 1, "x.log")
    assert line.figures == {"running": 3, "kv_tokens": 900, "usage": 0.29, "graph": True, "gen_tps": 60.0, "queue": 0}


def test_full_chunk_prefill_pins_nothing(tmp_path):
    """SGLang logs a chunked prompt's later chunks with ``#cached-token: 0`` (0.4.10 add_chunked_req), so a
    batch that filled the chunk may attend to context the line does not show."""
    text = "\n".join(prefill_line(1, 8192, 0, 40000.0) for _ in range(3))
    assert len(parse_server_log(write(tmp_path, text)).intervals) == 2
    parsed = parse_server_log(write(tmp_path, text), chunk=8192)
    assert parsed.intervals == [] and "a full chunk" in next(iter(parsed.skipped))


def test_real_decode_log_pins_one_step_per_line_pair(tmp_path):
    """sgl-project/sglang#3909 (0.4.x, 8 requests decoding): ``#token`` grows by 320 = 40 x 8 from line to
    line, the 40 decode steps of ``--decode-log-interval``; each pair pins one step of 8 requests at
    ``8 / gen throughput`` seconds at the KV between the two lines."""
    figures = [(67724, 183.54), (68044, 183.59), (68364, 183.58), (68684, 182.35)]
    text = "\n".join(
        f"[2025-02-27 04:37:29 TP0] Decode batch. #running-req: 8, #token: {k}, token usage: 0.13, "
        f"gen throughput (token/s): {tps}, #queue-req: 0"
        for k, tps in figures
    )
    parsed = parse_server_log(write(tmp_path, text))
    assert [iv.shape for iv in parsed.intervals] == [(8, 67884.0), (8, 68204.0), (8, 68524.0)]
    assert [iv.seconds for iv in parsed.intervals] == pytest.approx([8 / 183.59, 8 / 183.58, 8 / 182.35])


def test_decode_lines_pasted_in_pieces_pin_nothing_across_the_gap(tmp_path):
    """sgl-project/sglang#3909 pastes its log in blocks: the last line of one block (04:37:43) and the first
    of the next (04:46:39) are both decode lines of 8 requests, but ``#token`` fell from 70284 to 62531,
    which the same requests decoding cannot do: lines were left out between them, so the KV the second
    line's 40 steps ran at is unknown (the first block's KV stood in for it) and the pair pins nothing."""
    text = "\n".join(
        [
            "[2025-02-27 04:37:42 TP0] Decode batch. #running-req: 8, #token: 69964, token usage: 0.14, "
            "gen throughput (token/s): 180.98, #queue-req: 0",
            "[2025-02-27 04:37:43 TP0] Decode batch. #running-req: 8, #token: 70284, token usage: 0.14, "
            "gen throughput (token/s): 182.11, #queue-req: 0",
            "[2025-02-27 04:46:39 TP0] Decode batch. #running-req: 8, #token: 62531, token usage: 0.12, "
            "gen throughput (token/s): 186.64, #queue-req: 0",
            "[2025-02-27 04:46:41 TP0] Decode batch. #running-req: 8, #token: 62851, token usage: 0.13, "
            "gen throughput (token/s): 185.93, #queue-req: 0",
        ]
    )
    parsed = parse_server_log(write(tmp_path, text))
    assert [(iv.lineno, iv.shape) for iv in parsed.intervals] == [(2, (8, 70124.0)), (4, (8, 62691.0))]
    assert parsed.skipped == {
        "decode: #token fell with the batch unchanged (the lines are not consecutive in the server's log)": 1
    }
