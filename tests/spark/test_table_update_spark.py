"""The update-mode table as Spark reads it (``spark.read.parquet``): one row per user with its
latest count while snapshots are published, though superseded ones are still in the
directory (Spark follows the ``_spark_metadata`` log); a DataFrame listed before a publish
still reads the snapshot it listed; after the end, one row per user with the final counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkflux.io import TableSink
from tests.unit.io.test_table_update import SCHEMA, USERS, expected, running_counts

pytestmark = pytest.mark.spark


def spark_rows(df: Any) -> dict[str, int]:
    rows = df.select("user", "n").collect()
    users = [r["user"] for r in rows]
    assert len(users) == len(set(users)), "a key twice"
    return {r["user"]: r["n"] for r in rows}


def test_spark_reads_one_row_per_key_while_and_after_snapshots_are_published(
        spark: Any, tmp_path: Path) -> None:
    rows, users = running_counts(40_000)
    sink = TableSink(tmp_path, mode="update", key=["user"], flush_interval=0.0)
    sink.open(SCHEMA)
    listed = None
    for i, at in enumerate(range(0, 40_000, 10_000)):
        sink.write(rows.slice(at, 10_000))
        df = spark.read.parquet(str(tmp_path))
        assert len(list(tmp_path.glob("snapshot-*.parquet"))) == i + 1  # all still there
        assert spark_rows(df) == expected(users[:at + 10_000])
        if i == 1:
            listed = df  # listed at the second snapshot, read after two more publishes
    assert listed is not None and spark_rows(listed) == expected(users[:20_000])
    sink.close()
    final = spark.read.parquet(str(tmp_path))
    assert final.count() == USERS and spark_rows(final) == expected(users)
    assert len(list(tmp_path.glob("snapshot-*.parquet"))) == 1
