"""Every GPU and host-link preset has its row in docs/reference/hardware-and-models.md with the same
figures (issue 30 item 3: a guard per preset family, a figure and its source line). A preset added
without a documented source, or a figure changed in one place only, fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hicache_sim.hardware.presets import GPUS, IO_BACKENDS, LINKS

DOC = Path(__file__).resolve().parent.parent / "docs" / "reference" / "hardware-and-models.md"


def _table(header: str) -> dict[tuple[str, ...], list[str]]:
    """The rows of the Markdown table whose header line starts with ``header``, keyed by their first
    cells (one for GPUs, two for links), each row's cells stripped."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(header))
    rows: dict[tuple[str, ...], list[str]] = {}
    for ln in lines[start + 2 :]:
        if not ln.startswith("|"):
            break
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        rows[(cells[0],)] = cells
        rows[(cells[0], cells[1])] = cells
    return rows


def _num(text: str) -> float | None:
    """The first number of a cell (thousands commas dropped); None for '-'."""
    m = re.search(r"-?\d[\d,]*(?:\.\d+)?", text)
    return None if m is None or text.strip() == "-" else float(m.group(0).replace(",", ""))


@pytest.mark.parametrize("name", GPUS.names())
def test_every_gpu_preset_has_its_documented_row(name):
    rows = _table("| preset | bf16 / fp8 TFLOP/s |")
    assert (name,) in rows, f"{name}: no row in {DOC.name}'s GPU table"
    cells = rows[(name,)]
    g = GPUS.get(name)
    bf16, fp8 = (part.strip() for part in cells[1].split("/"))
    assert _num(bf16) == pytest.approx(g.bf16_tflops)
    assert (None if fp8 == "-" else _num(fp8)) == (None if g.fp8_tflops is None else pytest.approx(g.fp8_tflops))
    assert _num(cells[2]) == pytest.approx(g.hbm_gbps)
    assert _num(cells[3]) == g.memory_mib
    assert cells[4] == g.pcie
    assert len(cells[5]) > 20, f"{name}: the sources cell says nothing"


@pytest.mark.parametrize("name", LINKS.names())
@pytest.mark.parametrize("backend", IO_BACKENDS)
def test_every_link_preset_has_its_documented_peaks(name, backend):
    rows = _table("| link | backend | H2D / D2H peak GB/s |")
    assert (name, backend) in rows, f"{name} {backend}: no row in {DOC.name}'s link table"
    cells = rows[(name, backend)]
    curve = LINKS.get(name).curve(backend)
    h2d, d2h = (_num(p) for p in cells[2].split("/"))
    assert (h2d, d2h) == (pytest.approx(curve.h2d_gbps), pytest.approx(curve.d2h_gbps))
    assert len(cells[-1]) > 5, f"{name} {backend}: the sources cell says nothing"
