"""An SGLang launch command to a scenario (``from_command``) and a scenario to the launch flags that
realise it (``to_command``), through the table of :mod:`.table`."""

from __future__ import annotations

import copy
import shlex
from dataclasses import dataclass, field
from typing import Any

from ..hardware.presets import GPUS
from ..scenario import Scenario, build_scenario, resolve
from ..scenario.preflight import node_check
from ..scenario.schema import AUTO
from .flags import SGLANG_VERSION, SglangArgsError, parse_command, split_command
from .table import ROWS, ReadContext, Row, WriteContext

# Scenario settings no SGLang flag sets, with the value SGLang runs (sglang-args says when a
# scenario departs from it).
SGLANG_RUNS = {
    "cache.host_eviction": "evicted_only",
    "cache.eviction_granularity": "node",
    "cache.host_alignment": "up_plus_one",
    "cache.load_back_threshold": 10,
    "cache.semantics": "2026",
    "scheduler.reserve_last_token": True,
}

# Era overrides (cache.semantics rules set one by one): no flag says them.
_ERA_OVERRIDES = (
    "evict_amount",
    "parent_backup",
    "host_backup_eviction",
    "prefetch_flow",
    "write_back_eviction",
    "checkpoint_hits",
)


@dataclass
class Conversion:
    """A launch command read into a scenario: its data (what the YAML holds), the validated scenario,
    notes on how flags were read, the flags not modelled, and the environment assignments."""

    data: dict
    scenario: Scenario
    notes: list[str] = field(default_factory=list)
    unmodelled: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)  # what was checked and holds (the node's verdict when it fits)


def _set(data: dict, dotted: str, value: Any) -> None:
    node = data
    *parents, last = dotted.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value


def from_command(
    argv: list[str] | str,
    *,
    gpu: str = "h200",
    preset: str | None = None,
    name: str = "from_sglang",
    mode: str = "timed",
    node_memory_gib: float | str | None = None,
) -> Conversion:
    """Read a launch command into a scenario. Flags SGLang does not know raise SglangArgsError; flags it
    knows that the simulator does not model are listed in ``unmodelled``. ``node_memory_gib``: the host
    memory of one node (``hardware.host_memory_gib``: GiB, or a node preset's name, kept as the name in
    the scenario), which the node's host pools are checked against."""
    if gpu not in GPUS:
        raise SglangArgsError(f"--gpu {gpu}: unknown GPU preset; known: {', '.join(GPUS.names())}")
    parsed = parse_command(argv)
    ctx = ReadContext(parsed.args, GPUS.get(gpu).memory_mib, preset, list(parsed.notes), node_memory_gib is not None)
    data: dict = {
        "name": name,
        "description": f"From an SGLang {SGLANG_VERSION} launch command (hicache-sim from-sglang)",
        "mode": mode,
        "hardware": {"gpu": gpu} | ({} if node_memory_gib is None else {"host_memory_gib": node_memory_gib}),
    }
    claimed: set[str] = set()
    ignored: list[str] = []
    for row in ROWS:
        claimed.update(row.flags)
        active = {"": True, "hicache": ctx.hicache, "storage": ctx.storage}[row.needs]
        if not active:
            ignored += [f for f in row.flags if f in parsed.args]
            continue
        for dotted, value in row.read(ctx).items():
            _set(data, dotted, value)
    if ignored:
        need = "--enable-hierarchical-cache" if not ctx.hicache else "--hicache-storage-backend"
        ctx.notes.append(f"{', '.join(sorted(set(ignored)))}: no effect without {need} (not read)")
    sc = build_scenario(data, "from-sglang")
    r = resolve(sc)
    node = node_check(r)  # the node's host memory: its verdict when the node's memory is given
    verdict = node.lines() if node.node_bytes is not None else []
    fits = not node.overcommits and node.guard() != "refused"
    facts = verdict if fits else []
    ctx.notes += [*r.warnings, *([] if fits else verdict), *node.warnings()]
    if r.cache.storage and r.cache.timeout_max_s is not None:
        ctx.notes.append(
            f"SGLang {SGLANG_VERSION} caps no storage prefetch timeout; the scenario keeps cache.semantics "
            f"{sc.cache.semantics}'s cap of {r.cache.timeout_max_s} s"
        )
    if mode == "instant" and sc.scheduler.schedule_policy != "fcfs":
        ctx.notes.append("--schedule-policy: acts in timed mode only (instant mode serves requests in arrival order)")
    for flag, name in (
        ("--chunked-prefill-size", "chunked_prefill_size"),
        ("--max-running-requests", "max_running_requests"),
    ):
        if getattr(sc.scheduler, name) == AUTO:
            ctx.notes.append(f"{flag} unset: SGLang runs {getattr(r, name)} here (scheduler.{name}: auto)")
    unmodelled = [f for f in parsed.args if f not in claimed]
    return Conversion(data, sc, ctx.notes, unmodelled, parsed.env, facts)


