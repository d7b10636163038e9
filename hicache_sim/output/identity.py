"""What a result was computed from, as a digest: the fully resolved scenario, the files it reads
(traces, calibration) by content, and the code that computed it.

Sweeps resume by these digests: a finished point is reused only when all three are the same, so a
changed base scenario, ``--set``, trace file or hicache-sim version never returns stale numbers.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from .. import __version__

PACKAGE_DIR = Path(__file__).resolve().parent.parent

# Scenario keys that name an input file, wherever they sit in the scenario.
FILE_KEYS = ("path", "lengths_from", "calibration")
# Keys naming a checkpoint's config.json (the target's, the speculative draft's): read through config_path.
CONFIG_KEYS = ("model.config", "model.speculative.config")
# Scenario keys that change nothing computed (text for people, and the grid itself).
NOT_COMPUTED = ("description", "sweep")


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Digest of the package's own sources and shipped calibration files (not traces: those are hashed
    as inputs when a scenario reads them). A development checkout changes it with every edit."""
    h = hashlib.sha256(__version__.encode())
    files = sorted(PACKAGE_DIR.rglob("*.py")) + sorted((PACKAGE_DIR / "data" / "calibration").glob("*.yaml"))
    for f in files:
        h.update(str(f.relative_to(PACKAGE_DIR)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


@lru_cache(maxsize=64)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def file_digest(path: Path) -> str:
    """Content digest of an input file (cached per size and mtime within a process)."""
    st = path.stat()
    return _file_digest(str(path.resolve()), st.st_size, st.st_mtime_ns)


def computed_part(dump: dict) -> dict:
    """The scenario dump without the keys that change nothing computed."""
    return {k: v for k, v in dump.items() if k not in NOT_COMPUTED}


def input_files(dump: dict, base_dir: str | Path | None) -> dict[str, str]:
    """Every input file the scenario names (dotted key -> content digest; 'missing' if absent)."""
    from ..hardware.hfconfig import config_path
    from ..scenario import resolve_builtin
    from ..workloads.build import trace_path

    found: dict[str, str] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                key = f"{prefix}{k}"
                if key in CONFIG_KEYS and isinstance(v, str):  # a checkpoint's config.json
                    p = Path(config_path(v))
                    p = p / "config.json" if p.is_dir() else p
                    found[key] = file_digest(p) if p.is_file() else "missing"
                elif k in FILE_KEYS and isinstance(v, str):
                    p = resolve_builtin(v, "calibration") if k == "calibration" else trace_path(v, base_dir)
                    found[key] = file_digest(p) if p.is_file() else "missing"
                else:
                    walk(v, f"{key}.")

    walk(dump, "")
    return found


def digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def point_identity(dump: dict, base_dir: str | Path | None) -> dict:
    """The identity of one computation: scenario, input files, code."""
    return {
        "scenario": digest(computed_part(dump)),
        "inputs": input_files(computed_part(dump), base_dir),
        "code": code_fingerprint(),
        "hicache_sim": __version__,
    }


def differing_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two nested mappings (for a one-line explanation)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b), key=str):
            out += differing_keys(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [prefix.rstrip(".")]
