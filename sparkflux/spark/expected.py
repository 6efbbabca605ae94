"""Any example's reference, collected as the engine's output would be, with its digests.

An example's ``reference(spark, options)`` returns its expected output as a Spark DataFrame
(Spark SQL or the DataFrame API; an Arrow table is taken too). Rules:

- It has the columns of the compiled dataflow's output (the user columns of
  ``compile_plan(...).output_schema``), by name, in any order; each is cast to the engine's
  type. A missing or an extra column is an error that names it.
- It may also have ``_sn`` and ``_snm`` (both or neither). With them it claims the engine's
  numbering: the rows are put in ``(_sn, _snm)`` order and the ordered ``output_digest`` is
  computed as well. Without them only the ``rows_digest`` (order and numbering aside) is.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparkflux.model.digest import digest_of
from sparkflux.model.errors import PlanError
from sparkflux.model.rows_digest import rows_digest_of
from sparkflux.model.schema import SN, SNM, SYSTEM_FIELDS, user_fields


@dataclass(frozen=True)
class Expected:
    """A reference result: the engine's user columns (then ``_sn``, ``_snm`` when numbered)."""

    table: pa.Table
    numbered: bool

    @property
    def rows(self) -> int:
        return self.table.num_rows

    @cached_property
    def output_digest(self) -> str | None:
        """The ordered digest, comparable with the run's; None without ``_sn``/``_snm``."""
        return digest_of(self.table) if self.numbered else None

    @cached_property
    def rows_digest(self) -> str:
        return rows_digest_of(self.table)

    def same_output(self, table: pa.Table) -> bool:
        """Whether ``table``, an output as a sink wrote it (its files in any order, the
        sequence columns kept), is this numbered reference row for row in SN order."""
        ordered = table.sort_by([(SN, "ascending"), (SNM, "ascending")])
        return table.num_rows == self.rows and \
            digest_of(ordered.select(self.table.column_names)) == self.output_digest


def conform(table: pa.Table, output_schema: pa.Schema, what: str = "the reference") -> Expected:
    """``table`` with exactly the engine's output columns and types, or a PlanError that
    names the missing and extra columns (or the column that does not cast)."""
    user = user_fields(output_schema)
    wanted = [f.name for f in user]
    names = table.column_names
    numbered = SN in names or SNM in names
    if numbered and not (SN in names and SNM in names):
        raise PlanError(f"{what} has only one of {SN}, {SNM}: give both (the engine's "
                        f"numbering) or neither (compare the rows only)")
    missing = [n for n in wanted if n not in names]
    extra = [n for n in names if n not in wanted and n not in (SN, SNM)]
    if missing or extra:
        parts = [f"missing column(s) {', '.join(missing)}" if missing else "",
                 f"extra column(s) {', '.join(extra)}" if extra else ""]
        raise PlanError(f"{what} does not match the dataflow's output: "
                        f"{'; '.join(p for p in parts if p)} (the output has: "
                        f"{', '.join(wanted)}, and optionally {SN}, {SNM})")
    system = {f.name: f for f in SYSTEM_FIELDS}
    fields = user + [output_schema.field(n) if n in output_schema.names else system[n]
                     for n in (SN, SNM) if numbered]
    columns = []
    for f in fields:
        try:
            columns.append(pc.cast(table.column(f.name), f.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise PlanError(f"{what}: column {f.name!r} of type {table.schema.field(f.name).type}"
                            f" does not cast to the output's {f.type} "
                            f"({str(e).splitlines()[0]})") from e
    out = pa.Table.from_arrays(columns, schema=pa.schema(fields))
    if numbered:
        # Re-establish the order locally: cheap, and independent of how the plan collects.
        out = out.sort_by([(SN, "ascending"), (SNM, "ascending")])
    return Expected(out, numbered)


def collect(df: Any, output_schema: pa.Schema, what: str = "the reference") -> Expected:
    """Collect a reference DataFrame (or Arrow table) and ``conform`` it."""
    table = df if isinstance(df, pa.Table) else df.toArrow()
    return conform(table, output_schema, what)
