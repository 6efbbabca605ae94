"""Typed encoding of the wire's non-row messages: msgpack plus out-of-band binary buffers.

Nothing received is unpickled or executed (docs/design.md §7). A message is one of the registered
frozen dataclasses (control messages, catch-up messages); it is written as a msgpack array
``[tag, field values...]`` and read back only into the class registered under that tag, each
field checked against its declared type. Some registered records travel only inside a message
(``PARTS``: a view's members, a ``State``'s partition and FH-Cons snapshots), never as one.
Field values are plain: None, bool, int, float, str, bytes, lists, dicts, registered records,
and two kinds of binary data that travel out of band (their bytes go to the socket as they
are, after the msgpack body):

- numpy arrays of a numeric or boolean dtype (``dtype.str``, shape, buffer index): an array of
  any other dtype (``object`` above all) is refused on both ends;
- Arrow tables and record batches, in Arrow's IPC stream format (schema and data, no code:
  an extension type that would need a Python class to load is refused).

An operator's partition state (``get_partition_state``) must be made of these; one that is not
fails on the sending site with an ``EncodeError`` naming what it found, rather than travel in a
format that can run code on load.

Frame body layout: ``u32 n | u64 sizes[n + 1] | msgpack body | buffer 0 | ... | buffer n-1``.
"""

from __future__ import annotations

import struct
import types
import typing
from dataclasses import fields
from typing import Any

import msgpack
import numpy as np
import pyarrow as pa

from sparkflux.protocol import control_messages as cm
from sparkflux.protocol import messages as pm

EXT_NDARRAY = 1
EXT_TABLE = 2
EXT_BATCH = 3
EXT_RECORD = 4
_ALLOWED_KINDS = frozenset("biuf")  # bool, signed and unsigned integers, floats
MAX_BUFFERS = 1 << 20

# Tags are part of the wire format: never renumber, only append.
REGISTRY: tuple[type, ...] = (
    pm.CuStart, pm.Retain, pm.Retaining, pm.State, pm.Installed, pm.PSync, pm.Rejoin,
    pm.CuDone,
    cm.OpenControl, cm.Register, cm.Ready, cm.Heartbeat, cm.Moved, cm.SiteError,
    cm.Unreachable, cm.Member, cm.View, cm.Standby, cm.Adopt, cm.Avail, cm.Fail, cm.Move,
    cm.Slow, cm.Kill, cm.Stop,
    pm.ConsumerSnapshot, pm.PartitionSnapshot,
    cm.StartFailed, pm.Keepalive, cm.Folded, pm.StoredPartition, pm.Cut, cm.PartStored,
    cm.Squeeze, pm.Tentative, pm.Reconciled, pm.Rejoined, pm.Probe, pm.Echo,
)
# Records that are fields of a message, not messages: refused as a whole frame on both ends.
PARTS: frozenset[type] = frozenset({cm.Member, pm.ConsumerSnapshot, pm.PartitionSnapshot})
_TAG = {cls: i + 1 for i, cls in enumerate(REGISTRY)}
_CLS = {i + 1: cls for i, cls in enumerate(REGISTRY)}


class EncodeError(TypeError):
    """A value the typed wire format cannot carry (it would need pickle)."""


class DecodeError(ValueError):
    """A frame that is not a valid encoding of a registered message."""


