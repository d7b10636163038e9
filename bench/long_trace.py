"""A long trace from the Mooncake conversation trace: copy k of its 12,031 requests has hash ids moved
past every earlier copy's (no prefix shared across copies), ids suffixed ``~k`` and arrival times
shifted by k trace spans, so a million requests keep the trace's rate, sizes and reuse pattern.

``LongTrace`` is a lazy sequence: request i is built when asked for, from the parsed trace, so the
whole trace is never held (its page keys alone would take ~7 GB at a million requests). ``write_jsonl``
writes the same requests in Mooncake's format for other tools.

Command:  python bench/long_trace.py --requests 1000000 --out /tmp/long_trace.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from hicache_sim.scenario import load_scenario, resolve
from hicache_sim.workloads import Request
from hicache_sim.workloads.build import build_workload
from hicache_sim.workloads.synthetic import Workload
from hicache_sim.workloads.traces import vendored_trace

SCENARIO = "builtin:mooncake_conversation"


class LongTrace(Sequence[Request]):
    """``n`` requests: the base requests repeated, copy k remapped by ``k * key_span`` and ``k * span``."""

    def __init__(self, base: list[Request], n: int, key_span: int, time_span: float) -> None:
        self.base = base
        self.n = n
        self.key_span = key_span
        self.time_span = time_span

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Request:  # type: ignore[override]
        if not 0 <= i < self.n:
            raise IndexError(i)
        k, j = divmod(i, len(self.base))
        r = self.base[j]
        if k == 0:
            return r
        off = k * self.key_span
        return dataclasses.replace(
            r,
            rid=f"{r.rid}~{k}",
            arrival_s=r.arrival_s + k * self.time_span,
            page_keys=tuple(x + off for x in r.page_keys),
            finish_keys=tuple(x + off for x in r.finish_keys),
        )

    def __iter__(self) -> Iterator[Request]:
        return (self[i] for i in range(self.n))


def long_workload(n: int, overrides: list[str] | None = None) -> tuple:
    """(resolved scenario, workload of ``n`` requests) for the conversation scenario with ``overrides``."""
    sc = load_scenario(SCENARIO, overrides or [])
    r = resolve(sc)
    wl = build_workload(sc, r.cache.page_size)
    base = wl.requests
    keys = [x for q in base for x in (*q.page_keys, *q.finish_keys)]
    key_span = max(keys) + 1
    time_span = max(q.arrival_s for q in base) + 1.0
    return r, dataclasses.replace(wl, requests=LongTrace(base, n, key_span, time_span))


def write_jsonl(path: Path, n: int) -> None:
    """The ``n``-request trace in Mooncake's JSONL (timestamps in ms, hash ids per 512-token block)."""
    rows = [json.loads(line) for line in vendored_trace("mooncake/conversation_trace.jsonl").read_text().splitlines()]
    id_span = max(h for x in rows for h in x["hash_ids"]) + 1
    t_span = max(x["timestamp"] for x in rows) + 1000
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            k, j = divmod(i, len(rows))
            x = rows[j]
            out = {**x, "timestamp": x["timestamp"] + k * t_span, "hash_ids": [h + k * id_span for h in x["hash_ids"]]}
            f.write(json.dumps(out) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    write_jsonl(args.out, args.requests)
    print(f"wrote {args.requests:,} requests to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["LongTrace", "Workload", "long_workload", "write_jsonl"]
