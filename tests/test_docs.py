"""The extension guide in docs/DESIGN.md names real files and tests: a renamed guard test fails here
instead of leaving the guide pointing at nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = (ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8")


def test_every_test_the_design_names_exists():
    named = set(re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", DESIGN))
    assert len(named) >= 8, named
    missing = [
        f"{path}::{fn}"
        for path, fn in sorted(named)
        if not re.search(rf"^def {fn}\(", (ROOT / path).read_text(encoding="utf-8"), flags=re.M)
    ]
    assert not missing, missing


def test_every_file_the_design_names_exists():
    named = set(re.findall(r"`((?:tests|docs)/[\w./-]+\.(?:py|md))`", DESIGN))
    named |= {
        f"hicache_sim/{p}"
        for p in re.findall(
            r"`((?:core|sim|workloads|hardware|scenario|cli|output|traffic|sglang|calibration|replay)/[\w/]+\.py)`",
            DESIGN,
        )
    }
    assert len(named) >= 10, named
    assert not [p for p in sorted(named) if not (ROOT / p).is_file()]
