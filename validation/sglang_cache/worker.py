"""One row inside the driver's env: ``python -m validation.sglang_cache.worker ROW_JSON [LIMIT]``.

Prints the row's result as one JSON line (the last line of stdout).
"""

from __future__ import annotations

import json
import sys

from .driver import load_trace, run_row
from .rows import TRACES
from .stubs import STUBBED


def main() -> None:
    """Run the row given on the command line and print its result."""
    row = json.loads(sys.argv[1])
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else None
    trace = load_trace(TRACES[row["trace"]], limit)
    res = run_row(row, trace, progress=True)
    counters = dict(sorted(res.counters.items()))
    out = {
        "id": row["id"],
        "config": {k: v for k, v in row.items() if k != "id"},
        "requests": len(trace),
        "prompt_pages": res.prompt_pages,
        "hit_pages": {"device": res.device_hit, "host": res.host_hit, "storage": res.storage_hit},
        "rates": res.rates(),
        "counters": counters,
        "prefetch_outcomes": {k: int(v) for k, v in res.prefetch_stats.items()},
        "sglang_settings": res.sglang_settings,
        "seconds": round(res.seconds, 1),
        "stubbed": list(STUBBED),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
