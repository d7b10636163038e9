"""Per-request rows streamed to parquet while a run goes on, so a long trace never holds them all.

Rows arrive as dicts with the same keys; they are buffered column by column and written as one row
group per ``batch_rows`` rows with ``pyarrow.parquet.ParquetWriter`` under a fixed schema (a batch
whose column happens to be all null keeps its type). A file of at most ``batch_rows`` rows has the
same bytes as ``write_table`` of the same table: one row group, same schema.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..request_columns import REQUEST_COLUMNS
from .columns import text_type

#: Rows per row group: a 12,031-request trace is one group; a million requests are sixteen.
BATCH_ROWS = 65536


def timed_request_schema() -> pa.Schema:
    """Columns of a timed run's requests.parquet, in order (``request_columns.REQUEST_COLUMNS``)."""
    text = text_type()  # as pandas types str: the read-back DataFrame writes the same schema
    types = {"text": text, "float": pa.float64(), "int": pa.int64()}
    return pa.schema([pa.field(name, types[kind]) for name, kind, _ in REQUEST_COLUMNS])


class ParquetRows:
    """Write rows to ``path`` in row groups of ``batch_rows`` (call :meth:`close` at the end)."""

    def __init__(self, path: str | Path, schema: pa.Schema, batch_rows: int = BATCH_ROWS) -> None:
        self.schema = schema
        self.names = schema.names
        self.batch_rows = batch_rows
        self.rows = 0
        self._cols: list[list] = [[] for _ in self.names]
        self._writer = pq.ParquetWriter(str(path), schema)

    def add(self, row: dict) -> None:
        """Buffer one row (its keys are the schema's names); a full batch is written out."""
        for col, name in zip(self._cols, self.names, strict=True):
            col.append(row[name])
        self.rows += 1
        if len(self._cols[0]) >= self.batch_rows:
            self._flush()

    def _flush(self) -> None:
        if not self._cols[0]:
            return
        table = pa.Table.from_arrays(
            [pa.array(col, type=f.type) for col, f in zip(self._cols, self.schema, strict=True)], schema=self.schema
        )
        self._writer.write_table(table)
        self._cols = [[] for _ in self.names]

    def close(self) -> None:
        """Write what is buffered and finish the file."""
        self._flush()
        self._writer.close()
