"""Write hicache_sim/data/sglang/architectures-<version>.json: every model architecture (the
``architectures`` entry of a checkpoint's config.json) an SGLang release can load, read from an unpacked
SGLang wheel (``pip download sglang==V --no-deps``, unzip).

SGLang registers a model class per module of ``sglang/srt/models/`` through a module-level
``EntryClass = Cls`` or ``EntryClass = [Cls, ...]``; the class name is the architecture name it
serves. This reads those assignments with ``ast`` (nothing of SGLang is imported). ``model: {config:
...}`` refuses a config.json whose architecture is not in the list: SGLang could not start it.

    python tools/extract_sglang_architectures.py UNPACKED_WHEEL_DIR VERSION
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path


def entry_classes(source: str) -> list[str]:
    """Class names a module's ``EntryClass`` assignment lists (a name, or a list / tuple of names)."""
    names: list[str] = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.Assign):
            continue
        if not any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
            continue
        values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
        names += [v.id for v in values if isinstance(v, ast.Name)]
    return names


def main(root: str, version: str) -> None:
    models = Path(root) / "sglang" / "srt" / "models"
    archs = sorted({name for f in sorted(models.glob("*.py")) for name in entry_classes(f.read_text())})
    out = Path(__file__).resolve().parent.parent / "hicache_sim" / "data" / "sglang" / f"architectures-{version}.json"
    data = {"sglang": version, "source": "sglang/srt/models/*.py EntryClass", "architectures": archs}
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out} ({len(archs)} architectures)")


if __name__ == "__main__":
    main(*sys.argv[1:3])
