"""A table as named columns of equal length: what an instant run's summary, figures and parquet files
are built from without importing pandas (about a quarter of a second of a run's start-up).

Columns hold the Python lists a run appends to (or the arrays of a DataFrame); each is turned into a
numpy array once, when first read. ``to_frame`` gives the DataFrame that ``pd.DataFrame`` of the same
lists gives, and ``to_arrow`` the table ``pa.Table.from_pandas`` of that DataFrame gives (same types,
same parquet bytes), built with pyarrow directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa


def text_type() -> pa.DataType:
    """The arrow type pandas gives a column of str: large_string under pandas 3 (its str dtype), string
    before. Read from the installed version, so that writing a table needs no pandas import."""
    import pyarrow as pa

    return pa.large_string() if int(version("pandas").split(".")[0]) >= 3 else pa.string()


def as_columns(table: Columns | pd.DataFrame) -> Columns:
    """``table`` as Columns (a DataFrame is wrapped, not copied): readers take either."""
    return table if isinstance(table, Columns) else Columns.from_frame(table)


class Columns:
    """Named columns of one length, in order; ``len`` is the number of rows (not of columns)."""

    def __init__(self, data: dict[str, Sequence[Any]], frame: pd.DataFrame | None = None) -> None:
        self._data = dict(data)
        self._arrays: dict[str, np.ndarray] = {}
        self._frame = frame
        lengths = {len(v) for v in self._data.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths: {sorted(lengths)}")
        self._rows = lengths.pop() if lengths else 0

    @classmethod
    def from_rows(cls, rows: Sequence[dict]) -> Columns:
        """Columns of a list of dicts with the same keys (the first row's order), as ``pd.DataFrame(rows)``."""
        names = list(rows[0]) if rows else []
        return cls({n: [r[n] for r in rows] for n in names})

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> Columns:
        """The columns of a DataFrame (kept: :meth:`to_frame` and :meth:`to_arrow` give it back as is)."""
        return cls({c: df[c].to_numpy() for c in df.columns}, frame=df)

    @property
    def names(self) -> list[str]:
        return list(self._data)

    def __len__(self) -> int:
        return self._rows

    def __contains__(self, name: object) -> bool:
        return name in self._data

    def __getitem__(self, name: str) -> np.ndarray:
        a = self._arrays.get(name)
        if a is None:
            values = self._data[name]
            a = values if isinstance(values, np.ndarray) else np.asarray(values)
            self._arrays[name] = a
        return a

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self._data else default

    def take(self, rows: slice | np.ndarray | Iterable[int]) -> Columns:
        """The rows ``rows`` selects (a slice, a boolean mask or positions), every column."""
        if not isinstance(rows, slice | np.ndarray):
            rows = np.asarray(list(rows), dtype=np.int64)
        return Columns({n: self[n][rows] for n in self._data})

    def to_frame(self) -> pd.DataFrame:
        """The DataFrame of these columns (imports pandas)."""
        if self._frame is None:
            import pandas as pd

            self._frame = pd.DataFrame(self._data)
        return self._frame

    def to_arrow(self) -> pa.Table:
        """The arrow table of these columns, without schema metadata: what ``pa.Table.from_pandas`` of
        :meth:`to_frame` gives. int64, float64 and str columns are built from their buffers (``pa.array``
        imports pandas); any other column, or a float column holding NaN (pandas makes it null), goes
        through pandas."""
        import pyarrow as pa

        arrays = None if self._frame is not None or not self._rows else _arrays(self)
        if arrays is None:
            return pa.Table.from_pandas(self.to_frame(), preserve_index=False).replace_schema_metadata(None)
        return pa.Table.from_arrays(arrays, names=self.names)


def _arrays(cols: Columns) -> list[pa.Array] | None:
    """Arrow arrays of every column, or None when one is of a type built here only through pandas."""
    arrays = []
    for name in cols.names:
        a = _array(cols[name], cols._data[name])
        if a is None:
            return None
        arrays.append(a)
    return arrays


def _array(a: np.ndarray, raw: Sequence[Any]) -> pa.Array | None:
    """One column as arrow (str from ``raw``, its values as given: numpy's str arrays drop trailing NULs)."""
    import pyarrow as pa

    n = len(a)
    if a.dtype == np.int64 or (a.dtype == np.float64 and not np.isnan(a).any()):
        arrow = pa.int64() if a.dtype == np.int64 else pa.float64()
        return pa.Array.from_buffers(arrow, n, [None, pa.py_buffer(np.ascontiguousarray(a))])
    if a.dtype.kind == "U":
        text = text_type()
        data = [v.encode("utf-8") for v in (raw if isinstance(raw, list) else a.tolist())]
        offsets = np.zeros(n + 1, dtype=np.int64 if text == pa.large_string() else np.int32)
        np.cumsum([len(b) for b in data], out=offsets[1:])
        return pa.Array.from_buffers(text, n, [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])
    return None
