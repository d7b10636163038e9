"""The columns of a run's per-request rows (requests.parquet), declared once: the timed world's records,
the instant runner's columns and the parquet schema all read this. Neutral (no simpy, pandas or
pyarrow): an instant run imports it without the timed world."""

from __future__ import annotations

#: A request's row, declared once for both modes: (column, kind, timed only). A timed run's rows carry
#: every column in this order (``RequestRecord.as_dict``, then ``prompt_tokens``, as the runner adds
#: it); an instant run's carry the ones not timed-only (:func:`instant_columns`). Kinds: text, float, int.
REQUEST_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("rid", "text", False),
    ("arrival_s", "float", False),
    ("admit_s", "float", True),
    ("first_token_s", "float", True),
    ("finish_s", "float", True),
    ("queue_s", "float", True),
    ("prefetch_wait_s", "float", True),
    ("load_wait_s", "float", True),
    ("ttft_s", "float", True),
    ("e2e_s", "float", True),
    ("input_tokens", "int", False),
    ("output_tokens", "int", False),
    ("prompt_pages", "int", False),
    ("device_hit_pages", "int", False),
    ("host_hit_pages", "int", False),
    ("storage_hit_pages", "int", False),
    ("device_hit_tokens", "int", False),
    ("host_hit_tokens", "int", False),
    ("storage_hit_tokens", "int", False),
    ("retractions", "int", True),
    ("status", "text", False),
    ("reason", "text", False),
    ("prompt_tokens", "int", False),
)


def timed_columns() -> tuple[str, ...]:
    """A timed run's request columns, in order."""
    return tuple(name for name, _, _ in REQUEST_COLUMNS)


def instant_columns() -> tuple[str, ...]:
    """An instant run's request columns, in order: the ones not timed-only, ``prompt_tokens`` right after
    ``output_tokens`` (the order its requests.parquet has always had)."""
    names = [name for name, _, timed in REQUEST_COLUMNS if not timed and name != "prompt_tokens"]
    names.insert(names.index("output_tokens") + 1, "prompt_tokens")
    return tuple(names)
