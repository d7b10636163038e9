"""The L3 verdict's part (b) as advise runs it: two timed runs of the recommendation, with and without
its store, in parallel, kept beside the advice by identity. It runs simulations, so it sits with the
orchestrators above ``output/`` (whose ``l3.py`` computes the verdict from the runs' rows)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .core.policies import HOST_MEMORY_MODES
from .output.columns import Columns
from .output.identity import point_identity
from .output.l3 import load_vs_recompute, verdict_line, with_without
from .output.summary import TIERS
from .output.write import write_text_atomic
from .runner import simulate
from .scenario import build_scenario, resolve, scenario_dump

#: The columns of a run's requests part (b) reads (a compact copy crosses the process boundary).
PAIR_COLUMNS = ("arrival_s", "ttft_s", "status", "prompt_tokens", *(f"{t}_hit_tokens" for t in TIERS), "round")
#: The run without the store turns it off; a host that stages for storage cannot run without one, so that
#: run keeps the same host memory as a cache.
WITHOUT_STORE = ['cache.storage_backend="none"']
AS_CACHE = ['cache.host_memory_mode="cache"']


def timed_rows(base: dict, source: str, set_args: list[str], base_dir: str | None) -> tuple[dict, dict[str, list]]:
    """One timed run (in a worker process): its summary and the request columns part (b) reads."""
    out = simulate(build_scenario({**base, "mode": "timed"}, source, set_args), base_dir=base_dir)
    cols = out.request_columns
    return out.summary, {c: cols[c].tolist() for c in PAIR_COLUMNS if c in cols}


def store_pair(
    base: dict, source: str, set_args: list[str], *, base_dir: str | None, folder: Path, workers: int
) -> dict[str, Any]:
    """The whole verdict for the scenario ``base`` with ``set_args`` (its store as given): timed runs with
    and without the store (in parallel when ``workers`` > 1), part (a) from the run with it. Kept in
    ``folder/l3.json`` with both runs' identities: a rerun with the same scenario, inputs and code reuses it."""
    timed = {**base, "mode": "timed"}
    sc = build_scenario(timed, source, set_args)
    mode = HOST_MEMORY_MODES.get(sc.cache.host_memory_mode)
    without_args = [*set_args, *WITHOUT_STORE, *(AS_CACHE if mode.stages else [])]
    runs = {"with_store": set_args, "without_store": without_args}
    scenarios = {"with_store": sc, "without_store": build_scenario(timed, source, without_args)}
    identity = {k: point_identity(scenario_dump(s), base_dir) for k, s in scenarios.items()}
    kept = folder / "l3.json"
    try:
        old = json.loads(kept.read_text(encoding="utf-8"))
        if old.get("identity") == identity:
            return old["l3"]
    except (OSError, ValueError, AttributeError):
        pass
    if workers > 1:
        from .workers import worker_pool

        with worker_pool(2) as ex:  # Ctrl-C reaches only this process, which stops both runs
            futs = {k: ex.submit(timed_rows, base, source, args, base_dir) for k, args in runs.items()}
            done = {k: f.result() for k, f in futs.items()}
    else:
        done = {k: timed_rows(base, source, args, base_dir) for k, args in runs.items()}
    (s_with, c_with), (s_without, c_without) = done["with_store"], done["without_store"]
    rows_with, rows_without = Columns(c_with), Columns(c_without)
    measured = rows_with.take(slice(s_with["window"]["first_request"], None))
    a = load_vs_recompute(resolve(sc), measured)
    b = with_without(s_with, s_without, rows_with, rows_without)
    result = {
        "load_vs_recompute": a,
        "with_without": b,
        "line": verdict_line(a, b),
        "runs": {k: list(v) for k, v in runs.items()},
    }
    if mode.stages:
        result["note"] = f"{mode.name} needs a store: the run without it uses the same host memory as a cache"
    write_text_atomic(kept, json.dumps({"identity": identity, "l3": result}, indent=1, sort_keys=True) + "\n")
    return result
