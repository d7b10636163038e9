"""A run's figures are the same bytes in every process (the PNGs in ``results/`` are reproducible by
``cmp``): no time stamp, no software version, nothing that depends on hash order or on what the
process drew before."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import yaml
from test_outputs import TINY

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ("residency.png", "hit_rate.png")


def chunks(png: bytes) -> list[bytes]:
    """The chunk types of a PNG file, in order."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    out, i = [], 8
    while i < len(png):
        n, kind = struct.unpack(">I4s", png[i : i + 8])
        out.append(kind)
        i += 12 + n
    return out


def run_in_a_process(tmp_path: Path, name: str, hash_seed: str) -> Path:
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(TINY), encoding="utf-8")
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
    out = tmp_path / name
    subprocess.run([sys.executable, "-m", "hicache_sim", "run", str(sc), "--out", str(out)], check=True, env=env)
    return out


def test_run_figures_are_the_same_bytes_in_two_processes(tmp_path):
    a = run_in_a_process(tmp_path, "a", "1")
    b = run_in_a_process(tmp_path, "b", "2")
    for name in FIGURES:
        png = (a / name).read_bytes()
        assert png == (b / name).read_bytes(), name
        assert set(chunks(png)) == {b"IHDR", b"pHYs", b"IDAT", b"IEND"}, name  # no tEXt, iTXt or tIME
