"""Speculative decoding's time (``model.speculative.accept_len``; ``sim/compute.py`` ``spec_round_time``):
a round is ``num_steps - 1`` draft forwards, the target's verify over ``batch x num_draft_tokens`` rows and
the draft's extend over the same rows (SGLang 0.5.23 ``speculative/eagle_worker_v2.py``), charged per
simulated decode step as round / accept_len. The flags are read and written back, SGLang's auto-choice
fills them, a server log's ``accept len`` intervals are timed with it, and without accept_len nothing
changes (docs/reference/sglang-speculative.md, "Time")."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from conftest import assert_user_error, invoke

import hicache_sim
from hicache_sim.calibration.logfit import fit_log, model_with
from hicache_sim.calibration.serverlog import parse_server_log
from hicache_sim.core import ConfigError
from hicache_sim.hardware.speculative import RoundSteps, round_steps
from hicache_sim.scenario import build_scenario, resolve
from hicache_sim.sglang import from_command, to_command
from hicache_sim.sglang.flags import parse_command
from hicache_sim.sim.compute import ComputeModel, ComputeParams
from hicache_sim.simconfig import SpecRound

DSV3 = "python -m sglang.launch_server --model-path /nfs/DeepSeek-V3 --tp-size 8"
STEP_FLAGS = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")


def _dsv3(accept_len: float | None = None, mode: str = "instant", **spec) -> dict:
    spec = {"algorithm": "nextn", **spec}
    if accept_len is not None:
        spec["accept_len"] = accept_len
    return {
        "name": "spec",
        "mode": mode,
        "model": {"preset": "deepseek-v3", "speculative": spec},
        "hardware": {"tp": 8, "gpu": "h200"},
        "workload": {"kind": "trace", "trace": {"path": "builtin:mooncake/conversation_trace.jsonl", "limit": 20}},
    }


def _model(data: dict) -> ComputeModel:
    return ComputeModel.from_resolved(resolve(build_scenario(data, "spec")))


# ------------------------------------------------------------------------------------------ the round


def _small_round(draft: tuple[tuple[str, float], ...], fixed: float) -> ComputeParams:
    """A dense 2-layer target (1 B active parameters, 2 GB of weights, 100 KB of KV a token) on a 1 PFLOP/s,
    1 TB/s GPU at half efficiency, with a round of 3 steps, top-k 1, 4 draft tokens, accept len 2 and
    ``fixed`` seconds per layer of a CUDA-graph forward."""
    return ComputeParams(
        peak_flops=1e15,
        linear_mfu=0.5,
        attention_mfu=0.5,
        hbm_Bps=1e12,
        hbm_efficiency=0.5,
        step_overhead_s=100e-6,
        num_layers=2,
        active_params=1e9,
        weight_bytes=2e9,
        attn_width=1024,
        kv_bytes_per_token=1e5,
        decode_s_per_layer=fixed,
        spec=SpecRound(num_steps=3, topk=1, num_draft_tokens=4, accept_len=2.0, draft=draft),
    )


def test_round_time_from_the_compute_terms_by_hand():
    """A dense 2-layer target and a 1-layer draft at tp 1, 2 requests holding 1000 KV tokens, top-k 1, 3
    steps, 4 draft tokens, accept len 2. Every forward here is memory-bound (its GEMMs and attention are
    far below its bytes), so each is (weights + KV tokens read x bytes per token) / (HBM x efficiency)
    plus the per-layer fixed cost of a CUDA-graph forward."""
    hbm = 1e12 * 0.5
    fixed = 10e-6  # per layer
    draft = (
        ("active_params", 1e8),
        ("kv_bytes_per_token", 5e4),
        ("num_layers", 1),
        ("unsplit_bytes_per_token", 0.0),
        ("weight_bytes", 2e8),
    )
    p = _small_round(draft, fixed)
    b, kv, n = 2, 1000, 4
    rows = b * n  # 8 verify rows
    pairs = n * kv + b * n * (n + 1) / 2  # 4020: every draft row attends its request's KV and the tree before it
    # verify: the target over 8 rows, reading its 2 GB of weights and 1008 KV tokens of 100 kB
    verify_compute = 2 * rows * 1e9 / 5e14 + 4 * 2 * 1024 * pairs / 5e14
    verify = max((2e9 + (kv + rows) * 1e5) / hbm, verify_compute) + 2 * fixed
    assert verify == pytest.approx(4.2016e-3 + 20e-6)
    # two draft forwards (3 steps: the first token came from the last draft extend) over 2 x 1 rows
    step = max((2e8 + kv * 5e4) / hbm, 2 * b * 1e8 / 5e14 + 4 * 1024 * kv / 5e14) + fixed
    assert step == pytest.approx(5.0e-4 + 10e-6)
    # the draft's extend over the 8 verified rows
    extend = max((2e8 + (kv + rows) * 5e4) / hbm, 2 * rows * 1e8 / 5e14 + 4 * 1024 * pairs / 5e14) + fixed
    assert extend == pytest.approx(5.008e-4 + 10e-6)
    m = ComputeModel(p)
    assert m.spec_round_time(b, kv) == pytest.approx(verify + 2 * step + extend, rel=1e-12)
    # each simulated step (one token per request) is the round and its scheduler overhead over accept len
    assert m.decode_step_s(b, kv) == pytest.approx((100e-6 + verify + 2 * step + extend) / 2.0, rel=1e-12)
    assert m.step_overhead_s == pytest.approx(50e-6)


def test_nextn_deepseek_v3_costs_more_per_token_at_accept_len_1_and_less_at_3():
    """The verify forward over 4 rows per request, two draft forwards and the draft extend cost more
    than one plain decode step, so a round that gives one token a request is slower per token; one that
    gives three is faster."""
    plain = _model(_dsv3())
    one, three = _model(_dsv3(1.0)), _model(_dsv3(3.0))
    assert plain.params.spec is None
    for b in (1, 8, 32):
        kv = b * 4000
        base = plain.decode_step_s(b, kv)
        assert one.decode_step_s(b, kv) > 1.1 * base, b
        assert three.decode_step_s(b, kv) < base, b
        # the same round, over accept len
        assert one.decode_step_s(b, kv) == pytest.approx(3.0 * three.decode_step_s(b, kv))


def test_nextn_draft_is_one_moe_layer_of_the_target():
    """The draft's roofline: DeepSeek-V3's one MTP layer (its parameters per rank, its routed experts as
    one of the target's 61 layers' share, its KV one target layer's), the rest the target's."""
    r = resolve(build_scenario(_dsv3(2.0), "spec"))
    m = ComputeModel.from_resolved(r)
    assert m.params.spec is not None
    d = dict(m.params.spec.draft)
    t = m.params
    assert d["num_layers"] == 1
    assert d["weight_bytes"] == pytest.approx(r.draft.weight_bytes)
    assert d["routed_params"] == pytest.approx(t.routed_params / 61)
    assert d["kv_bytes_per_token"] == r.draft.device_bpt == 1152
    routed = t.routed_params / 61
    assert d["active_params"] == pytest.approx(r.draft.params - routed + routed * 8 / 256)


def test_tpot_of_a_timed_run_falls_with_accept_len():
    def tpot(accept_len):
        q = hicache_sim.run(_dsv3(accept_len, mode="timed")).requests
        many = q.output_tokens > 1
        return float(((q.e2e_s - q.ttft_s)[many] / (q.output_tokens[many] - 1)).mean())

    got = [tpot(a) for a in (1.0, 2.0, 3.0, 4.0)]
    assert got == sorted(got, reverse=True) and len(set(got)) == 4
    assert tpot(1.0) > tpot(None) > tpot(3.0)


# ------------------------------------------------------------------------------------------ attention DP


def _dsv3_dp(accept_len: float | None, attn_dp: int = 8, mode: str = "instant") -> dict:
    data = _dsv3(accept_len, mode=mode)
    data["hardware"] = {"tp": 8, "attn_dp": attn_dp, "gpu": "h200"}
    return data


def test_nextn_deepseek_v3_attn_dp_8_lockstep_round():
    """The standard DeepSeek shape (tp 8, attn_dp 8, NEXTN): a lockstep decode step of 8 groups is one
    round for every group, so it costs more per token than a plain lockstep step at accept len 1 and
    less at 3."""
    plain, one, three = _model(_dsv3_dp(None)), _model(_dsv3_dp(1.0)), _model(_dsv3_dp(3.0))
    for b in (1, 8, 32):
        kv = b * 4000

        def step(m: ComputeModel, b: int = b, kv: int = kv) -> float:
            return m.step_overhead_s + m.lockstep_time([m.group_decode(b, kv)] * 8, 1)

        base = step(plain)
        assert step(one) > 1.1 * base, b
        assert step(three) < base, b
        assert step(one) == pytest.approx(3.0 * step(three))


def test_verify_mlp_rows_are_every_groups_batch_times_draft_tokens():
    """Two groups of 3 requests, 4 draft tokens, top-k 1, 3 steps, a 1-layer draft: the target's verify
    gathers 2 x 3 x 4 = 24 rows for its MLP, each draft forward 2 x 3 x 1 = 6, the draft's extend 24.
    One group at attn_tp 1 is the round of a single engine."""
    draft = (("num_layers", 1), ("weight_bytes", 2e8), ("active_params", 1e8), ("kv_bytes_per_token", 5e4))
    p = _small_round(draft, 10e-6)
    m = ComputeModel(p)
    assert m._draft is not None
    seen: dict[str, list[float]] = {"target": [], "draft": []}
    for name, model in (("target", m), ("draft", m._draft)):
        inner = model.linear_time

        def spy(rows: float, inner=inner, name=name) -> float:
            seen[name].append(rows)
            return inner(rows)

        model.linear_time = spy  # type: ignore[method-assign]
    work = m.group_decode(3, 3000)
    t = m.lockstep_time([work, work], 1)
    assert seen == {"target": [24], "draft": [6, 24]}  # the draft step forward costed once, charged twice
    assert t > 0
    assert m.lockstep_time([work], 1) == pytest.approx(m.spec_round_time(3, 3000) / 2.0, rel=1e-12)


def test_tpot_of_a_timed_attn_dp_run_falls_with_accept_len():
    """Short prompts, long outputs, 8 requests at once over 2 groups: the decode steps set the TPOT."""

    def tpot(accept_len):
        data = _dsv3_dp(accept_len, attn_dp=2, mode="timed")
        bench = {"random_input_len": 256, "random_output_len": 128, "num_prompts": 16, "max_concurrency": 8}
        data["workload"] = {"kind": "bench_serving", "bench_serving": bench}
        q = hicache_sim.run(data).requests
        many = q.output_tokens > 1
        return float(((q.e2e_s - q.ttft_s)[many] / (q.output_tokens[many] - 1)).mean())

    got = [tpot(a) for a in (1.0, 2.0, 3.0)]
    assert got == sorted(got, reverse=True) and len(set(got)) == 3
    assert tpot(1.0) > tpot(None) > tpot(3.0)


# ------------------------------------------------------------------------------------------ the flags


def test_sglang_auto_choice_and_topk_1_rule():
    """speculative_hook.py: (3, 1, 4) for DeepSeek-V3 and most models, (5, 4, 8) for Llama; STANDALONE
    (3, 1, 4); NGRAM top-k 10 (its BFS breadth), 12 draft tokens, 12 // 10 steps; at top-k 1 the draft
    tokens become steps + 1."""
    assert round_steps("nextn", "DeepseekV3ForCausalLM", None, None, None) == RoundSteps(3, 1, 4)
    assert round_steps("eagle3", "LlamaForCausalLM", None, None, None) == RoundSteps(5, 4, 8)
    assert round_steps("standalone", "LlamaForCausalLM", None, None, None) == RoundSteps(3, 1, 4)
    assert round_steps("ngram", "LlamaForCausalLM", None, None, None) == RoundSteps(1, 10, 12)
    assert round_steps("eagle", "DeepseekV3ForCausalLM", 5, 1, 3) == RoundSteps(5, 1, 6)
    assert round_steps("eagle", "DeepseekV3ForCausalLM", 5, 1, None) == RoundSteps(5, 1, 6)
    for given in ((5, None, None), (None, 1, 4), (5, 4, None)):
        with pytest.raises(ConfigError, match="together"):
            round_steps("eagle", "DeepseekV3ForCausalLM", *given)


def test_from_sglang_reads_and_writes_the_round_flags():
    line = DSV3 + " --speculative-algorithm EAGLE --speculative-num-steps 2 --speculative-eagle-topk 4 "
    line += "--speculative-num-draft-tokens 6"
    conv = from_command(line)
    spec = conv.scenario.model.speculative
    assert (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens) == (2, 4, 6)
    assert not any(f in " ".join(conv.unmodelled) for f in STEP_FLAGS)
    tokens, _ = to_command(conv.scenario)
    args = parse_command(tokens).args
    assert [args.get(f) for f in STEP_FLAGS] == ["2", "4", "6"]
    plain = from_command(DSV3 + " --speculative-num-steps 2")
    assert plain.scenario.model.speculative is None
    assert any("--speculative-num-steps: no effect without" in n for n in plain.notes)


def test_bad_input_is_one_line(tmp_path):
    scenario = tmp_path / "bad.yaml"
    for spec, fragments in (
        ({"accept_len": 0.5}, ("model.speculative.accept_len", "1")),
        ({"accept_len": 5}, ("model.speculative.accept_len", "exceeds num_draft_tokens 4")),
        ({"eagle_topk": 0, "num_steps": 3, "num_draft_tokens": 4}, ("model.speculative.eagle_topk", "1")),
        ({"num_steps": 3, "accept_len": 2}, ("model.speculative.num_steps", "together")),
    ):
        data = _dsv3(**spec)
        scenario.write_text(yaml.safe_dump(data))
        assert_user_error(invoke("validate", scenario), *fragments)
        out = tmp_path / "out"
        assert_user_error(invoke("run", scenario, "--out", out), *fragments)
        assert not out.exists()
    scenario.write_text(yaml.safe_dump(_dsv3(num_steps=3)))  # without accept_len too: SGLang fails so
    assert_user_error(invoke("validate", scenario), "model.speculative.num_steps", "together")


def test_without_accept_len_the_decode_is_unchanged():
    """No accept_len: the same compute parameters and decode times as before (the round flags alone are
    read but change nothing)."""
    plain = _model(_dsv3())
    flags = _model(_dsv3(num_steps=5, eagle_topk=1, num_draft_tokens=6))
    assert plain.params == flags.params and plain.params.spec is None
    assert plain.decode_step_s(8, 32000) == flags.decode_step_s(8, 32000)


# ------------------------------------------------------------------------------------------ a server log


def _decode_line(b: int, kv: int, tps: float, accept: float) -> str:
    return (
        f"[2026-07-21 15:00:19 TP0] Decode batch, #running-req: {b}, #token: {kv}, token usage: 0.64, "
        f"accept len: {accept:.2f}, accept rate: 0.54, cuda graph: True, gen throughput (token/s): {tps:.2f}, "
        "#queue-req: 0"
    )


def test_a_speculative_log_is_timed_with_its_accept_len(tmp_path):
    """Decode lines that print ``accept len`` are intervals now: each is a round over its accept len, and
    the fit recovers the HBM efficiency from them (the simulator's own round times)."""
    r = resolve(build_scenario(_dsv3(2.0), "spec"))
    true = ComputeModel(dataclasses.replace(r.sim_config().compute, hbm_efficiency=0.55))
    lines = []
    for b, kv, accept in ((1, 3000, 2.5), (8, 40_000, 2.9), (32, 150_000, 3.1), (16, 90_000, 2.2)):
        lines.append(_decode_line(b, kv, 99.0, accept))
        k = kv
        for _ in range(3):
            nxt = k + 40 * b
            step = true.spec_step_s(b, round((k + nxt) / 2), accept)
            lines.append(_decode_line(b, nxt, b / step, accept))
            k = nxt
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_server_log(log)
    assert len(parsed.intervals) == 12 and not any("speculative" in k for k in parsed.skipped)
    assert parsed.accept_len == pytest.approx((2.5 + 2.9) / 2)
    fit = fit_log(r, parsed.intervals, holdout=0.0)
    assert fit.knobs["hbm_efficiency"] == pytest.approx(0.55, rel=0.02)
    assert model_with(r.sim_config().compute, fit.knobs).params.hbm_efficiency == fit.knobs["hbm_efficiency"]
    # the CLI: a scenario without accept_len is timed with the log's median, and is told the value to set
    sc = tmp_path / "sc.yaml"
    sc.write_text(yaml.safe_dump(_dsv3()))
    result = invoke("calibrate", log, "--scenario", sc, "--out", tmp_path / "cal.yaml")
    assert result.exit_code == 0, result.output
    assert "set model.speculative.accept_len: 2.7" in result.output
    # a scenario without speculative decoding cannot time them
    plain = _dsv3()
    del plain["model"]["speculative"]
    sc.write_text(yaml.safe_dump(plain))
    result = invoke("calibrate", log, "--scenario", sc, "--out", tmp_path / "cal2.yaml")
    assert_user_error(result, "accept len", "no model.speculative")


def test_a_round_s_forward_shapes_by_hand():
    """3 requests holding 1000 KV tokens in all, 4 draft tokens, top-k 1: the verify (and the draft's
    extend) has 12 rows, each request's 4 rows attending its KV (4 x 1000 pairs) and the tree before them
    (3 x 4 x 5 / 2 = 30), reading the KV and the 12 new rows; a draft step has 3 rows attending the KV.
    The memory-bound cases above cannot see the pairs: this holds them."""
    m = ComputeModel(_small_round((("num_layers", 1),), 10e-6))
    verify, step = m._round_shapes(3, 1000.0)
    assert verify == (12, 4 * 1000 + 30, 1000 + 12)
    assert step == (3, 1000.0, 1000.0)
