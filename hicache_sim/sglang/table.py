"""The SGLang flags the simulator models, as a table (data, not an if-chain): each row names the
flags it reads, reads them from a launch command into scenario fields (SGLang's default when a flag
is absent, for sglang ``SGLANG_VERSION``), and writes those fields back as flags (nothing when the
value is SGLang's default).

Defaults, from sglang 0.5.23 (``sglang/srt/arg_groups/fields/*.py`` and the resolution hooks):
``--page-size`` 1 (64 with the flashmla backend, 64 unless 32 or 64 with trtllm_mla / cutedsl_mla),
``--chunked-prefill-size`` and ``--max-running-requests`` unset (the scenario's ``auto``, which
resolves them as SGLang does: see :mod:`hicache_sim.hardware.memory`), ``--max-prefill-tokens`` 16384,
``--schedule-policy`` fcfs, ``--radix-eviction-policy`` lru, ``--attention-backend`` unset (SGLang picks one
for the model and GPU; a backend given is recorded as ``hardware.attention_backend``, its speed
modelled only where ``hardware/attention.py`` has its kernel's rule), HiCache off unless
``--enable-hierarchical-cache``, then ``--hicache-ratio`` 2 (1.2 in buffer_only mode; ``--hicache-size``
in GB overrides it; with neither, the ratio shrinks to fit ``--hicache-host-memory-fraction`` 0.8 of the
host's memory when the scenario gives ``hardware.host_memory_gib``), write_through, kernel io,
page_first layout, prefetch policy timeout, and the storage prefetch knobs of
``--hicache-storage-backend-extra-config``: ``prefetch_threshold`` 256 tokens, ``prefetch_timeout_base``
1 s, ``prefetch_timeout_per_ki_token`` 0.25 s.

The values a modelled flag takes are data too: SGLang's choices (the stored flag list) that a registry or
preset table of the simulator holds (``modelled``), so a kind registered there is read from a launch
command with no edit here. A value SGLang itself refuses never reaches a row: ``flags.parse_command``
refuses it first (docs/reference/sglang-launch-flags.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from ..core import EVICTION_STRATEGIES, PREFETCH_STOP_POLICIES, WRITE_POLICIES
from ..core.policies import HOST_MEMORY_MODES
from ..core.routing import ROUTERS, check_method
from ..core.schedule import check_policy
from ..hardware.allreduce import CUSTOM_MAX_MIB
from ..hardware.attention import ATTENTION_RULES
from ..hardware.presets import HOST_LAYOUTS, IO_BACKENDS, MODELS, STORAGE
from ..hardware.speculative import NOT_MODELLED, SGLANG_ALGORITHMS, SPEC_ALGORITHMS
from ..scenario.resolve import DEFAULT_HOST_RATIO
from ..scenario.schema import AUTO
from .flags import SglangArgsError, known_flags
from .models import hf_id, local_config, model_path_of, preset_for

MISSING: Any = object()


@dataclass
class ReadContext:
    """A parsed launch command being read: canonical flag -> value, the GPU's memory, notes."""

    args: dict[str, Any]
    memory_mib: float
    preset: str | None = None  # the user's --preset for a model this does not know by name
    notes: list[str] = field(default_factory=list)
    node_memory: bool = False  # the node's memory was given (--node-memory): auto-sizing is modelled

    @property
    def hicache(self) -> bool:
        return self.args.get("--enable-hierarchical-cache") is True

    @property
    def storage(self) -> bool:
        return self.hicache and self.args.get("--hicache-storage-backend") is not None


@dataclass
class WriteContext:
    """A resolved scenario being written as flags; ``notes`` collects what no flag can say."""

    sc: Any  # Scenario
    r: Any  # Resolved
    notes: list[str] = field(default_factory=list)

    @property
    def memory_mib(self) -> float:
        return self.sc.hardware.memory_mib or self.r.gpu.memory_mib

    def get(self, dotted: str) -> Any:
        node = self.sc
        for part in dotted.split("."):
            node = getattr(node, part)
        return node


@dataclass(frozen=True)
class Row:
    """One or more SGLang flags and the scenario fields they set. ``needs``: the flags matter to
    SGLang only with HiCache on (``hicache``) or with a storage backend too (``storage``). ``fields``:
    the scenario fields its flags are written from (named when SGLang would refuse what it writes)."""

    flags: tuple[str, ...]
    read: Callable[[ReadContext], dict[str, Any]]
    write: Callable[[WriteContext], list[str]]
    needs: str = ""
    fields: tuple[str, ...] = ()


# ------------------------------------------------------------------------------------ values


