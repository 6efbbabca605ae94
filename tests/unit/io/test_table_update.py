"""The table sink's update mode (``sparkflux/io/table_update.py``): a running count per user,
80,000 output rows for 500 users, read back as one row per user with the latest count, whole
snapshots published on the poll and committed to Spark's ``_spark_metadata`` log, superseded
ones retired after their grace, a restart that goes on from the table's state (and finishes
or undoes what a crash left), and settings refused with what to change."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sparkflux.io.table_update as table_update
from sparkflux.io import TableSink
from sparkflux.io.table_update import LOG, snapshot_file
from sparkflux.model.schema import with_system

USERS, ROWS = 500, 80_000
USER = [pa.field("user", pa.string()), pa.field("n", pa.int64())]
SCHEMA = pa.schema([*with_system(USER), pa.field("_part", pa.int32())])


def running_counts(rows: int = ROWS, seed: int = 5) -> tuple[pa.RecordBatch, np.ndarray]:
    """What a running count per user delivers (one row per click, SN order, sparse SNs), and
    the users of the clicks."""
    rng = np.random.default_rng(seed)
    users = rng.integers(0, USERS, rows)
    seen = np.zeros(USERS, dtype=np.int64)
    n = np.empty(rows, dtype=np.int64)
    for i, u in enumerate(users):  # the running count, plainly
        seen[u] += 1
        n[i] = seen[u]
    sn = np.cumsum(rng.integers(1, 4, rows))
    batch = pa.RecordBatch.from_arrays(
        [pa.array([f"u{u:03d}" for u in users]), pa.array(n), pa.array(sn),
         pa.array(np.zeros(rows, dtype=np.int64)), pa.array(np.full(rows, 1.5)),
         pa.array(np.zeros(rows, dtype=np.int32))], schema=SCHEMA)
    return batch, users


def expected(users: np.ndarray) -> dict[str, int]:
    """The latest count of every user after ``users``' clicks: how many it made."""
    counts = np.bincount(users, minlength=USERS)
    return {f"u{u:03d}": int(c) for u, c in enumerate(counts) if c}


def deliveries(rows: pa.RecordBatch, seed: int, most: int = 3_000) -> list[pa.RecordBatch]:
    rnd = random.Random(seed)
    out, at = [], 0
    while at < rows.num_rows:
        n = rnd.randint(0, most)
        out.append(rows.slice(at, n))
        at += n
    return out


def one_row_per_key(table: pa.Table) -> dict[str, int]:
    users = table.column("user").to_pylist()
    assert len(users) == len(set(users)), "a key twice"
    return dict(zip(users, table.column("n").to_pylist(), strict=True))


def current(path: Path) -> dict[str, int]:
    """What a reader following the log sees now."""
    file = snapshot_file(path)
    assert file is not None
    return one_row_per_key(pq.read_table(file))


def sink(path: Path, **kw: object) -> TableSink:
    s = TableSink(path, mode="update", key=["user"], **kw)  # type: ignore[arg-type]
    s.open(SCHEMA)
    return s


def test_a_running_count_reads_back_as_one_row_per_user_with_its_latest_count(
        tmp_path: Path) -> None:
    rows, users = running_counts()
    s = sink(tmp_path, flush_interval=0.0)
    done = 0
    for b in deliveries(rows, 1):
        s.write(b)
        done += b.num_rows
        if s.files_written:  # every write publishes (flush_interval 0): the state so far
            assert current(tmp_path) == expected(users[:done])
    s.close()
    table = pq.read_table(tmp_path)  # any Parquet reader, once the sink has closed
    assert table.num_rows == USERS and table.column_names == ["user", "n", "_sn", "_snm"]
    assert one_row_per_key(table) == expected(users)
    last_sn = {}
    for u, sn in zip(rows.column("user").to_pylist(), rows.column("_sn").to_pylist(),
                     strict=True):
        last_sn[u] = sn
    assert dict(zip(table.column("user").to_pylist(), table.column("_sn").to_pylist(),
                    strict=True)) == last_sn  # each key's row is its last update
    assert table.column("user").to_pylist() == sorted(expected(users))  # ordered by key
    assert [p.name for p in tmp_path.glob("snapshot-*")] == [snapshot_file(tmp_path).name]
    assert sorted(p.name for p in (tmp_path / LOG).iterdir()) == [
        f"{s.files_written - 1}.compact"]


