"""Public SGLang logs at TP > 1 (issue 29 item 7, validation/tp_logs.py): the device pool they print
against the simulator's. Where a log prints its ``pre`` reading (free memory before the weights), the
simulator given that reading reproduces the printed pool, so SGLang's rule, the weights and the bytes
per token are right and what is left is the memory in use before the weights at TP > 1."""

from __future__ import annotations

import pytest

from validation.tp_logs import CASES, measured_context_mib, row

GIB_MIB = 1024


@pytest.mark.parametrize("case", [c for c in CASES if c.pre_load_avail_gib is not None], ids=lambda c: c.name)
def test_the_rule_reproduces_the_printed_pool_given_the_logs_pre_reading(case):
    r = row(case)
    assert abs(r["error_with_log_pre"]) < 0.002, r


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_default_pool_is_larger_than_printed_at_tp_above_one(case):
    """The default 1 GiB in use before the weights is a TP-1 figure: at TP > 1 the pool comes out larger
    than the log's (the known gap this table records, not a target)."""
    assert row(case)["error"] > 0


def test_the_logs_distributed_init_line_accounts_for_the_extra_memory():
    """sgl-project/sglang#11716 prints both readings: 3.11 GiB in use before the weights, of which "Init
    torch distributed ends. mem usage=2.01 GB" is the parallel groups (NCCL communicators, custom
    all-reduce); the rest, 1.10 GiB, is the CUDA context a TP-1 run also has (the default 1 GiB)."""
    case = next(c for c in CASES if c.name == "sglang_11716_llama70b_tp8_h200")
    distributed = next(float(q.split("mem usage=")[1].split()[0]) for q in case.quotes if "Init torch" in q)
    context = measured_context_mib(case) / GIB_MIB - distributed
    assert context == pytest.approx(1.0, abs=0.15)
