"""The operator contract.

An operator instance on a site is a *shell* holding every mini-partition of its stage that the
site owns (thesis ch. 4: "one operator instance per machine"). It sees batches, never tuples:

- ``bind(input_schema)`` checks the columns it needs (raising ``PlanError`` with a message that
  names the missing column and the columns available) and returns the output schema. Called by
  the compiler in the driver, and again on the site before the first batch.
- ``process(batch)`` takes a batch in ``(_sn, _snm)`` order carrying the system columns
  ``_sn``, ``_snm``, ``_t0`` and ``_part`` (the mini-partition the row was routed to) and
  returns the output batch, also in SN order and carrying the same system columns. The SN rules
  of docs/design.md §3: an operator that emits at most one output per input keeps the input's
  ``(_sn, _snm)``; outputs ``k = 0, 1, ...`` triggered by one input get
  ``(_sn, child_minor(_snm, k))``. ``_t0`` and ``_part`` are those of the triggering input.
- ``advance(frontier)`` is called after ``process`` with each mini-partition's input
  frontier (``model.progress.Frontier``: for partition q, every SN <= ``frontier.sn[q]`` and
  every event time < ``frontier.wm[q]`` of q's input is complete). A site hosts only some
  partitions and the others never progress there, so an operator reads each partition's own
  entry, never a minimum over all. Operators closed by progress (time windows) emit here. It
  returns the output batch (possibly empty) and the output frontier per partition, at most
  the input's: an operator that holds rows back (open or closed windows) claims no SN beyond
  the lowest SN a future output of the partition could carry, and no watermark beyond the
  lowest event time such an output could carry. Holding the watermark back with the rows is
  what lets windowed operators compose: a downstream window closes only once every row that
  falls into it has been released upstream.

Operators are deterministic: the output depends only on the SN-ordered input and the
progress markers' values, never on batch boundaries, timing or randomness. Two replicas fed
the same input produce identical output; the test-suite checks batch-boundary independence.

State moves per mini-partition (thesis Fig 3.9 and ch. 4 API): ``get_partition_state(part)``
returns a picklable, machine-independent value; ``install_partition_state(part, state)`` on a
fresh shell must derive all the partition's state from it, and processing then resumes after
the last input the state reflects. ``partition_info()`` reports per-partition size.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparkflux.model.batch import empty
from sparkflux.model.errors import PlanError
from sparkflux.model.progress import Frontier


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """Size of one mini-partition's state (thesis ``getPartitionInfo``)."""

    part: int
    keys: int
    nbytes: int


CONTRACT = 2  # the operator contract's version (docs/operators.md, "The contract's versions")


class Operator(ABC):
    """A deterministic operator over SN-ordered batches of many mini-partitions."""

    #: True when the operator keeps state between batches (needs an exchange before it).
    stateful: bool = False
    #: The contract the operator is written against; a different one is refused at build.
    contract: int = CONTRACT
    #: True when every output row depends on one input row alone, and its ``(_sn, _snm)`` on
    #: that row's (rules 1 and 2 of docs/operators.md with a fan-out that no other row
    #: decides): the operator gives the same rows whatever order its input comes in. Racing
    #: copies then feed a stage of such operators rows as they arrive, without the
    #: SN-ordered merge (the racing-replicas paper's replica-consistent operators).
    order_insensitive: bool = False
    #: True when the operator folds its input into state whatever order it comes in and
    #: emits only in ``advance``, in SN order at or below its output claim, each output row
    #: numbered after the highest ``(_sn, _snm)`` of the rows it descends from (the
    #: racing-replicas paper's Algorithm 3: a time-window aggregate closed by punctuations).
    #: Racing copies may then feed it rows as they arrive; its output stays in SN order.
    arrival_input: bool = False

    def __init__(self) -> None:
        self._output_schema: pa.Schema | None = None

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def output_schema(self) -> pa.Schema:
        if self._output_schema is None:
            raise RuntimeError(f"{self.name} used before bind()")
        return self._output_schema

    def bind(self, input_schema: pa.Schema) -> pa.Schema:
        """Validate the input columns and return (and remember) the output schema."""
        self._output_schema = self._bind(input_schema)
        return self._output_schema

    @abstractmethod
    def _bind(self, input_schema: pa.Schema) -> pa.Schema: ...

    @abstractmethod
    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch: ...

    def advance(self, frontier: Frontier) -> tuple[pa.RecordBatch, Frontier]:
        """React to input progress; the default emits nothing and passes progress through."""
        return empty(self.output_schema), frontier

    # -- state movement (stateless operators have none) --------------------------------------
    def get_partition_state(self, part: int) -> Any:
        return None

    def install_partition_state(self, part: int, state: Any) -> None:
        if state is not None:
            raise ValueError(f"{self.name} is stateless but was given state for partition {part}")

    def drop_partition(self, part: int) -> None:  # noqa: B027 - stateless: nothing to drop
        """Forget a partition's state (after it moved away or its replica was failed)."""

    def partition_info(self) -> list[PartitionInfo]:
        return []


def require_columns(op: str, schema: pa.Schema, columns: list[str] | tuple[str, ...]) -> None:
    """Raise PlanError naming every missing column and what is available."""
    missing = [c for c in columns if schema.get_field_index(c) < 0]
    if missing:
        available = ", ".join(f.name for f in schema if not f.name.startswith("_"))
        raise PlanError(
            f"{op}: unknown column(s) {', '.join(map(repr, missing))}; "
            f"the input has: {available}"
        )


def check_contract(op: Operator) -> None:
    """PlanError when ``op`` is written against another version of the operator contract,
    saying what changed: a declared ``contract`` other than ``CONTRACT``, or the marks of
    contract 1 (an ``advance`` that took one progress marker, a ``holds_progress``
    attribute), which contract 2 replaced with per-partition progress."""
    name = type(op).__name__
    change = ("contract 2 tracks progress per mini-partition: advance(frontier) gets a "
              "Frontier (per partition, frontier.of(part)) and returns (rows, frontier), where "
              "a frontier below the input's holds that partition's progress back (see "
              "docs/operators.md, 'advance')")
    if op.contract != CONTRACT:
        raise PlanError(f"{name} is written against operator contract {op.contract}; this "
                        f"sparkflux runs contract {CONTRACT}: {change}")
    if hasattr(op, "holds_progress"):
        raise PlanError(f"{name} defines holds_progress, which contract 1 read and contract "
                        f"{CONTRACT} ignores: {change}; remove the attribute")
    params = list(inspect.signature(type(op).advance).parameters.values())[1:]
    if params and (params[0].name == "progress" or "Progress" in str(params[0].annotation)
                   and "Frontier" not in str(params[0].annotation)):
        raise PlanError(f"{name}.advance({params[0].name}) takes one progress marker, as in "
                        f"operator contract 1: {change}")
