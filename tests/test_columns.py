"""The pandas-free run path writes what the pandas one wrote: the same parquet bytes as
``write_parquet(pd.DataFrame(lists))``, the same DataFrame, the same rolling hit-rate curve."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from hicache_sim.output.columns import Columns
from hicache_sim.output.plots import _kept, _rolling_sum
from hicache_sim.runner import _write_table, write_parquet

ROWS = {
    "rid": ["a", "", "é-ü 漢字", "nul\x00", "x" * 300],
    "arrival_s": [0.0, 0.5, 1e-9, 3.25, 1e12],
    "prompt_tokens": [1, 0, 2**40, 7, -3],
    "status": ["finished", "rejected", "finished", "finished", "finished"],
}


def _same_file(tmp_path, data: dict) -> tuple[bytes, bytes]:
    write_parquet(pd.DataFrame(data), tmp_path / "pandas.parquet")
    _write_table(Columns(data), tmp_path / "columns.parquet")
    return (tmp_path / "pandas.parquet").read_bytes(), (tmp_path / "columns.parquet").read_bytes()


def test_parquet_bytes_match_the_pandas_route(tmp_path):
    via_pandas, direct = _same_file(tmp_path, ROWS)
    assert direct == via_pandas
    assert pd.read_parquet(tmp_path / "columns.parquet")["rid"].tolist() == ROWS["rid"]  # trailing NUL kept


@pytest.mark.parametrize(
    "extra",
    [
        {"ttft_s": [0.1, math.nan, 0.3, 0.4, 0.5]},  # pandas writes NaN as null
        {"flag": [True, False, True, True, False]},  # bool: left to pandas
        {"mixed": [1, 2.5, 3, 4, 5]},  # ints and floats: float64, as pandas infers
    ],
)
def test_other_columns_match_the_pandas_route(tmp_path, extra):
    via_pandas, direct = _same_file(tmp_path, {**ROWS, **extra})
    assert direct == via_pandas


def test_frame_is_the_dataframe_of_the_lists():
    pd.testing.assert_frame_equal(Columns(ROWS).to_frame(), pd.DataFrame(ROWS))


def test_take_and_rows_of_dicts():
    cols = Columns.from_rows([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, {"a": 3, "b": "z"}])
    assert len(cols) == 3 and cols.names == ["a", "b"]
    part = cols.take(cols["a"] >= 2)
    assert part["b"].tolist() == ["y", "z"] and cols.take(slice(2, None))["a"].tolist() == [3]
    with pytest.raises(ValueError, match="different lengths"):
        Columns({"a": [1], "b": [1, 2]})


@pytest.mark.parametrize("window", [1, 3, 50])
def test_rolling_sum_is_pandas_rolling_sum(window):
    values = np.random.default_rng(0).integers(0, 10_000, size=37)
    expected = pd.Series(values).rolling(window, min_periods=1).sum().to_numpy()
    assert np.array_equal(_rolling_sum(values, window), expected)


@pytest.mark.parametrize("n", [0, 1, 999, 1000, 1001, 12031])
def test_kept_points_are_every_kth_with_both_ends(n):
    keep = _kept(n).tolist()
    step = max(1, -(-n // 1000))
    assert keep[: len(range(0, n, step))] == list(range(0, n, step))
    assert (not n) or keep[-1] == n - 1