# -- encoding ----------------------------------------------------------------------------------
class _Writer:
    def __init__(self) -> None:
        self.buffers: list[memoryview] = []

    def _buffer(self, data: Any) -> int:
        self.buffers.append(memoryview(data).cast("B"))
        return len(self.buffers) - 1

    def default(self, obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            if obj.dtype.kind not in _ALLOWED_KINDS:
                raise EncodeError(f"a numpy array of dtype {obj.dtype} cannot go on the wire "
                                  f"(only booleans, integers and floats)")
            arr = np.ascontiguousarray(obj)
            idx = self._buffer(arr.view(np.uint8).reshape(-1) if arr.size else b"")
            return msgpack.ExtType(EXT_NDARRAY, msgpack.packb(
                [arr.dtype.str, list(arr.shape), idx]))
        if isinstance(obj, (pa.Table, pa.RecordBatch)):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, obj.schema) as w:
                w.write(obj)
            idx = self._buffer(sink.getvalue())
            return msgpack.ExtType(EXT_TABLE if isinstance(obj, pa.Table) else EXT_BATCH,
                                   msgpack.packb(idx))
        if isinstance(obj, np.generic):
            if obj.dtype.kind not in _ALLOWED_KINDS:
                raise EncodeError(f"a numpy scalar of dtype {obj.dtype} cannot go on the wire")
            return obj.item()
        if isinstance(obj, tuple):
            return list(obj)
        tag = _TAG.get(type(obj))
        if tag is not None:
            return msgpack.ExtType(EXT_RECORD, self.pack(_record(obj, tag)))
        raise EncodeError(f"{type(obj).__name__} cannot go on the wire: a message field or an "
                          f"operator's partition state must be plain values (None, bool, int, "
                          f"float, str, bytes, lists, dicts, numpy arrays of numbers, Arrow "
                          f"tables)")

    def pack(self, value: Any) -> bytes:
        return msgpack.packb(value, default=self.default, use_bin_type=True, strict_types=True)


def _record(obj: Any, tag: int) -> list[Any]:
    return [tag, *(getattr(obj, f.name) for f in fields(obj))]


def encode_message(msg: Any) -> list[Any]:
    """The body pieces of one typed message (for ``writelines``; buffers are not copied)."""
    tag = _TAG.get(type(msg))
    if tag is None or type(msg) in PARTS:
        raise EncodeError(f"{type(msg).__name__} is not a registered wire message")
    w = _Writer()
    body = w.pack(_record(msg, tag))
    sizes = np.array([len(body), *(b.nbytes for b in w.buffers)], dtype="<u8")
    return [struct.pack("<I", len(w.buffers)) + sizes.tobytes(), body, *w.buffers]


# -- decoding ----------------------------------------------------------------------------------
def aligned(buf: pa.Buffer) -> pa.Buffer:
    """``buf``, copied if it does not start 8-aligned (a slice of a frame): Arrow's compute
    kernels want the buffers of the arrays read from it aligned."""
    return pa.py_buffer(bytes(buf)) if buf.address % 8 else buf


class _Reader:
    def __init__(self, buffers: list[memoryview]) -> None:
        self.buffers = buffers

    def _buffer(self, idx: Any) -> memoryview:
        if not isinstance(idx, int) or not 0 <= idx < len(self.buffers):
            raise DecodeError(f"buffer index {idx!r} out of range")
        return self.buffers[idx]

    def ext_hook(self, code: int, data: bytes) -> Any:
        if code == EXT_NDARRAY:
            head = msgpack.unpackb(data)
            if not (isinstance(head, list) and len(head) == 3 and isinstance(head[0], str)
                    and isinstance(head[1], list) and all(isinstance(n, int) and n >= 0
                                                          for n in head[1])):
                raise DecodeError("malformed array header")
            dtype = np.dtype(head[0])
            if dtype.kind not in _ALLOWED_KINDS or dtype.hasobject:
                raise DecodeError(f"array of dtype {dtype} refused")
            buf = self._buffer(head[2])
            count = int(np.prod(head[1], dtype=np.int64)) if head[1] else 1
            if count * dtype.itemsize != buf.nbytes:
                raise DecodeError("array size does not match its buffer")
            return np.frombuffer(buf, dtype=dtype, count=count).reshape(head[1]).copy()
        if code in (EXT_TABLE, EXT_BATCH):
            reader = pa.ipc.open_stream(aligned(pa.py_buffer(
                self._buffer(msgpack.unpackb(data)))))
            if any(isinstance(f.type, pa.ExtensionType) for f in reader.schema):
                raise DecodeError("Arrow extension types are refused on the wire")
            table = reader.read_all()
            if code == EXT_TABLE:
                return table
            # one batch or an error, never the first of several (a string column over 2 GiB)
            return pa.concat_batches(table.to_batches()) if table.num_rows else \
                pa.RecordBatch.from_pylist([], schema=table.schema)
        if code == EXT_RECORD:
            return self.record(self.unpack(data))
        raise DecodeError(f"unknown extension code {code}")

    def unpack(self, data: bytes | memoryview) -> Any:
        return msgpack.unpackb(data, ext_hook=self.ext_hook, raw=False, strict_map_key=False,
                               use_list=True)

    def record(self, items: Any) -> Any:
        if not isinstance(items, list) or not items or not isinstance(items[0], int):
            raise DecodeError("a message must be [tag, fields...]")
        cls = _CLS.get(items[0])
        if cls is None:
            raise DecodeError(f"unknown message tag {items[0]}")
        fs = fields(cls)
        if len(items) - 1 != len(fs):
            raise DecodeError(f"{cls.__name__}: {len(items) - 1} fields, expected {len(fs)}")
        hints = _hints(cls)
        values = {}
        for f, v in zip(fs, items[1:], strict=True):
            values[f.name] = _check(cls, f.name, hints[f.name], v)
        return cls(**values)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls, vars(pm) | vars(cm) | {"np": np, "pa": pa})
    return _HINTS[cls]


