"""What the server saw beside what the simulator did. A trace converted from a request log that carries
each request's ``cached_tokens`` (``trace convert``: SGLang's ``meta_info.cached_tokens``, its device,
host and storage prefix hits together; OpenAI's ``usage.prompt_tokens_details.cached_tokens``) gives a
run of it the observed hit rate beside the simulated one, over the same window as ``hit_rate``
(finished requests after the warm-up share): summary.json ``observed``, requests.parquet
``observed_cached_tokens``, one terminal line. A user sees at once whether the simulated cache behaves
like theirs.

A trace has the column when its first line has the key (``trace convert`` writes it on every line,
``null`` where one request's is unknown): any other trace costs one line read. Requests of a Mooncake
trace are named ``r<line>`` by its loader, which is how a row finds its line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

import numpy as np

from .columns import Columns


class RunRows(Protocol):
    """What :func:`attach_observed` reads and extends of a run (``runner.RunOutput`` has both): this floor
    never imports the runner above it."""

    summary: dict
    request_columns: Columns


KEY = b'"cached_tokens"'
COLUMN = "observed_cached_tokens"
SCOPE = (
    "window: finished requests whose trace line has cached_tokens (what the server reported it found "
    "cached); simulated = device + host + storage hit tokens of the same requests"
)


def observed_cached(path: Path, rids: set[str]) -> dict[str, int] | None:
    """``{rid: cached tokens}`` for the requests ``rids`` whose line of the trace at ``path`` has a
    number there; None when the trace has no ``cached_tokens`` column (its first line lacks the key).
    The loader has checked every line a run reads (0 <= cached_tokens <= input_length)."""
    out: dict[str, int] = {}
    with path.open("rb") as f:
        first = True
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            if first and KEY not in raw:
                return None
            first = False
            rid = f"r{lineno}"
            if rid in rids and KEY in raw:
                v = json.loads(raw).get("cached_tokens")
                if v is not None:
                    out[rid] = v
    return None if first else out


def observed_block(requests: Columns, first_request: int, cached: dict[str, int]) -> dict | None:
    """summary.json's ``observed``: observed and simulated hit rates over the window's finished requests
    that have an observation, and how the two compare request by request (None: no such request)."""
    rows = requests.take(slice(first_request, None))
    rids = rows["rid"].tolist()
    keep = np.array(
        [rid in cached and status == "finished" for rid, status in zip(rids, rows["status"].tolist(), strict=True)],
        dtype=bool,
    )
    if not keep.any():
        return None
    rows = rows.take(keep)
    prompt = rows["prompt_tokens"].astype(float)
    obs = np.array([cached[rid] for rid in rows["rid"].tolist()], dtype=float)
    sim = sum(rows[f"{tier}_hit_tokens"].astype(float) for tier in ("device", "host", "storage"))
    total = float(prompt.sum())
    diff = (sim - obs) / prompt
    abs_diff = np.abs(diff)
    return {
        "requests": len(rows),
        "prompt_tokens": int(total),
        "hit_rate_observed": float(obs.sum()) / total,
        "hit_rate_simulated": float(sim.sum()) / total,
        "difference": float(sim.sum() - obs.sum()) / total,
        "per_request": {
            "equal": int((sim == obs).sum()),
            "simulated_higher": int((sim > obs).sum()),
            "simulated_lower": int((sim < obs).sum()),
            "abs_difference": {
                "p50": float(np.percentile(abs_diff, 50)),
                "p90": float(np.percentile(abs_diff, 90)),
                "max": float(abs_diff.max()),
            },
        },
    }


def observed_line(block: dict) -> str:
    """The terminal line: the two hit rates, then how the requests compare."""
    per = block["per_request"]
    return (
        f"observed hit rate {block['hit_rate_observed']:.4f} (the server's cached_tokens) vs simulated "
        f"{block['hit_rate_simulated']:.4f} over {block['requests']} requests; per request "
        f"{per['equal']} equal, {per['simulated_higher']} higher and {per['simulated_lower']} lower in the "
        f"simulation, |difference| p90 {per['abs_difference']['p90']:.3f}"
    )


def attach_observed(out: RunRows, trace: Path) -> None:
    """Add the ``observed`` block to ``out``'s summary (before ``scopes``) and the per-request column to
    its rows, when the trace carries ``cached_tokens``; otherwise leave ``out`` as it is."""
    cols = out.request_columns
    cached = observed_cached(trace, set(cols["rid"].tolist()))
    if not cached:
        return
    block = observed_block(cols, out.summary["window"]["first_request"], cached)
    if block is None:
        return
    scopes = out.summary.pop("scopes")
    out.summary["observed"] = block
    out.summary["scopes"] = {**scopes, "observed": SCOPE}
    values = [float(cached[rid]) if rid in cached else float("nan") for rid in cols["rid"].tolist()]
    if not any(v != v for v in values):  # all known: integers, as the trace holds them
        values = [int(v) for v in values]
    data = {name: cols[name] for name in cols.names}
    out.request_columns = Columns({**data, COLUMN: np.asarray(values)})
