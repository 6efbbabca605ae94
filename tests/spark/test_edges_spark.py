"""Issue 27's edges on Spark local mode, each small: nothing is lost without a dead letter or
an error naming it.

- A value that does not fit its column exactly (a fraction, a string, a bool, an overflow)
  is a dead letter with its reason: rows in = rows out + dead letters.
- A JSON file truncated while the driver reads it stops the run with an error naming the
  file and the records of it handed over; one deleted while read, with a malformed line
  near its end, is read to its end and the run goes on to the next file.
- A SIGKILL of ``sparkflux run``'s driver (the Python driver alone, or with its JVM: the
  command's process group) leaves no site process and no listening port of the run within a
  few seconds, and ``--output`` readable by pyarrow and Spark, with every dead-letter line
  whole.
- A paced (push) source whose buffer fills says so when its drops begin and end, with counts
  that add up to ``ingress_dropped``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sparkflux
from sparkflux import RunFailed
from sparkflux.dataflow.api import Dataflow
from sparkflux.io import FileStreamSource, foreach_batch
from sparkflux.runtime import netcut, proctree
from tests.conftest import ROOT

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([pa.field("k", pa.int32(), nullable=False),
                    pa.field("v", pa.int64(), nullable=False),
                    pa.field("x", pa.float32()),
                    pa.field("ts", pa.int64(), nullable=False)])


def flow(source: FileStreamSource) -> Dataflow:
    df = Dataflow("edges")
    df.source(source, name="in").exchange(by=["k"]).sink(name="out")
    return df


def land(inbox: Path, name: str, lines: list[str]) -> None:
    tmp = inbox / f".{name}.tmp"
    tmp.write_text("".join(line + "\n" for line in lines))
    os.replace(tmp, inbox / name)


def good(start: int, n: int) -> list[str]:
    return [json.dumps({"k": v % 7, "v": v, "x": v / 4, "ts": v}) for v in range(start, start + n)]


def run(source: FileStreamSource, tmp_path: Path, spark: Any
        ) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
    """(the query, the output rows, the dead letters) of ``flow(source)``."""
    rows: list[dict[str, Any]] = []
    dead = tmp_path / "dead.jsonl"
    query = sparkflux.start(flow(source), spark=spark,
                            sink=foreach_batch(lambda b, lo, hi: rows.extend(b.to_pylist())),
                            dead_letter=dead, sites=2, partitions=4, ha="none", announce=None)
    try:
        query.await_termination(90)
    except RunFailed:
        pass
    letters = ([json.loads(line) for line in dead.read_text().splitlines()]
               if dead.exists() else [])
    return query, rows, letters


def test_values_that_do_not_fit_their_column_are_dead_letters(spark: Any,
                                                               tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    bad = {'"v": 1.5': "1.5 is not of type int64: not a whole number",
           '"v": "7"': "'7' is not of type int64: a string, not an integer",
           '"v": true': "True is not of type int64: a bool, not an integer",
           '"v": 9223372036854775808': "9223372036854775808 is not of type int64",
           '"x": 1e300': "1e+300 is not of type float: beyond the range of float",
           '"k": 3000000000': "3000000000 is not of type int32"}
    lines = good(0, 3000)
    for i, field in enumerate(bad):
        name = field.split(":")[0].strip('"')
        record = {"k": 1, "v": 10_000 + i, "x": 0.5, "ts": 3000 + i}
        text = json.dumps(record).replace(f'"{name}": {json.dumps(record[name])}', field)
        lines.insert(500 * (i + 1), text)
    land(inbox, "a.jsonl", lines)
    land(inbox, "b.jsonl", good(3000, 1000))
    source = FileStreamSource(inbox, SCHEMA, format="json", event_time="ts", lateness=10_000,
                              max_files=2)
    query, rows, letters = run(source, tmp_path, spark)
    assert query.exception() is None
    assert len(rows) + len(letters) == len(lines) + 1000  # every record accounted for
    assert sorted(r["v"] for r in rows) == list(range(4000))
    reasons = [letter["reason"] for letter in letters]
    assert len(reasons) == len(bad)
    for reason, want in zip(reasons, bad.values(), strict=True):
        assert want in reason, (reason, want)
    assert query.metrics["dead_letters"] == len(bad)


class Changing(FileStreamSource):
    """A file-stream source that, once it has handed over its first batch of ``victim``,
    calls ``change(path)``: a reader's file changing under it, at a known point."""

    def __init__(self, *args: Any, victim: str, change: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.victim, self.change, self.changed = victim, change, False

    def batches(self) -> Iterator[Any]:
        for item in super().batches():
            yield item
            if not self.changed and self.position().file == self.victim:
                self.changed = True
                self.change(self.path / self.victim)


def test_a_file_truncated_while_read_stops_the_run_naming_it(spark: Any,
                                                             tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    land(inbox, "a.jsonl", good(0, 20_000))
    land(inbox, "b.jsonl", good(20_000, 1000))
    size = (inbox / "a.jsonl").stat().st_size
    source = Changing(inbox, SCHEMA, format="json", event_time="ts", batch_size=2000,
                      max_files=2, victim="a.jsonl",
                      change=lambda p: os.truncate(p, size // 3))
    query, rows, letters = run(source, tmp_path, spark)
    error = str(query.exception())
    assert isinstance(query.exception(), RunFailed), error
    assert f"FileChanged: file {inbox / 'a.jsonl'} changed while it was read: truncated " \
           f"from {size:,} to {size // 3:,} bytes. 2,000 of its records were handed over" \
           in error, error
    assert "FilePosition('a.jsonl', 2000)" in error
    assert len(rows) <= 2000 and letters == []  # nothing of the rest, nothing of b.jsonl


def test_a_file_deleted_while_read_is_read_whole_and_the_run_goes_on(
        spark: Any, tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    lines = good(0, 40_000)  # 1.8 MiB: pyarrow reads it in blocks of 1 MiB
    lines.insert(39_990, '{"k": 1, "v": ')  # malformed, near the end: found in the last block
    land(inbox, "a.jsonl", lines)
    assert (inbox / "a.jsonl").stat().st_size > 1 << 20
    land(inbox, "b.jsonl", good(40_000, 1000))
    source = Changing(inbox, SCHEMA, format="json", event_time="ts", batch_size=2000,
                      max_files=2, victim="a.jsonl", change=lambda p: p.unlink())
    query, rows, letters = run(source, tmp_path, spark)
    assert query.exception() is None, query.exception()
    assert not (inbox / "a.jsonl").exists() and source.changed
    assert sorted(r["v"] for r in rows) == list(range(41_000))
    assert [letter["record"]["line"] for letter in letters] == [39_991]
    assert letters[0]["reason"].startswith("malformed JSON line: file a.jsonl line 39991")
    assert len(rows) + len(letters) == len(lines) + 1000


# -- a SIGKILLed driver leaves nothing behind -----------------------------------------------

def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            parent = proctree.parent(int(d.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for its reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def socket_inodes(pid: int) -> set[int]:
    """The inodes of ``pid``'s open sockets (none if it is gone meanwhile)."""
    inodes: set[int] = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def listening_sockets() -> set[int]:
    """The inodes of every listening TCP socket: a port that another test binds after the
    kill (the Spark UI's and the dashboard's ranges are shared) is a new socket, a new inode."""
    inodes: set[int] = set()
    for name in ("tcp", "tcp6"):
        path = Path("/proc/net") / name
        if path.exists():
            for line in path.read_text().splitlines()[1:]:
                cols = line.split()
                if cols[3] == "0A":  # LISTEN
                    inodes.add(int(cols[9]))
    return inodes


@pytest.mark.parametrize("target", ["driver", "group"])
def test_a_sigkilled_driver_leaves_no_site_no_port_and_a_readable_output(
        spark: Any, tmp_path: Path, target: str) -> None:
    """``driver``: SIGKILL to the Python driver alone (its JVM then sees its stdin close);
    ``group``: to the command's process group, the driver and its JVM at once (the sites'
    ``pyspark.daemon`` has a group of its own, so they are not hit directly)."""
    out = tmp_path / "out.parquet"
    cmd = [sys.executable, "-m", "sparkflux.cli", "run", str(ROOT / "examples" / "netmon.py"),
           "--events", "2000000", "--rate", "100000", "--sites", "2", "--partitions", "8",
           "--ha", "flux", "--no-progress", "--bad-every", "500", "--output", str(out)]
    lines: list[str] = []
    started = threading.Event()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          cwd=tmp_path, start_new_session=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}) as proc:
        assert proc.stdout is not None

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if "input started" in line:
                    started.set()

        threading.Thread(target=read, daemon=True).start()
        assert started.wait(120), "".join(lines)
        deadline = time.monotonic() + 60  # until a part with rows is published (the first
        while not (out / "part-00000001.parquet").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # holds the columns only)
        assert (out / "part-00000001.parquet").exists(), "".join(lines)
        tree = descendants(proc.pid)
        sites = [p for p in tree if proctree.is_site_process(p)]
        ports: set[int] = set()
        for p in [proc.pid, *tree]:
            try:
                ports |= {e.port for e in netcut.process_sockets(p).listening}
            except netcut.NetcutError:
                pass  # gone meanwhile
        assert sites and ports, (tree, ports)
        mine = {inode for p in [proc.pid, *tree] for inode in socket_inodes(p)}
        mine &= listening_sockets()
        if target == "driver":
            os.kill(proc.pid, signal.SIGKILL)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
        killed = time.monotonic()
        while time.monotonic() - killed < 5 and (
                any(alive(p) for p in tree) or mine & listening_sockets()):
            time.sleep(0.1)
    left = {p: " ".join(proctree.cmdline(p))[:120] for p in tree if alive(p)}
    assert left == {}, left
    assert mine & listening_sockets() == set(), ports
    table = pq.read_table(out)
    assert table.num_rows > 0
    sn = table.column("_sn").to_pylist()
    assert sn == sorted(sn)  # a prefix of the ordered output, whole parts only
    assert spark.read.parquet(str(out)).count() == table.num_rows
    whole = [p.name for p in out.iterdir() if not p.name.startswith(".")]
    assert all(pq.read_metadata(out / n) for n in whole)
    dead = tmp_path / "out.dead-letter.jsonl"
    text = dead.read_text()
    assert text.endswith("\n") and all(json.loads(line)["reason"] for line in text.splitlines())


def test_a_push_sources_drops_are_logged_with_their_counts(tmp_path: Path) -> None:
    """Sites held to a tenth of a core with a small window and buffer: admission is held back
    and the paced source drops. The terminal says when drops begin and end; their counts add
    up to ``ingress_dropped``, and admitted + dropped = the input."""
    events = 150_000
    cmd = [sys.executable, "-m", "sparkflux.cli", "run", str(ROOT / "examples" / "netmon.py"),
           "--events", str(events), "--rate", "100000", "--sites", "2", "--partitions", "4",
           "--ha", "none", "--ingress-buffer", "5000", "--window", "5000", "--site-cpu", "0.1",
           "--no-progress", "--metrics", str(tmp_path / "m.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["ingress_dropped"] > 0 and m["input_tuples"] + m["ingress_dropped"] == events
    began = [line for line in out.splitlines() if "input dropped: the ingress buffer is full "
             "(5,000 records, --ingress-buffer) and the push source sends 100,000" in line]
    ended = [line.split("): ", 1)[1].split(" records dropped over ")[0]
             for line in out.splitlines() if "input no longer dropped (" in line]
    assert len(began) == len(ended) >= 1, out[-3000:]
    assert sum(int(n.replace(",", "")) for n in ended) == m["ingress_dropped"]
