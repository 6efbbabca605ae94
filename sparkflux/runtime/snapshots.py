"""A store of mini-partition snapshots on any filesystem pyarrow reaches: a local directory,
HDFS, S3, GCS (``pyarrow.fs.FileSystem.from_uri``). Checkpoints write their parts here, and
spilling under memory pressure writes whole partitions here too.

What is stored is typed, never pickled: a partition is a ``StoredPartition`` (its stage, its
partition, the input SN it is cut at, and the same ``PartitionSnapshot`` a catch-up moves),
encoded by the wire's codec (``codec.py``: msgpack with numeric arrays and Arrow tables out
of band) and read back only into that record, under a size limit, so a file that was
tampered with is an error, never code run.

**Writes are asynchronous.** ``put`` takes the encoded pieces at once (the snapshot's
buffers copied, so the operator may go on changing its state) and writes them on the store's
own thread: the caller, a site's event loop, never waits for the disk. It returns a future of
the bytes written.

**Writes are atomic.** On a filesystem with an atomic rename (local, HDFS) a file is written
under a hidden name and renamed into place; on an object store (S3, GCS) an object becomes
visible only once its upload completes, so it is written under its name directly. A reader
therefore sees a whole file or none. A checkpoint's manifest is written the same way, last:
that is what makes the checkpoint complete.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from sparkflux.protocol.messages import StoredPartition
from sparkflux.runtime.codec import DecodeError, decode_message, encode_message

MAX_SNAPSHOT_BYTES = 8 << 30  # the largest snapshot file read back (a corrupt size stops here)
_RENAMES = frozenset({"local", "hdfs", "mock"})  # filesystems whose move is an atomic rename


T = TypeVar("T")


def _ipc(rows: pa.Table | pa.RecordBatch) -> bytes:
    """``rows`` as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as w:
        w.write(rows)
    return sink.getvalue().to_pybytes()