def to_command(sc: Scenario) -> tuple[list[str], list[str]]:
    """(launch command tokens, notes on what no flag says) for a scenario. Every value is checked as
    SGLang's parser checks it: a scenario setting SGLang has no flag value for (a simulator-only
    eviction strategy such as fifo) raises SglangArgsError naming the field, and no command is made."""
    r = resolve(sc)
    ctx = WriteContext(sc, r)
    tokens = ["python", "-m", "sglang.launch_server"]
    storage = r.host_tokens > 0 and sc.cache.storage_backend != "none"
    for row in ROWS:
        active = {"": True, "hicache": r.host_tokens > 0, "storage": storage}[row.needs]
        if active:
            written = row.write(ctx)
            _check_written(row, written, ctx)
            tokens += written
    for dotted, value in SGLANG_RUNS.items():
        v = ctx.get(dotted)
        if v != value:
            ctx.notes.append(f"{dotted}={v}: no SGLang flag; SGLang {SGLANG_VERSION} runs {value}")
    era = [k for k in _ERA_OVERRIDES if getattr(sc.cache, k)]
    if era:
        ctx.notes.append(f"cache.{', cache.'.join(era)}: no SGLang flag (behaviour of a code era)")
    return tokens, ctx.notes


def _check_written(row: Row, written: list[str], ctx: WriteContext) -> None:
    """Raise SglangArgsError when SGLang ``SGLANG_VERSION`` would refuse a flag value ``row`` wrote,
    naming the scenario field it came from and what SGLang takes."""
    try:
        parse_command(written)
    except SglangArgsError as e:
        shown = ", ".join(f"{f}={ctx.get(f)}" for f in row.fields) or ", ".join(row.flags)
        raise SglangArgsError(f"{shown}: SGLang {SGLANG_VERSION} cannot run this scenario: {e}") from None


def command_line(tokens: list[str]) -> str:
    """Tokens as one shell line (JSON values quoted)."""
    return shlex.join(tokens)


def normalised(argv: list[str] | str) -> dict[str, Any]:
    """A launch command's modelled flags as canonical name -> value, after a round trip through a
    scenario (what two equivalent commands share)."""
    conv = from_command(argv)
    tokens, _ = to_command(conv.scenario)
    return {k: v for k, v in parse_command(tokens).args.items()}


# How every file from-sglang writes begins (the CLI replaces only a file that begins so).
HEADER = "# Made by hicache-sim from-sglang"


def scenario_yaml(conv: Conversion, argv: list[str] | str) -> str:
    """The scenario file from-sglang writes: a header with the command it came from, then the data."""
    import yaml

    command = command_line(split_command(argv))
    lines = [
        f"{HEADER} (sglang {SGLANG_VERSION} flags; its defaults for flags not given) from:",
        *(f"#   {part}" for part in _wrap(command)),
        "# The workload is the simulator's default (the Mooncake conversation trace): set workload to your traffic.",
    ]
    if conv.unmodelled:
        lines.append(f"# Not modelled: {' '.join(conv.unmodelled)}")
    body = yaml.safe_dump(copy.deepcopy(conv.data), sort_keys=False, default_flow_style=False)
    return "\n".join(lines) + "\n" + body


def _wrap(text: str, width: int = 100) -> list[str]:
    out, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            out.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*out, line] if line else out
