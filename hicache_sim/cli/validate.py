"""``hicache-sim validate``: schema and sizing check only, nothing is simulated or written."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from . import app
from .common import user_errors
from .nodememory import NODE_MEMORY_HELP, node_memory_option

if TYPE_CHECKING:
    from ..core import CacheConfig
    from ..hardware.speculative import DraftKV


@app.command()
def validate(
    scenario: str = typer.Argument(..., metavar="SCENARIO", help="scenario YAML or builtin:NAME"),
    set_: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="override a key (repeatable)"),
    node_memory: str | None = typer.Option(None, "--node-memory", metavar="GIB|NODE|local", help=NODE_MEMORY_HELP),
) -> None:
    """Check SCENARIO against the schema and resolve its sizes; print them, and what the node pins."""
    from ..scenario import load_scenario, resolve
    from ..scenario.preflight import node_check, node_ranks

    with user_errors(scenario):
        given = node_memory_option(node_memory)
        if given is not None:
            set_ = [*set_, f"hardware.host_memory_gib={given.gib!r}"]
        sc = load_scenario(scenario, set_)
        r = resolve(sc)
        node = node_check(r)
    c = r.cache
    fails = node.overcommits or node.guard() == "refused"
    verdict = "valid, but not on this node (warnings below)" if fails else "ok"
    typer.echo(f"{scenario}: {verdict} ({sc.name}, mode {sc.mode})")
    typer.echo(
        f"  model {r.model.name}: {r.bytes_per_token} B/token/rank, page {c.page_size} tokens "
        f"({r.page_bytes / 2**20:.2f} MiB)"
    )
    typer.echo(
        f"  device {r.device_tokens} tokens ({c.device_pages} pages, "
        f"{r.device_tokens * r.bytes_per_token / 1e9:.1f} GB per GPU), host {r.host_tokens} tokens "
        f"({c.host_pages} pages, {r.host_tokens * r.bytes_per_token / 1e9:.1f} GB per GPU, "
        f"ratio {r.host_tokens / r.device_tokens:.3g})"
    )
    if r.draft.layers:
        typer.echo(f"  {draft_line(r.draft)}")
    if r.memory is not None:
        typer.echo(f"  GPU {r.gpu.name} at tp {sc.hardware.tp} x pp {sc.hardware.pp}: {r.memory.describe()}")
    running = r.max_running_requests or "not derived (instant mode)"
    typer.echo(
        f"  scheduler: chunk {r.chunked_prefill_size or 'off'}, max running requests {running}, "
        f"cuda graph max bs {r.cuda_graph_max_bs}, prefill cuda graph {r.prefill_graph}"
    )
    typer.echo(
        f"  write {c.write_policy}, host eviction {c.host_eviction}, mode {c.host_memory_mode}, "
        f"storage {_storage_line(c) if c.storage else 'off'}"
    )
    if r.dp_ranks > 1:
        typer.echo(f"  {dp_line(r)}")
    for line in node.lines():
        typer.echo(f"  {line}")
    if given is not None and given.source:
        typer.echo(f"  node memory {given.source}")
    mismatches = [] if given is None else given.mismatches(sc.hardware.gpu, node_ranks(r))
    for w in [*r.warnings, *node.warnings(), *mismatches]:
        typer.echo(f"warning: {w}", err=True)


def draft_line(d: DraftKV) -> str:
    """The speculative draft's share of one rank's memory, which the model line's bytes per token leave out."""
    host = "packed into the host KV pool's rows" if d.packed else "in a host pool of its own"
    return (
        f"draft: {d.algorithm.lower()}, {d.layers} layer(s), +{d.device_bpt} B/token on the device, "
        f"{d.host_bpt} B/token on the host {host}, {d.weight_bytes / 2**30:.2f} GiB weights per rank"
    )


def dp_line(r) -> str:
    """The data-parallel ranks: each one's own pools (the sizes above are one rank's), and how requests
    are spread over them."""
    hw = r.scenario.hardware
    shape = (
        f"dp {hw.dp} replicas of tp {hw.tp}" if hw.dp > 1 else f"attn_dp {hw.attn_dp} groups of {hw.tp // hw.attn_dp}"
    )
    return (
        f"data parallel: {r.dp_ranks} ranks ({shape} GPU(s)), each with its own radix tree, device pool of "
        f"{r.device_tokens} tokens and host pool of {r.host_tokens} tokens per GPU ({r.dp_ranks * r.device_tokens} "
        f"device tokens in all); requests spread by {hw.load_balance_method}"
    )


def _storage_line(c: CacheConfig) -> str:
    """The store: its capacity in this rank's pages and what it does when full (core/stores.py)."""
    cap = "unbounded" if c.storage_capacity_pages is None else f"{c.storage_capacity_pages} pages"
    knobs = "".join(f", {k} {v}" for k, v in c.storage_eviction_params.items())
    return f"on ({cap}, eviction {c.storage_eviction}{knobs})"
