"""``--attention-backend``: from-sglang records it as ``hardware.attention_backend`` and says whether its
speed is modelled (only a backend whose prefill kernel has a rule in ``hardware/attention.py``, triton;
the others run at ``hardware.attention_mfu``, which the deployment's own server log fits through
``calibrate``); sglang-args writes it back; the MLA backends that fix the page size still do."""

from __future__ import annotations

import shlex

import pytest

from hicache_sim.scenario import load_scenario, resolve
from hicache_sim.sglang import from_command, to_command
from hicache_sim.sglang.flags import known_flags, parse_command
from hicache_sim.sglang.table import ATTENTION_BACKENDS
from hicache_sim.sim.compute import ComputeModel

LLAMA = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct"


@pytest.mark.parametrize(
    ("backend", "says"),
    [("flashinfer", "its speed not modelled"), ("triton", "its prefill attention timed by its kernel's tiling")],
)
def test_the_backend_is_recorded_noted_and_written_back(backend, says):
    """A backend without a kernel rule is noted as not modelled; triton, which has one, is noted as timed."""
    conv = from_command(f"{LLAMA} --attention-backend {backend}")
    assert conv.data["hardware"]["attention_backend"] == backend
    assert conv.scenario.hardware.attention_backend == backend
    assert "--attention-backend" not in conv.unmodelled  # read, and its note says what is modelled
    (note,) = [n for n in conv.notes if n.startswith(f"--attention-backend {backend}")]
    assert says in note and "hardware.attention_mfu" in note and "calibrate" in note
    tokens, _ = to_command(conv.scenario)
    assert parse_command(tokens).args["--attention-backend"] == backend
    assert to_command(from_command(tokens).scenario)[0] == tokens


def test_no_backend_given_leaves_sglangs_choice():
    conv = from_command(LLAMA)
    assert "attention_backend" not in conv.data["hardware"]
    assert conv.scenario.hardware.attention_backend is None
    assert "--attention-backend" not in to_command(conv.scenario)[0]
    assert not any("attention" in n for n in conv.notes)


def test_per_phase_backends_are_listed_as_not_modelled():
    conv = from_command(f"{LLAMA} --prefill-attention-backend fa3 --decode-attention-backend flashinfer")
    assert conv.unmodelled == ["--prefill-attention-backend", "--decode-attention-backend"]


@pytest.mark.parametrize(
    ("flags", "backend", "page", "says"),
    [
        ("--attention-backend flashmla", "flashmla", 64, "SGLang sets the page size to 64"),
        ("--attention-backend trtllm_mla --page-size 32", "trtllm_mla", 32, None),
        ("--attention-backend tokenspeed_mla", "cutedsl_mla", 64, "deprecated; SGLang runs it as cutedsl_mla"),
        ("--attention-backend compressed", "dsv4", 1, "deprecated; SGLang runs it as dsv4"),
    ],
)
def test_backends_that_fix_the_page_size_and_renamed_ones(flags, backend, page, says):
    conv = from_command(f"{LLAMA} {flags}")
    assert conv.data["hardware"]["attention_backend"] == backend
    assert conv.data["cache"]["page_size"] == page
    if says:
        assert any(says in n for n in conv.notes), conv.notes


def test_a_backend_outside_sglangs_choices_is_refused_as_sglang_refuses_it():
    """A stock SGLang 0.5.23 refuses it at start-up (a plugin could add it: the message says so)."""
    with pytest.raises(ValueError) as err:
        from_command(f"{LLAMA} --attention-backend my_plugin")
    assert str(err.value).startswith("--attention-backend my_plugin: not one of sglang 0.5.23's choices (triton,")
    assert str(err.value).endswith("SGLang refuses it at start-up unless a plugin adds it")


def test_only_a_backend_with_a_kernel_rule_changes_a_step_time():
    """The decision this pins: no per-backend factor; a backend changes prefill only through its kernel's
    rule (hardware/attention.py: triton), and decode not at all."""
    plain = ComputeModel.from_resolved(resolve(load_scenario("builtin:default")))
    for backend, changes in (("fa3", False), ("flashinfer", False), ("triton", True)):
        m = ComputeModel.from_resolved(
            resolve(load_scenario("builtin:default", [f"hardware.attention_backend={backend}"]))
        )
        assert (m.prefill_time([(4096, 8192)]) != plain.prefill_time([(4096, 8192)])) is changes, backend
        assert m.decode_time(64, 64 * 4096) == plain.decode_time(64, 64 * 4096)


def test_a_scenario_backend_is_printed_by_sglang_args():
    sc = load_scenario("builtin:default", ["hardware.attention_backend=fa3"])
    tokens, _ = to_command(sc)
    assert "--attention-backend fa3" in shlex.join(tokens)


def test_the_choices_are_sglangs():
    """Read by hand from sglang 0.5.23's ``ATTENTION_BACKEND_CHOICES``: 25 names, deprecated aliases included."""
    assert len(ATTENTION_BACKENDS) == len(set(ATTENTION_BACKENDS)) == 25
    assert {"triton", "fa3", "fa4", "flashinfer", "flashmla", "trtllm_mla", "aiter", "ascend"} <= set(
        ATTENTION_BACKENDS
    )
    assert "--attention-backend" in known_flags()[0]