class SnapshotError(ValueError):
    """A stored file that is not what the store writes: missing, too large, or not a
    ``StoredPartition`` (tampered with, or of another format)."""


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and the path in it of ``uri``: a URI with a scheme (``s3://``,
    ``hdfs://``, ``gs://``, ``file://``) or a local path, relative ones made absolute."""
    if "://" not in uri:
        uri = str(Path(uri).expanduser().resolve())
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path.rstrip("/")


class SnapshotStore:
    """Snapshots and small JSON documents under one root (see the module)."""

    def __init__(self, uri: str, max_bytes: int = MAX_SNAPSHOT_BYTES) -> None:
        self.uri = uri
        self.fs, self.root = filesystem(uri)
        self.fs.create_dir(self.root, recursive=True)
        self.max_bytes = max_bytes
        self.atomic_rename = self.fs.type_name in _RENAMES
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sparkflux-snapshots")
        self._lock = threading.Lock()
        self._closed = False

    def path(self, name: str) -> str:
        if name.startswith("/") or ".." in name.split("/"):
            raise ValueError(f"a snapshot name is relative, without '..': {name!r}")
        return f"{self.root}/{name}"

    # -- writing ------------------------------------------------------------------------------
    def put(self, name: str, part: StoredPartition) -> Future[int]:
        """Write ``part`` as ``name`` on the store's thread; the future gives its bytes."""
        pieces = [bytes(p) for p in encode_message(part)]  # copied: the state may change
        return self._submit(name, pieces)

    def put_owned(self, name: str, part: StoredPartition) -> Future[int]:
        """``put`` of a record nobody else holds (a spilled partition's state, dropped from
        its operators): encoded on the store's thread too, so the caller's loop pays
        nothing for it."""
        path = self.path(name)
        return self._call(lambda: self._write(path, [bytes(p) for p in encode_message(part)]))

    def put_json(self, name: str, doc: dict[str, Any]) -> Future[int]:
        """Write a JSON document (a manifest) as ``name``, atomically, on the store's thread."""
        return self._submit(name, [json.dumps(doc, indent=1, sort_keys=True).encode()])

    def put_arrow(self, name: str, table: pa.Table) -> Future[int]:
        """Write ``table`` as an Arrow IPC stream (records, not code) on the store's thread."""
        return self._submit(name, [_ipc(table)])

    def put_arrow_owned(self, name: str, batch: pa.RecordBatch) -> Future[int]:
        """``put_arrow`` of rows nobody else holds (a spilled partition's input, taken from
        its pending rows): encoded on the store's thread too."""
        path = self.path(name)
        return self._call(lambda: self._write(path, [_ipc(batch)]))

    def get_arrow(self, name: str) -> pa.Table:
        """A table ``put_arrow`` wrote (SnapshotError if it is not one), in buffers of the
        memory pool (aligned as Arrow's compute kernels want, unlike slices of the bytes
        read)."""
        body = self._read(name)
        try:
            return pa.ipc.open_stream(pa.BufferReader(body)).read_all()
        except pa.ArrowInvalid as e:
            raise SnapshotError(f"{self.path(name)} is not an Arrow stream: {e}") from e

    def delete_async(self, prefix: str) -> Future[None]:
        """``delete`` on the store's thread, after the writes submitted before it."""
        return self._call(lambda: self.delete(prefix))

    def _submit(self, name: str, pieces: list[bytes]) -> Future[int]:
        path = self.path(name)
        return self._call(lambda: self._write(path, pieces))

    def _call(self, fn: Callable[[], T]) -> Future[T]:
        """``fn`` on the store's thread, after everything submitted before it."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the snapshot store at {self.uri} is closed")
            return self._pool.submit(fn)

    def _write(self, path: str, pieces: list[bytes]) -> int:
        parent = path.rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        target = path
        if self.atomic_rename:
            name = path.rsplit("/", 1)[1]
            target = f"{parent}/.{name}.{secrets.token_hex(4)}.tmp"
        with self.fs.open_output_stream(target) as out:
            for p in pieces:
                out.write(p)
        if target != path:
            self.fs.move(target, path)
        return sum(len(p) for p in pieces)

    # -- reading ------------------------------------------------------------------------------
    def get_async(self, name: str) -> Future[StoredPartition]:
        """``get`` on the writer's thread: after every write submitted before it."""
        return self._call(lambda: self.get(name))

    def get_with_tables_async(self, name: str, tables: list[str]
                              ) -> Future[tuple[StoredPartition, list[pa.Table]]]:
        """``get`` of ``name`` and ``get_arrow`` of each of ``tables``, on the writer's
        thread (after every write submitted before it): a spilled partition and its input."""
        return self._call(lambda: (self.get(name), [self.get_arrow(t) for t in tables]))

    def get(self, name: str) -> StoredPartition:
        """The partition stored as ``name`` (SnapshotError if it is not one)."""
        body = self._read(name)
        try:
            part = decode_message(memoryview(body))
        except DecodeError as e:
            raise SnapshotError(f"{self.path(name)} is not a sparkflux snapshot: {e}") from e
        if not isinstance(part, StoredPartition):
            raise SnapshotError(f"{self.path(name)} holds a {type(part).__name__}, not a "
                                f"partition snapshot")
        return part

    def get_json(self, name: str) -> dict[str, Any]:
        try:
            doc = json.loads(self._read(name))
        except ValueError as e:
            raise SnapshotError(f"{self.path(name)} is not JSON: {e}") from e
        if not isinstance(doc, dict):
            raise SnapshotError(f"{self.path(name)} is not a JSON object")
        return doc

    def _read(self, name: str) -> bytes:
        path = self.path(name)
        info = self.fs.get_file_info(path)
        if info.type != pafs.FileType.File:
            raise SnapshotError(f"no snapshot {path}")
        if info.size is not None and info.size > self.max_bytes:
            raise SnapshotError(f"{path} holds {info.size:,} bytes, more than the "
                                f"{self.max_bytes:,} a snapshot may")
        with self.fs.open_input_stream(path) as f:
            return bytes(f.read())

    def exists(self, name: str) -> bool:
        return bool(self.fs.get_file_info(self.path(name)).type == pafs.FileType.File)

    def list(self, prefix: str = "") -> list[str]:
        """The names directly under ``prefix`` (files and directories), sorted; hidden ones
        (a write in progress) left out."""
        base = self.path(prefix) if prefix else self.root
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        except FileNotFoundError:  # pyarrow may still raise it while the directory is made
            return []
        names = [i.path[len(base) + 1:] for i in infos]
        return sorted(n for n in names if not n.startswith("."))

    def delete(self, prefix: str) -> None:
        """Remove ``prefix`` (a directory with what it holds, or a file); nothing if absent."""
        path = self.path(prefix)
        info = self.fs.get_file_info(path)
        if info.type == pafs.FileType.Directory:
            self.fs.delete_dir(path)
        elif info.type == pafs.FileType.File:
            self.fs.delete_file(path)

    def flush(self) -> None:
        """Wait for every write submitted so far."""
        self._pool.submit(lambda: None).result()

    def close(self) -> None:
        """Finish the writes submitted, then stop the store's thread."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True)
