"""A request row's columns are declared once (``hicache_sim/request_columns.py``, issue 30 item 3): the
timed world's record, the timed parquet schema and an instant run's rows all follow it. A column added
to one of them and not to the declaration fails here."""

from __future__ import annotations

import hicache_sim
from hicache_sim.output.rows import timed_request_schema
from hicache_sim.request_columns import REQUEST_COLUMNS, instant_columns, timed_columns
from hicache_sim.sim.metrics import RequestRecord
from hicache_sim.workloads import Request


def test_the_timed_record_writes_the_declared_columns_in_order():
    rec = RequestRecord(Request("r", 0.0, 64, 4, (1,)))
    assert [*rec.as_dict(64), "prompt_tokens"] == list(timed_columns())
    assert timed_request_schema().names == list(timed_columns())


def test_each_column_has_one_kind():
    assert {kind for _, kind, _ in REQUEST_COLUMNS} == {"text", "float", "int"}
    assert len({name for name, _, _ in REQUEST_COLUMNS}) == len(REQUEST_COLUMNS)


def test_an_instant_run_writes_the_declared_columns():
    r = hicache_sim.run("builtin:default", workload__trace__limit=50)
    assert list(r.requests.columns) == list(instant_columns())
    t = hicache_sim.run("builtin:default", mode="timed", workload__trace__limit=50)
    assert list(t.requests.columns) == list(timed_columns())