def _int(flag: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise SglangArgsError(f"{flag}: expected an integer, got {raw!r}") from None


def _float(flag: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise SglangArgsError(f"{flag}: expected a number, got {raw!r}") from None


_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _human_int(flag: str, raw: str) -> int:
    """An integer with SGLang's optional suffix: k, M, G, T (decimals allowed) or Ki, Mi, Gi, Ti."""
    text = raw.strip()
    for table in (_IEC, _SI):
        for suffix, mult in table.items():
            if text.endswith(suffix) and text[: -len(suffix)]:
                number = text[: -len(suffix)]
                try:
                    value = Decimal(number)
                except InvalidOperation:
                    break
                if table is _IEC and "." in number:
                    break
                if value >= 0:
                    return int(value * mult)
    return _int(flag, text)


def _json(flag: str, raw: str) -> dict:
    if raw.startswith("@"):
        raise SglangArgsError(f"{flag}: a config file ({raw}) is not read; give the JSON object itself")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise SglangArgsError(f"{flag}: expected a JSON object ({e.msg} at character {e.pos})") from None
    if not isinstance(value, dict):
        raise SglangArgsError(f"{flag}: expected a JSON object, got {type(value).__name__}")
    return value


def _choice(modelled: list[str] | tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(flag: str, raw: str) -> str:
        if raw not in modelled:
            raise SglangArgsError(f"{flag} {raw}: not modelled by hicache-sim; modelled: {', '.join(modelled)}")
        return raw

    return parse


def modelled(flag: str, names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The values of ``flag`` SGLang accepts (its choices, in its order) that the simulator models
    (``names``: a registry's, a preset table's): a kind registered here is read from a launch command
    once SGLang takes it too, with no edit to this table."""
    choices = known_flags()[0][flag].choices or ()
    return tuple(c for c in choices if c in names)


def _policy_parse(flag: str, raw: str) -> str:
    """A modelled ``--schedule-policy``; SGLang's others are refused saying why."""
    try:
        return check_policy(raw)
    except ValueError as e:
        raise SglangArgsError(f"{flag} {raw}: {e}") from None


def _text(v: Any) -> str:
    return repr(v) if isinstance(v, float) else str(v)


# -------------------------------------------------------------------------------------- rows


def field_row(
    flag: str,
    dotted: str,
    parse: Callable[[str, str], Any],
    *,
    default: Any = MISSING,
    show: Callable[[Any], str] = _text,
    needs: str = "",
) -> Row:
    """A flag that sets one field. ``default``: SGLang's value when the flag is absent (a callable
    takes the GPU memory in MiB); MISSING leaves the field to the scenario's own default."""

    def sglang_default(memory_mib: float) -> Any:
        return default(memory_mib) if callable(default) else default

    def read(ctx: ReadContext) -> dict[str, Any]:
        raw = ctx.args.get(flag)
        if raw is None:
            d = sglang_default(ctx.memory_mib)
            return {} if d is MISSING else {dotted: d}
        return {dotted: parse(flag, raw)}

    def write(ctx: WriteContext) -> list[str]:
        v = ctx.get(dotted)
        if v == sglang_default(ctx.memory_mib):
            return []
        return [flag, show(v)]

    return Row((flag,), read, write, needs, (dotted,))


def _model_read(ctx: ReadContext) -> dict[str, Any]:
    raw = ctx.args.get("--model-path")
    if ctx.preset is not None:
        if ctx.preset not in MODELS:
            raise SglangArgsError(f"--preset {ctx.preset}: unknown model preset; known: {', '.join(MODELS.names())}")
        return {"model.preset": ctx.preset}
    if raw is None:
        raise SglangArgsError("--model-path: missing (SGLang requires it); give it, or --preset NAME")
    config = local_config(raw)
    if config is not None:
        return {"model.config": config}
    preset = preset_for(raw)
    if preset is None:
        raise SglangArgsError(
            f"--model-path {raw}: not a model hicache-sim knows by name; rerun with --preset NAME for the "
            f"preset of the same architecture (one of: {', '.join(MODELS.names())}), give the local folder "
            "holding its config.json, or write the scenario's model section: config: path/to/config.json"
        )
    return {"model.preset": preset}


def _model_write(ctx: WriteContext) -> list[str]:
    m = ctx.sc.model
    path = hf_id(m.preset) if m.preset else model_path_of(m.config) if m.config else None
    dims = [k for k in m.model_fields_set if k not in ("preset", "config", "dtype", "speculative")]
    if path is None or dims:
        ctx.notes.append("model: not a preset as published (explicit dimensions); --model-path must name those weights")
    return ["--model-path", path or "PATH/TO/MODEL"]


_KV_DTYPES = {"auto": "bf16", "bf16": "bf16", "bfloat16": "bf16", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
_KV_DTYPE_FLAG = {"bf16": None, "fp8": "fp8_e4m3"}


def _kv_dtype_write(ctx: WriteContext) -> list[str]:
    d = ctx.sc.model.dtype
    if d not in _KV_DTYPE_FLAG:
        ctx.notes.append(f"model.dtype={d}: SGLang's KV cache dtype is the model's (auto), bf16 or fp8 here")
        return []
    flag = _KV_DTYPE_FLAG[d]
    return [] if flag is None else ["--kv-cache-dtype", flag]


# Attention backends that fix the page size (sglang 0.5.23 _mla_backend_page_constraints): backend
# -> (page sizes it keeps, the size it switches others to).
_BACKEND_PAGES = {"flashmla": ((64,), 64), "trtllm_mla": ((32, 64), 64), "cutedsl_mla": ((32, 64), 64)}


# sglang 0.5.23's --attention-backend choices (the stored flag list), and the deprecated names it
# renames (``_handle_deprecated_args``).
ATTENTION_BACKENDS: tuple[str, ...] = tuple(known_flags()[0]["--attention-backend"].choices or ())
_BACKEND_ALIASES = {"compressed": "dsv4", "tokenspeed_mla": "cutedsl_mla"}
_BACKEND_FLAG = "--attention-backend"


def _backend(ctx: ReadContext) -> str | None:
    """The attention backend the command names, by the name SGLang runs it under (None: SGLang picks)."""
    raw = ctx.args.get(_BACKEND_FLAG)
    return _BACKEND_ALIASES.get(raw, raw)


def _backend_read(ctx: ReadContext) -> dict[str, Any]:
    """``--attention-backend``: recorded as ``hardware.attention_backend``. A backend with a kernel rule
    (``hardware/attention.py``: triton) has its prefill attention timed by the bytes its tiling reads;
    any other runs at ``hardware.attention_mfu`` whatever the kernel. The note says which, and that a
    server log of the deployment fits the efficiencies (``hicache-sim calibrate``)."""
    raw = ctx.args.get(_BACKEND_FLAG)
    if raw is None:
        return {}
    name = _backend(ctx)  # a value outside SGLang's choices was refused with the command
    if name != raw:
        ctx.notes.append(f"{_BACKEND_FLAG} {raw}: deprecated; SGLang runs it as {name}")
    pages = " (its page size is: --page-size)" if name in _BACKEND_PAGES else ""
    speed = (
        "its prefill attention timed by its kernel's tiling (hicache_sim/hardware/attention.py), decode "
        "attention at hardware.attention_mfu"
        if name in ATTENTION_RULES
        else "its speed not modelled: attention is timed at hardware.attention_mfu for every backend "
        f"without a kernel rule ({', '.join(ATTENTION_RULES.names())} has one)"
    )
    ctx.notes.append(
        f"{_BACKEND_FLAG} {name}: recorded as hardware.attention_backend, {speed}{pages}; fit the "
        "efficiencies to this deployment with hicache-sim calibrate SERVER_LOG --scenario S"
    )
    return {"hardware.attention_backend": name}


def _backend_write(ctx: WriteContext) -> list[str]:
    name = ctx.sc.hardware.attention_backend
    return [] if name is None else [_BACKEND_FLAG, name]


def _page_read(ctx: ReadContext) -> dict[str, Any]:
    raw = ctx.args.get("--page-size")
    page = 1 if raw is None else _int("--page-size", raw)
    backend = _backend(ctx)
    if backend in _BACKEND_PAGES:
        keep, forced = _BACKEND_PAGES[backend]
        if page not in keep:
            ctx.notes.append(f"--attention-backend {backend}: SGLang sets the page size to {forced} (was {page})")
            page = forced
    return {"cache.page_size": page}


def _page_write(ctx: WriteContext) -> list[str]:
    page = ctx.sc.cache.page_size
    return [] if page == 1 else ["--page-size", str(page)]


def _chunk_parse(flag: str, raw: str) -> int | None:
    v = _int(flag, raw)
    if v == -1:
        return None
    if v <= 0:
        raise SglangArgsError(f"{flag}: expected a positive token count, or -1 (no chunking), got {raw!r}")
    return v


def _chunk_show(v: int | None) -> str:
    return "-1" if v is None else str(v)


def _positive(flag: str, raw: str) -> int:
    v = _int(flag, raw)
    if v <= 0:
        raise SglangArgsError(f"{flag}: expected a positive integer, got {raw!r}")
    return v


# Host pool: SGLang's default ratio per host memory mode (scenario/resolve.py, the one source) unless
# given; --hicache-size (GB, int) overrides.
_DEFAULT_RATIO = DEFAULT_HOST_RATIO
_HOST_FLAGS = ("--enable-hierarchical-cache", "--hicache-ratio", "--hicache-size", "--hicache-host-memory-mode")


def _host_read(ctx: ReadContext) -> dict[str, Any]:
    if not ctx.hicache:
        return {"cache.host_tokens": 0}
    mode = _choice(HOST_MEMORY_MODES.names())(
        "--hicache-host-memory-mode", ctx.args.get("--hicache-host-memory-mode", "cache")
    )
    out: dict[str, Any] = {"cache.host_memory_mode": mode}
    size = _int("--hicache-size", ctx.args.get("--hicache-size", "0"))
    ratio = ctx.args.get("--hicache-ratio")
    if size > 0:
        if ratio is not None:
            ctx.notes.append(f"--hicache-size {size} overrides --hicache-ratio {ratio} (as in SGLang)")
        out["cache.host_size_gb"] = float(size)
    elif ratio is not None:
        value = _float("--hicache-ratio", ratio)
        if value <= 0:
            raise SglangArgsError(f"--hicache-ratio: expected a positive ratio, got {ratio!r}")
        out["cache.host_ratio"] = value
    return out


def _host_write(ctx: WriteContext) -> list[str]:
    c, r = ctx.sc.cache, ctx.r
    if r.host_tokens == 0:
        return []
    out = ["--enable-hierarchical-cache"]
    if c.host_memory_mode != "cache":
        out += ["--hicache-host-memory-mode", c.host_memory_mode]
    if c.host_size_gb is not None and float(c.host_size_gb).is_integer() and c.host_size_gb > 0:
        return [*out, "--hicache-size", str(int(c.host_size_gb))]
    if c.host_ratio is not None:
        ratio = c.host_ratio
    elif c.host_size_gb is None and c.host_tokens is None:
        ratio = _DEFAULT_RATIO[c.host_memory_mode]
    else:
        ratio = float(f"{r.host_tokens / r.device_tokens:.6g}")
        given = f"host_size_gb={c.host_size_gb}" if c.host_size_gb is not None else f"host_tokens={c.host_tokens}"
        ctx.notes.append(
            f"cache.{given}: SGLang sizes the host pool by --hicache-ratio or whole GB (--hicache-size); "
            f"printed as the ratio of the resolved pools, {ratio}"
        )
    return out if ratio == _DEFAULT_RATIO[c.host_memory_mode] else [*out, "--hicache-ratio", _text(float(ratio))]


_FRACTION_FLAG = "--hicache-host-memory-fraction"


def _fraction_read(ctx: ReadContext) -> dict[str, Any]:
    raw = ctx.args.get(_FRACTION_FLAG)
    value = 0.8 if raw is None else _float(_FRACTION_FLAG, raw)
    if not 0 < value <= 1:
        raise SglangArgsError(f"{_FRACTION_FLAG}: expected a fraction in (0, 1], got {raw!r}")
    sized = any(ctx.args.get(f) not in (None, "0") for f in ("--hicache-ratio", "--hicache-size"))
    if not sized and not ctx.node_memory:
        ctx.notes.append(
            f"host pool: SGLang shrinks its default ratio until the host pools fit {value} of this machine's "
            "memory less 10 GiB; set hardware.host_memory_gib to model that (without it the ratio stays)"
        )
    return {"cache.host_memory_fraction": value}


def _write_policy_read(ctx: ReadContext) -> dict[str, Any]:
    policy = _choice(modelled("--hicache-write-policy", WRITE_POLICIES.names()))(
        "--hicache-write-policy", ctx.args.get("--hicache-write-policy", "write_through")
    )
    mode = ctx.args.get("--hicache-host-memory-mode", "cache")  # checked by the host pool's reader
    runs = HOST_MEMORY_MODES.get(mode).runs(policy) if mode in HOST_MEMORY_MODES else policy
    if runs != policy and ctx.storage:
        ctx.notes.append(f"--hicache-write-policy {policy}: SGLang runs {runs} in {mode} mode")
        policy = runs
    return {"cache.write_policy": policy}


# SGLang --hicache-storage-backend values that a storage preset of the same name models.
SGLANG_STORAGE = modelled(
    "--hicache-storage-backend", [n for n in STORAGE.names() if STORAGE.get(n).sglang_backend == n]
)


def _storage_write(ctx: WriteContext) -> list[str]:
    name = ctx.sc.cache.storage_backend
    if name == "none":
        return []
    backend = STORAGE.get(name).sglang_backend
    if STORAGE.canonical(name) != backend:
        ctx.notes.append(f"cache.storage_backend={name}: a disk; SGLang runs it as its {backend} backend")
    return ["--hicache-storage-backend", backend]


# --hicache-storage-backend-extra-config keys modelled: key -> (cache field, SGLang's default, type).
_EXTRA = {
    "prefetch_threshold": ("cache.prefetch_threshold", 256, int),
    "prefetch_timeout_base": ("cache.prefetch_timeout_base_s", 1.0, float),
    "prefetch_timeout_per_ki_token": ("cache.prefetch_timeout_per_ki_token_s", 0.25, float),
}
_EXTRA_FLAG = "--hicache-storage-backend-extra-config"
# The keys SGLang's own ``sim`` backend (storage/sim_storage.py) takes its figures from: key -> (the
# hardware.storage field it sets, the key whose value it defaults to; none: the sim preset's figure,
# which is SGLang's default). A rate <= 0 is infinite in SGLang: not modelled, refused.
_SIM_BACKEND = "sim"
_SIM_EXTRA = {
    "sim_write_gbps": ("write_gbps", None),
    "sim_read_gbps": ("read_gbps", "sim_write_gbps"),
    "sim_op_latency_us": ("latency_us", None),
}


def _sim_read(given: dict[str, Any]) -> dict[str, Any]:
    """The sim backend's figures the extra config sets (with SGLang's defaults between its keys)."""
    values: dict[str, float] = {}
    for key, (_, fallback) in _SIM_EXTRA.items():
        if key in given:
            v = given[key]
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise SglangArgsError(f"{_EXTRA_FLAG}: {key}: expected a number, got {v!r}")
            if key == "sim_op_latency_us" and v < 0:
                raise SglangArgsError(f"{_EXTRA_FLAG}: {key}: expected a number >= 0, got {v!r}")
            if key != "sim_op_latency_us" and v <= 0:
                raise SglangArgsError(
                    f"{_EXTRA_FLAG}: {key} {v}: SGLang's sim backend takes a rate <= 0 as infinite, which is "
                    "not modelled; give a rate in GB/s"
                )
            values[key] = float(v)
        elif fallback in values:
            values[key] = values[fallback]
    return {f"hardware.storage.{_SIM_EXTRA[k][0]}": v for k, v in values.items()}


def _sim_write(ctx: WriteContext) -> dict[str, float]:
    """The sim backend's extra-config keys where the scenario's figures differ from what SGLang would
    run without them."""
    if ctx.sc.cache.storage_backend == "none" or STORAGE.canonical(ctx.sc.cache.storage_backend) != _SIM_BACKEND:
        return {}
    preset, hs = STORAGE.get(_SIM_BACKEND), ctx.sc.hardware.storage
    now = {
        "sim_write_gbps": hs.write_gbps or preset.write_gbps,
        "sim_read_gbps": hs.read_gbps or preset.read_gbps,
        "sim_op_latency_us": hs.latency_us if hs.latency_us is not None else preset.latency_us,
    }
    if hs.capacity_gb:
        ctx.notes.append(f"hardware.storage.capacity_gb={hs.capacity_gb}: SGLang's sim backend has no bound")
    out = {}
    for key, (field_name, fallback) in _SIM_EXTRA.items():
        default = now[fallback] if fallback else getattr(preset, field_name)
        if now[key] != default:
            out[key] = now[key]
    return out


def _extra_read(ctx: ReadContext) -> dict[str, Any]:
    raw = ctx.args.get(_EXTRA_FLAG)
    given = _json(_EXTRA_FLAG, raw) if raw is not None else {}
    sim = ctx.args.get("--hicache-storage-backend") == _SIM_BACKEND
    out = _sim_read(given) if sim else {}
    for key, (dotted, default, kind) in _EXTRA.items():
        v = given.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int | float) or (kind is int and not isinstance(v, int)):
            raise SglangArgsError(f"{_EXTRA_FLAG}: {key}: expected {'an integer' if kind is int else 'a number'}")
        out[dotted] = kind(v)
    other = sorted(k for k in given if k not in _EXTRA and not (sim and k in _SIM_EXTRA))
    if other:
        ctx.notes.append(f"{_EXTRA_FLAG}: not modelled: {', '.join(other)}")
    return out


def _extra_write(ctx: WriteContext) -> list[str]:
    cfg = ctx.r.cache
    now = {
        "prefetch_threshold": cfg.prefetch_threshold_tokens,
        "prefetch_timeout_base": cfg.timeout_base_s,
        "prefetch_timeout_per_ki_token": cfg.timeout_per_ki_token_s,
    }
    differ = {k: v for k, v in now.items() if v != _EXTRA[k][1]}
    differ.update(_sim_write(ctx))
    if cfg.timeout_max_s is not None:
        ctx.notes.append(
            f"prefetch timeout cap {cfg.timeout_max_s} s (cache.semantics {ctx.sc.cache.semantics}): SGLang "
            "0.5.23 has no cap"
        )
    return [_EXTRA_FLAG, json.dumps(differ, sort_keys=True)] if differ else []


_NO_CUSTOM_AR = "--disable-custom-all-reduce"


def _custom_ar_read(ctx: ReadContext) -> dict[str, Any]:
    return {"hardware.custom_allreduce_max_mib": 0.0} if ctx.args.get(_NO_CUSTOM_AR) is True else {}


def _custom_ar_write(ctx: WriteContext) -> list[str]:
    cap = ctx.sc.hardware.custom_allreduce_max_mib
    if cap == 0:
        return [_NO_CUSTOM_AR]
    if cap != CUSTOM_MAX_MIB:
        ctx.notes.append(
            f"hardware.custom_allreduce_max_mib={cap}: no SGLang flag sets the cap ({CUSTOM_MAX_MIB:g} MiB on CUDA)"
        )
    return []


_NO_PREFILL_GRAPH = "--disable-prefill-cuda-graph"
_NO_GRAPHS = "--disable-cuda-graph"
_PREFILL_GRAPH_BACKENDS = ("full", "breakable", "disabled")


def _prefill_graph_read(ctx: ReadContext) -> dict[str, Any]:
    """``--cuda-graph-backend-prefill``, or its convenience ``--disable-prefill-cuda-graph`` (the
    backend flag wins when both are given, as SGLang folds the convenience flag in first)."""
    raw = ctx.args.get("--cuda-graph-backend-prefill")
    if raw is not None:
        return {
            "scheduler.cuda_graph_backend_prefill": _choice(_PREFILL_GRAPH_BACKENDS)(
                "--cuda-graph-backend-prefill", raw
            )
        }
    if ctx.args.get(_NO_GRAPHS) is True:
        ctx.notes.append(
            f"{_NO_GRAPHS}: prefill runs eagerly (its host floor); decode without CUDA graphs is not modelled "
            "(decode steps keep the graph's per-layer cost)"
        )
    if ctx.args.get(_NO_PREFILL_GRAPH) is True or ctx.args.get(_NO_GRAPHS) is True:
        return {"scheduler.cuda_graph_backend_prefill": "disabled"}
    return {}


# Data-parallel ranks (docs/reference/sglang-data-parallel.md): plain --dp-size starts that many tp x pp
# groups; --attn-dp-size splits the tp ranks into attention groups; the deprecated --enable-dp-attention
# turns --dp-size into --attn-dp-size when that is unset (sglang 0.5.23 handle_deprecated_dp_attention),
# and SGLang refuses both widths above 1 (handle_data_parallelism): the schema says so in one line.
_DP_ATTENTION = "--enable-dp-attention"
_DP_FLAGS = ("--dp-size", "--attn-dp-size", _DP_ATTENTION)


def _dp_read(ctx: ReadContext) -> dict[str, Any]:
    dp = _positive("--dp-size", ctx.args.get("--dp-size", "1"))
    attn = _positive("--attn-dp-size", ctx.args.get("--attn-dp-size", "1"))
    if ctx.args.get(_DP_ATTENTION) is True and attn == 1:
        dp, attn = 1, dp
    return {dotted: v for dotted, v in (("hardware.dp", dp), ("hardware.attn_dp", attn)) if v != 1}


def _dp_write(ctx: WriteContext) -> list[str]:
    out = []
    for flag, dotted in (("--dp-size", "hardware.dp"), ("--attn-dp-size", "hardware.attn_dp")):
        v = ctx.get(dotted)
        out += [] if v == 1 else [flag, str(v)]
    return out


def _balance_parse(flag: str, raw: str) -> str:
    """A modelled ``--load-balance-method`` (auto is round_robin outside PD disaggregation); SGLang's
    others are refused saying why."""
    try:
        return ROUTERS.canonical(check_method(raw))
    except ValueError as e:
        raise SglangArgsError(f"{flag} {raw}: {e}") from None


# Speculative decoding: the algorithm and its draft model, as far as they size KV pools
# (hardware/speculative.py; docs/reference/sglang-speculative.md), and the round's shape
# (--speculative-num-steps, --speculative-eagle-topk, --speculative-num-draft-tokens), which times its
# rounds once model.speculative.accept_len is set (SGLang logs it; no flag gives it).
_SPEC_FLAG = "--speculative-algorithm"
_DRAFT_FLAG = "--speculative-draft-model-path"
#: Round-shape flag -> its model.speculative field.
_SPEC_STEP_FLAGS = {
    "--speculative-num-steps": "num_steps",
    "--speculative-eagle-topk": "eagle_topk",
    "--speculative-num-draft-tokens": "num_draft_tokens",
}
_SPEC_TIME_NOTE = (
    "speculative decoding: the draft's weights and KV in the device pool and its KV in the host pools are "
    "modelled; its time effects (draft steps, verify, draft extend) only with model.speculative.accept_len, the "
    "mean tokens per round SGLang's log prints as 'accept len' (calibrate SERVER_LOG reports it): without it a "
    "decode step emits one token per request"
)


def _spec_read(ctx: ReadContext) -> dict[str, Any]:
    """``--speculative-algorithm`` (case-insensitive, as SGLang upper-cases it) and the draft model path: a
    local folder holding the draft's config.json, or the target's own checkpoint (its MTP layers)."""
    raw, draft = ctx.args.get(_SPEC_FLAG), ctx.args.get(_DRAFT_FLAG)
    if raw is None or raw.upper() == "NONE":
        for flag in (_DRAFT_FLAG, *_SPEC_STEP_FLAGS):
            if ctx.args.get(flag) is not None:
                ctx.notes.append(f"{flag}: no effect without {_SPEC_FLAG} (not read)")
        return {}
    name = raw.upper()
    modelled_names = ", ".join(SPEC_ALGORITHMS.get(n).sglang for n in SPEC_ALGORITHMS.names())
    if name not in SGLANG_ALGORITHMS:
        raise SglangArgsError(
            f"{_SPEC_FLAG} {raw}: SGLang 0.5.23 refuses it (unknown speculative algorithm); it takes "
            f"{', '.join(SGLANG_ALGORITHMS)} or a name a plugin registers"
        )
    if name in NOT_MODELLED:
        raise SglangArgsError(f"{_SPEC_FLAG} {raw}: {NOT_MODELLED[name]}; modelled: {modelled_names}")
    algo = SPEC_ALGORITHMS.get(name.lower())
    out: dict[str, Any] = {"model.speculative.algorithm": algo.name}
    ctx.notes.append(_SPEC_TIME_NOTE)
    for flag, key in _SPEC_STEP_FLAGS.items():
        if ctx.args.get(flag) is not None:
            out[f"model.speculative.{key}"] = _int(flag, ctx.args[flag])
    if draft is None:
        return out
    if algo.draft == "none":
        ctx.notes.append(f"{_DRAFT_FLAG}: {algo.sglang} has no draft model (not read)")
    elif draft.rstrip("/") == str(ctx.args.get("--model-path", "")).rstrip("/"):
        ctx.notes.append(f"{_DRAFT_FLAG}: the target's own checkpoint: its MTP layers are the draft")
    else:
        config = local_config(draft)
        if config is None:
            raise SglangArgsError(
                f"{_DRAFT_FLAG} {draft}: not a local folder holding config.json; hicache-sim reads the draft's KV "
                "layers and shape from it (give the folder, or write model.speculative in the scenario)"
            )
        out["model.speculative.config"] = config
    return out


def _spec_write(ctx: WriteContext) -> list[str]:
    spec = ctx.sc.model.speculative
    if spec is None:
        return []
    out = [_SPEC_FLAG, SPEC_ALGORITHMS.get(spec.algorithm).sglang]
    for flag, key in _SPEC_STEP_FLAGS.items():
        if getattr(spec, key) is not None:
            out += [flag, str(getattr(spec, key))]
    if spec.config is not None:
        return [*out, _DRAFT_FLAG, model_path_of(spec.config)]
    if spec.num_layers is not None:
        ctx.notes.append(
            "model.speculative: a draft given by dimensions; --speculative-draft-model-path must name those weights"
        )
        return [*out, _DRAFT_FLAG, "PATH/TO/DRAFT"]
    return out


def _refuse(flag: str, why: str) -> Row:
    def read(ctx: ReadContext) -> dict[str, Any]:
        if ctx.args.get(flag) is not None:
            raise SglangArgsError(f"{flag}: {why}")
        return {}

    return Row((flag,), read, lambda ctx: [])


ROWS: tuple[Row, ...] = (
    _refuse(
        "--disable-radix-cache", "not modelled: the simulator is the radix (prefix) cache; without it nothing is reused"
    ),
    Row(("--model-path",), _model_read, _model_write, fields=("model.preset",)),
    Row((_SPEC_FLAG, _DRAFT_FLAG, *_SPEC_STEP_FLAGS), _spec_read, _spec_write, fields=("model.speculative",)),
    Row(
        ("--kv-cache-dtype",),
        field_row(
            "--kv-cache-dtype",
            "model.dtype",
            lambda f, raw: _KV_DTYPES[_choice(tuple(_KV_DTYPES))(f, raw)],
            default="bf16",
        ).read,
        _kv_dtype_write,
        fields=("model.dtype",),
    ),
    field_row("--tp-size", "hardware.tp", _int, default=1),
    field_row("--pp-size", "hardware.pp", _int, default=1),
    Row(_DP_FLAGS, _dp_read, _dp_write, fields=("hardware.dp", "hardware.attn_dp")),
    field_row(
        "--load-balance-method",
        "hardware.load_balance_method",
        _balance_parse,
        default="round_robin",
    ),
    field_row("--nnodes", "hardware.nnodes", _positive, default=1),
    Row((_NO_CUSTOM_AR,), _custom_ar_read, _custom_ar_write, fields=("hardware.custom_allreduce_max_mib",)),
    field_row("--mem-fraction-static", "hardware.mem_fraction_static", _float, default=None),
    field_row("--cuda-graph-max-bs-decode", "hardware.cuda_graph_max_bs", _int, default=None),
    Row(
        ("--cuda-graph-backend-prefill", _NO_PREFILL_GRAPH, _NO_GRAPHS),
        _prefill_graph_read,
        field_row("--cuda-graph-backend-prefill", "scheduler.cuda_graph_backend_prefill", str, default=AUTO).write,
        fields=("scheduler.cuda_graph_backend_prefill",),
    ),
    field_row("--max-total-tokens", "cache.device_tokens", _human_int, default=None),
    Row(("--page-size",), _page_read, _page_write, fields=("cache.page_size",)),
    Row((_BACKEND_FLAG,), _backend_read, _backend_write, fields=("hardware.attention_backend",)),
    field_row("--chunked-prefill-size", "scheduler.chunked_prefill_size", _chunk_parse, default=AUTO, show=_chunk_show),
    field_row("--max-prefill-tokens", "scheduler.max_prefill_tokens", _human_int, default=16384),
    field_row("--max-running-requests", "scheduler.max_running_requests", _positive, default=AUTO),
    field_row("--schedule-policy", "scheduler.schedule_policy", _policy_parse, default="fcfs"),
    field_row(
        "--radix-eviction-policy",
        "cache.eviction_policy",
        _choice(modelled("--radix-eviction-policy", EVICTION_STRATEGIES.names())),
        default="lru",
    ),
    field_row(
        "--radix-eviction-policy-config",
        "cache.eviction_policy_config",
        _json,
        default={},
        show=lambda v: json.dumps(v, sort_keys=True),
    ),
    Row(
        _HOST_FLAGS,
        _host_read,
        _host_write,
        fields=("cache.host_memory_mode", "cache.host_ratio", "cache.host_size_gb", "cache.host_tokens"),
    ),
    Row(
        (_FRACTION_FLAG,),
        _fraction_read,
        field_row(_FRACTION_FLAG, "cache.host_memory_fraction", _float, default=0.8).write,
        "hicache",
        ("cache.host_memory_fraction",),
    ),
    Row(
        ("--hicache-write-policy",),
        _write_policy_read,
        field_row("--hicache-write-policy", "cache.write_policy", str, default="write_through").write,
        "hicache",
        ("cache.write_policy",),
    ),
    field_row(
        "--hicache-io-backend",
        "cache.io_backend",
        _choice(modelled("--hicache-io-backend", IO_BACKENDS)),
        default="kernel",
        needs="hicache",
    ),
    field_row(
        "--hicache-mem-layout",
        "cache.mem_layout",
        _choice(modelled("--hicache-mem-layout", HOST_LAYOUTS.names())),
        default="page_first",
        needs="hicache",
    ),
    Row(
        ("--hicache-storage-backend",),
        field_row("--hicache-storage-backend", "cache.storage_backend", _choice(SGLANG_STORAGE), default="none").read,
        _storage_write,
        "hicache",
        ("cache.storage_backend",),
    ),
    field_row(
        "--hicache-storage-prefetch-policy",
        "cache.prefetch_policy",
        _choice(modelled("--hicache-storage-prefetch-policy", PREFETCH_STOP_POLICIES.names())),
        default="timeout",
        needs="storage",
    ),
    # Absent: None, the era's default (8 and 8 for 0.5.23 in the 2026 era).
    field_row(
        "--hicache-storage-prefetch-retry-poll-interval",
        "cache.prefetch_retry_poll_interval",
        _int,
        default=None,
        needs="storage",
    ),
    field_row(
        "--hicache-storage-prefetch-retry-max-attempts",
        "cache.prefetch_retry_max_attempts",
        _int,
        default=None,
        needs="storage",
    ),
    Row(
        (_EXTRA_FLAG,),
        _extra_read,
        _extra_write,
        "storage",
        ("cache.prefetch_threshold", "cache.prefetch_timeout_base_s", "cache.prefetch_timeout_per_ki_token_s"),
    ),
)