def _check(cls: type, name: str, hint: Any, v: Any) -> Any:
    """``v`` as the declared type of field ``name``, or DecodeError."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is typing.Any:
        return v
    if origin in (typing.Union, types.UnionType):
        if v is None and type(None) in args:
            return None
        for a in args:
            if a is not type(None):
                try:
                    return _check(cls, name, a, v)
                except DecodeError:
                    continue
        raise DecodeError(f"{cls.__name__}.{name}: {type(v).__name__} is not {hint}")
    if hint is float and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    if hint is int and isinstance(v, bool):
        raise DecodeError(f"{cls.__name__}.{name}: bool where int expected")
    if origin is tuple:
        if not isinstance(v, list):
            raise DecodeError(f"{cls.__name__}.{name}: expected a list")
        item = args[0] if args else typing.Any
        return tuple(_check(cls, name, item, x) for x in v)
    if origin is list:
        if not isinstance(v, list):
            raise DecodeError(f"{cls.__name__}.{name}: expected a list")
        return [_check(cls, name, args[0], x) for x in v] if args else v
    if origin is dict:
        if not isinstance(v, dict):
            raise DecodeError(f"{cls.__name__}.{name}: expected a map")
        if not args:
            return v
        return {_check(cls, name, args[0], k): _check(cls, name, args[1], x)
                for k, x in v.items()}
    check = origin or hint
    if isinstance(check, type) and not isinstance(v, check):
        raise DecodeError(f"{cls.__name__}.{name}: {type(v).__name__} where "
                          f"{getattr(hint, '__name__', hint)} expected")
    return v


def decode_message(body: memoryview) -> Any:
    """The message encoded in ``body`` (a frame without its header), or DecodeError."""
    try:
        (n,) = struct.unpack_from("<I", body, 0)
        if n > MAX_BUFFERS:
            raise DecodeError(f"{n} buffers")
        sizes = np.frombuffer(body, dtype="<u8", count=n + 1, offset=4)
        off = 4 + 8 * (n + 1)
        if off + int(sizes.sum()) != body.nbytes:
            raise DecodeError("buffer sizes do not add up to the frame")
        main = body[off: off + int(sizes[0])]
        off += int(sizes[0])
        bufs = []
        for size in sizes[1:].tolist():
            bufs.append(body[off: off + size])
            off += size
        reader = _Reader(bufs)
        msg = reader.record(reader.unpack(main))
        if type(msg) in PARTS:
            raise DecodeError(f"a {type(msg).__name__} travels inside a message, not alone")
    except DecodeError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, struct.error, OverflowError,
            EOFError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError,
            pa.ArrowException) as e:
        raise DecodeError(f"malformed message: {e}") from e
    return msg

