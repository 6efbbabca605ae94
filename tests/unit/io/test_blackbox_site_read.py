"""Black-box tests, without Spark, of the options of sources read on the sites, written from
the README ("Sources and sinks") and docs/ingress-on-executors.md alone: each limit is
"refused or reported with what to change". These are refused before anything runs: at
construction, or at the latest when the source is put in a dataflow."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sparkflux.dataflow.api import Dataflow
from sparkflux.io import FileStreamSource

KVT = pa.schema([
    pa.field("k", pa.int32(), nullable=False),
    pa.field("v", pa.int64(), nullable=False),
    pa.field("ts", pa.int64(), nullable=False),
])


def _refused(make: Callable[[], Any], words: tuple[str, ...]) -> str:
    with pytest.raises(Exception) as err:  # the type is not documented
        df = Dataflow("probe")
        df.source(make(), name="in").exchange(by=["k"]).sink(name="out")
    message = str(err.value)
    for w in words:
        assert w.lower() in message.lower(), f"{w!r} not in {message!r}"
    return message


def test_json_lines_cannot_be_read_on_the_sites(tmp_path: Path) -> None:
    """"Parquet only: JSON lines have no footer to count rows from (read_on="driver" reads
    them)"."""
    _refused(lambda: FileStreamSource(tmp_path, KVT, format="json", event_time="ts",
                                      read_on="sites"), ("parquet", "read_on", "driver"))


def test_read_on_must_be_driver_or_sites(tmp_path: Path) -> None:
    message = _refused(lambda: FileStreamSource(tmp_path, KVT, event_time="ts", read_on="x"),
                       ("read_on", "driver", "sites"))
    assert "'x'" in message or '"x"' in message, message


@pytest.mark.parametrize("rows", [0, -1])
def test_chunk_rows_must_be_positive(tmp_path: Path, rows: int) -> None:
    _refused(lambda: FileStreamSource(tmp_path, KVT, event_time="ts", read_on="sites",
                                      chunk_rows=rows), ("chunk_rows", str(rows)))


def test_the_defaults_read_on_the_driver_and_accept_parquet_on_the_sites(tmp_path: Path) -> None:
    """read_on defaults to the driver (JSON is accepted there), and a Parquet source read on
    the sites with any positive chunk_rows is a valid source of a dataflow."""
    for source in (FileStreamSource(tmp_path, KVT, format="json", event_time="ts"),
                   FileStreamSource(tmp_path, KVT, event_time="ts", read_on="sites"),
                   FileStreamSource(tmp_path, KVT, event_time="ts", read_on="sites",
                                    chunk_rows=1)):
        df = Dataflow("ok")
        df.source(source, name="in").exchange(by=["k"]).sink(name="out")