def test_the_log_entry_names_the_snapshot_as_spark_reads_it(tmp_path: Path) -> None:
    rows, _ = running_counts(2_000)
    s = sink(tmp_path, flush_interval=0.0)
    s.write(rows)
    text = (tmp_path / LOG / "0.compact").read_text()
    version, line = text.split("\n")
    entry = json.loads(line)
    file = tmp_path / "snapshot-0000000000000000000.parquet"
    assert version == "v1" and entry["path"] == file.resolve().as_uri()
    assert entry["size"] == file.stat().st_size and entry["action"] == "add"
    assert not entry["isDir"] and set(entry) == {
        "path", "size", "isDir", "modificationTime", "blockReplication", "blockSize",
        "action"}


def test_the_poll_publishes_held_rows_once_they_have_waited(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(table_update.time, "monotonic", lambda: now[0])
    rows, users = running_counts(3_000)
    s = sink(tmp_path, flush_interval=1.0)
    s.write(rows.slice(0, 1_000))
    s.poll()
    assert snapshot_file(tmp_path) is None  # held: not a second yet
    now[0] += 0.5
    s.write(rows.slice(1_000, 1_000))  # the oldest held row's wait counts
    now[0] += 0.49
    s.poll()
    assert snapshot_file(tmp_path) is None
    now[0] += 0.02
    s.poll()  # no write came: the poll publishes
    assert current(tmp_path) == expected(users[:2_000]) and s.files_written == 1
    s.poll()
    assert s.files_written == 1  # nothing held, nothing published
    s.write(rows.slice(2_000))
    s.close()  # the end publishes what is held
    assert s.files_written == 2 and current(tmp_path) == expected(users)


def test_without_a_flush_interval_only_the_end_publishes(tmp_path: Path) -> None:
    rows, users = running_counts(5_000)
    s = sink(tmp_path, flush_interval=None)
    for b in deliveries(rows, 2, most=500):
        s.write(b)
        s.poll()
    assert snapshot_file(tmp_path) is None
    s.close()
    assert s.files_written == 1 and current(tmp_path) == expected(users)


def test_a_superseded_snapshot_stays_for_its_readers_then_goes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Spark reader that read the log before a publish reads the snapshot it named: that
    file stays, unchanged, ``retain_superseded`` seconds after it was superseded."""
    wall = [1_000.0]
    monkeypatch.setattr(table_update.time, "time", lambda: wall[0])
    rows, _ = running_counts(3_000)
    s = sink(tmp_path, flush_interval=0.0, retain_superseded=30.0)
    s.write(rows.slice(0, 1_000))
    first = snapshot_file(tmp_path)
    assert first is not None
    size = first.stat().st_size
    wall[0] += 5
    s.write(rows.slice(1_000, 1_000))  # supersedes the first at 1005
    assert snapshot_file(tmp_path) != first and first.stat().st_size == size
    wall[0] += 29.9
    s.poll()
    assert first.exists() and (tmp_path / LOG / "0.compact").exists()
    wall[0] += 0.2
    s.poll()
    assert not first.exists() and not (tmp_path / LOG / "0.compact").exists()
    assert (tmp_path / LOG / "1.compact").exists()
    s.write(rows.slice(2_000))
    s.close()  # the end retires every superseded snapshot at once
    assert [p.name for p in tmp_path.glob("snapshot-*")] == [snapshot_file(tmp_path).name]


def test_a_restart_goes_on_from_the_table_and_never_shows_it_going_back(
        tmp_path: Path) -> None:
    """The writer dies after some publishes, in the middle of one; a rerun delivers the
    same output from the start. The crash's leftovers go, the rows the table already holds
    are skipped, and every state a reader sees is at least the one before the crash."""
    rows, users = running_counts()
    first = sink(tmp_path, flush_interval=0.0)
    done = 0
    for b in deliveries(rows, 3)[:20]:
        first.write(b)
        done += b.num_rows
    before = current(tmp_path)
    assert before == expected(users[:done])
    # the crash: held rows lost; a snapshot renamed into place but not committed; a temp file
    latest = snapshot_file(tmp_path)
    assert latest is not None
    orphan = tmp_path / "snapshot-0000000000000009999.parquet"
    orphan.write_bytes(latest.read_bytes())
    (tmp_path / ".snapshot-0000000000000010000.parquet.tmp").write_bytes(b"half")
    (tmp_path / LOG / ".77.compact.tmp").write_bytes(b"v1\n")

    again = sink(tmp_path, flush_interval=0.0)
    assert not orphan.exists() and not list(tmp_path.glob("**/.*.tmp"))
    taken = 0
    for b in deliveries(rows, 4):  # the rerun cuts the output otherwise
        again.write(b)
        taken += b.num_rows
        now = current(tmp_path)
        assert all(now[u] >= n for u, n in before.items())  # never back
        if taken <= done:
            assert again.files_written == 0  # rows the table holds: skipped, nothing new
    again.close()
    table = pq.read_table(tmp_path)
    assert table.num_rows == USERS and one_row_per_key(table) == expected(users)


def test_a_rerun_over_what_the_table_holds_publishes_nothing(tmp_path: Path) -> None:
    rows, users = running_counts(4_000)
    first = sink(tmp_path, flush_interval=0.0, sequence_columns=False)
    first.write(rows)
    first.close()
    again = sink(tmp_path, flush_interval=0.0, sequence_columns=False)  # the mark: metadata
    for b in deliveries(rows, 5, most=400):
        again.write(b)
    again.close()
    assert again.files_written == 0
    table = pq.read_table(tmp_path)
    assert table.column_names == ["user", "n"] and one_row_per_key(table) == expected(users)


def test_an_empty_output_leaves_an_empty_table_with_its_columns(tmp_path: Path) -> None:
    s = sink(tmp_path)
    s.close()
    table = pq.read_table(tmp_path)
    assert table.num_rows == 0 and table.column_names == ["user", "n", "_sn", "_snm"]


@pytest.mark.parametrize("kw,match", [
    ({"mode": "upsert"}, r"mode='upsert': give mode='append' \(every row\) or mode='update'"),
    ({"mode": "update"}, r"give key= a list of column names, e.g. key=\['user'\] \(got None\)"),
    ({"mode": "update", "key": "user"}, r"e.g. key=\['user'\] \(got 'user'\)"),
    ({"mode": "update", "key": []}, r"give key= a list of column names"),
    ({"key": ["user"]}, r"key=\['user'\] is for mode='update'.*drop key=, or add mode='update'"),
    ({"mode": "update", "key": ["user"], "retain_superseded": -1}, r"retain_superseded"),
    ({"flush_interval": -1.0}, r"flush_interval must be >= 0"),
])
def test_bad_settings_say_what_to_change(tmp_path: Path, kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TableSink(tmp_path, **kw)


def test_an_unknown_key_column_fails_at_open_naming_the_columns(tmp_path: Path) -> None:
    s = TableSink(tmp_path, mode="update", key=["usr"])
    with pytest.raises(ValueError, match=r"no column 'usr' \(its columns: user, n\); name the "
                                         r"key among them"):
        s.open(SCHEMA)
    assert not (tmp_path / "_sparkflux_table.json").exists()  # nothing written


def test_a_table_of_other_settings_is_refused(tmp_path: Path) -> None:
    s = sink(tmp_path / "update")
    s.write(running_counts(100)[0])
    s.close()
    with pytest.raises(ValueError, match=r"key=\['user'\]: a sink with key=\['n'\] would fold"):
        TableSink(tmp_path / "update", mode="update", key=["n"])
    with pytest.raises(ValueError, match=r"written in mode='update', key=\['user'\]: a sink "
                                         r"in mode='append' would mix"):
        TableSink(tmp_path / "update")
    append = TableSink(tmp_path / "append")
    append.open(SCHEMA)
    append.close()
    with pytest.raises(ValueError, match=r"written in mode='append': a sink in mode='update'"):
        TableSink(tmp_path / "append", mode="update", key=["user"])


def test_other_columns_in_a_reopened_table_are_refused(tmp_path: Path) -> None:
    s = sink(tmp_path)
    s.write(running_counts(100)[0])
    s.close()
    other = with_system([pa.field("user", pa.string()), pa.field("n", pa.float64())])
    with pytest.raises(ValueError, match=r"holds the columns \['user', 'n', '_sn', '_snm'\] "
                                         r"\(string, int64.*give the sink a new directory"):
        TableSink(tmp_path, mode="update", key=["user"]).open(other)
