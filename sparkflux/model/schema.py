"""System columns carried by every tuple, and schema helpers.

Every batch that crosses a process boundary is an Arrow record batch whose user columns are
followed by the system columns below (docs/design.md §3):

- ``_sn``: the major sequence number. Ingress assigns dense, increasing input sequence numbers
  (ISN); an operator output triggered by input SN ``x`` keeps major ``x``.
- ``_snm``: the minor part. ``(x, k)`` numbers the outputs that one input triggered (1:many,
  joins, windows closing several groups); an operator that emits at most one output per input
  keeps the input's minor unchanged.
- ``_t0``: wall-clock time (seconds) at which ingress accepted the input tuple the output
  descends from. A *timing* column: used for latency, never part of a result digest.

Sequence numbers are unique and increase along every stream, in ``(_sn, _snm)`` order.
"""

from __future__ import annotations

import pyarrow as pa

SN = "_sn"
SNM = "_snm"
T0 = "_t0"
PART = "_part"
PORT = "_port"  # which logical stream of an exchange a row belongs to (dataflow/ports.py)
SRC = "_src"  # on the wire: the producer partition a row comes from

SYSTEM_FIELDS: tuple[pa.Field, ...] = (
    pa.field(SN, pa.int64(), nullable=False),
    pa.field(SNM, pa.int64(), nullable=False),
    pa.field(T0, pa.float64(), nullable=False),
)
SYSTEM_COLUMNS: frozenset[str] = frozenset(f.name for f in SYSTEM_FIELDS) | {PART, PORT}
TIMING_COLUMNS: frozenset[str] = frozenset({T0, PART})

# Outputs triggered by one input are numbered k = 0 .. MINOR_FANOUT-1 below the input's minor:
# output minor = input minor * MINOR_FANOUT + k. Two levels of 1:many nesting fit in int64.
MINOR_FANOUT = 1 << 20


def user_fields(schema: pa.Schema) -> list[pa.Field]:
    """The fields of ``schema`` that are not system columns, in order."""
    return [f for f in schema if f.name not in SYSTEM_COLUMNS]


def with_system(fields: list[pa.Field] | pa.Schema) -> pa.Schema:
    """A schema of the given user fields followed by the system columns."""
    return pa.schema([*(f for f in fields if f.name not in SYSTEM_COLUMNS), *SYSTEM_FIELDS])


def check_user_name(name: str) -> None:
    """Reject user column names that would shadow system columns."""
    if name.startswith("_"):
        raise ValueError(
            f"column name {name!r} starts with '_', which is reserved for system columns "
            f"({', '.join(sorted(SYSTEM_COLUMNS))}); rename it"
        )
