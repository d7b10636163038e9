"""from-sglang writes the write policy SGLang runs, not the one typed: buffer_only mode resolves
write_back to write_through (SGLang 0.5.23's validate_hicache_host_memory_mode) with a warning, and
keeps a policy it does run (issue 30 item 1: the rewrite had no test)."""

from __future__ import annotations

import pytest
import yaml
from conftest import invoke

LAUNCH = [
    "python", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct",
    "--enable-hierarchical-cache", "--hicache-storage-backend", "file",
]  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "typed", "runs", "warned"),
    [
        ("buffer_only", "write_back", "write_through", True),
        ("buffer_only", "write_through", "write_through", False),
        ("cache", "write_back", "write_back", False),
    ],
)
def test_from_sglang_writes_the_policy_sglang_runs(tmp_path, mode, typed, runs, warned):
    out = tmp_path / "s.yaml"
    r = invoke(
        "from-sglang", "--out", out, "--", *LAUNCH,
        "--hicache-host-memory-mode", mode, "--hicache-write-policy", typed,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    cache = yaml.safe_load(out.read_text())["cache"]
    assert (cache["host_memory_mode"], cache["write_policy"]) == (mode, runs)
    assert ("SGLang runs write_through in buffer_only mode" in r.output) is warned
