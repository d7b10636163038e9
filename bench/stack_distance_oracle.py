"""The peer of ``hicache-sim run`` in bench/bench_cli.py: the exact LRU stack-distance oracle of
tests/lru_oracle.py (the one tests/test_core_oracle.py checks the core against), run as a whole process
on the default scenario's trace. One pass gives the device hit pages of every capacity at once; this
prints the page hit rate at the capacities asked (default: the default scenario's 6,000 device pages).

    python bench/stack_distance_oracle.py                 # capacity 6000
    python bench/stack_distance_oracle.py 1000 6000 20000
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # this checkout's package and the tests' oracle

from lru_oracle import lru_stack_hits  # noqa: E402

from hicache_sim.workloads.traces import load_mooncake, vendored_trace  # noqa: E402

TRACE = "mooncake/conversation_trace.jsonl"  # the default scenario's trace
PAGE_SIZE = 512
DEVICE_PAGES = 6000


def main(argv: list[str]) -> int:
    capacities = [int(a) for a in argv] or [DEVICE_PAGES]
    reqs = load_mooncake(vendored_trace(TRACE), PAGE_SIZE)
    # The default scenario reserves the last token (SGLang's default): match at most input - 1 tokens.
    hits = lru_stack_hits([(r.page_keys, r.match_limit(PAGE_SIZE, True)) for r in reqs], capacities)
    pages = sum(len(r.page_keys) for r in reqs)
    for c in capacities:
        print(f"capacity {c} pages: page hit rate {sum(hits[c]) / pages:.4f} over {len(reqs)} requests")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
