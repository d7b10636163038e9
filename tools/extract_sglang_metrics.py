"""Write hicache_sim/data/sglang/metrics-<version>.json: every Prometheus metric an SGLang release
declares (name and type), read with ``ast`` from the unpacked wheel's metrics modules (nothing of
SGLang is imported). Labels and meanings of the metrics the drift check compares are written by hand
in docs/reference/sglang-metrics.md, from reading the same code.

    python tools/extract_sglang_metrics.py UNPACKED_WHEEL_DIR VERSION

UNPACKED_WHEEL_DIR holds ``sglang/``; every ``*.py`` under ``sglang/srt`` is scanned for calls
``Counter(name="sglang:...")``, ``Gauge(...)``, ``Histogram(...)``, ``Summary(...)``,
``GaugeHistogram(...)`` with a literal ``name``.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

TYPES = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary"}
TYPES["GaugeHistogram"] = "gaugehistogram"


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def metrics_of(root: Path) -> dict[str, dict]:
    """name -> {"type", "file"} of every literal ``sglang:`` metric declared under ``root/sglang/srt``."""
    out: dict[str, dict] = {}
    for path in sorted((root / "sglang" / "srt").rglob("*.py")):
        if "/test" in str(path):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or _callee(node).removeprefix("_Prom") not in TYPES:
                continue
            for k in node.keywords:
                if k.arg == "name" and isinstance(k.value, ast.Constant) and str(k.value.value).startswith("sglang:"):
                    kind = TYPES[_callee(node).removeprefix("_Prom")]
                    out.setdefault(k.value.value, {"type": kind, "file": str(path.relative_to(root))})
    return dict(sorted(out.items()))


def main() -> None:
    root, version = Path(sys.argv[1]), sys.argv[2]
    doc = {"sglang_version": version, "made_by": "tools/extract_sglang_metrics.py", "metrics": metrics_of(root)}
    out = Path(__file__).resolve().parent.parent / "hicache_sim" / "data" / "sglang" / f"metrics-{version}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"{out}: {len(doc['metrics'])} metrics")


if __name__ == "__main__":
    main()
