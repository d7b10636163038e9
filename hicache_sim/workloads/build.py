"""Turn a scenario's ``workload`` section into a Workload."""

from __future__ import annotations

from pathlib import Path

from . import synthetic
from .errors import WorkloadError
from .records import Request
from .synthetic import Workload, stream_keys
from .traces import load_azure, load_bailian, load_mooncake

TRACES_DIR = Path(__file__).resolve().parent.parent / "data" / "traces"


def trace_path(path: str, base_dir: str | Path | None = None) -> Path:
    """``builtin:NAME`` -> a trace shipped with the package; relative paths resolve against
    ``base_dir`` (the scenario file's folder) when the file is not found from the working directory."""
    if path.startswith("builtin:"):
        return TRACES_DIR / path[len("builtin:") :]
    p = Path(path)
    if not p.is_absolute() and not p.exists() and base_dir is not None:
        alt = Path(base_dir) / p
        if alt.exists():
            return alt
    return p


def build_workload(scenario, page_size: int, base_dir: str | Path | None = None) -> Workload:
    """The scenario's requests (and their chaining, for closed-loop kinds)."""
    w = scenario.workload
    seed = scenario.seed
    partial = w.partial_pages
    if w.kind == "trace":
        t = w.trace
        path = trace_path(t.path, base_dir)
        blocks = {} if t.block_size is None else {"block_size": t.block_size}
        if t.format == "mooncake":
            reqs = load_mooncake(
                path, page_size, partial_pages=partial, limit=t.limit, time_scale=t.time_scale, **blocks
            )
        elif t.format == "bailian":
            reqs = load_bailian(
                path, page_size, partial_pages=partial, limit=t.limit, time_scale=t.time_scale, **blocks
            )
        else:
            rows = load_azure(path, limit=t.limit, time_scale=t.time_scale)
            # No prefix identity in the Azure trace: every request's pages are its own.
            reqs = [
                Request(f"a{i}", ts, inp, out, stream_keys(hash((seed, 9, i)), inp, page_size, partial))
                for i, (ts, inp, out) in enumerate(rows)
            ]
        if not reqs:
            raise WorkloadError(str(path), None, "trace has no requests")
        return Workload(reqs)
    if w.kind == "multiturn":
        return synthetic.multiturn(w.multiturn, page_size, seed, partial)
    if w.kind == "shared_prefix":
        return synthetic.shared_prefix(w.shared_prefix, page_size, seed, partial)
    if w.kind == "long_context":
        return synthetic.long_context(w.long_context, page_size, seed, partial)
    spec = w.poisson_synthetic
    rows = None
    if spec.lengths_from:
        rows = load_azure(trace_path(spec.lengths_from, base_dir))
    return synthetic.poisson_synthetic(spec, page_size, seed, partial, rows)
