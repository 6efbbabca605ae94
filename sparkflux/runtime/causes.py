"""How the driver words a failure for the user: an exception as one line (``cause``), and a
sink's failure, to open, write or publish, named with its sink and what to change
(``sink_failure``), the same wherever it happens."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkflux.dataflow.plan import PhysicalPlan
    from sparkflux.io.sinks import Sink


def cause(e: BaseException) -> str:
    """An exception as one line a user reads first (type and message), then where it was
    raised: the innermost frames of its traceback."""
    where = traceback.extract_tb(e.__traceback__)[-3:]
    frames = "; ".join(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in where)
    return f"{type(e).__name__}: {e}" + (f" (at {frames})" if frames else "")


def sink_failure(plan: PhysicalPlan, k: int, sink: Sink, what: str, e: BaseException) -> str:
    """Sink ``k`` failed doing ``what`` ("could not open", "failed to write"): which sink,
    the cause, and for the errors a path gives what to change."""
    return (f"sink {plan.sinks[k].name!r} ({type(sink).__name__}) {what}: {cause(e)}"
            f"{path_hint(e)}")


def path_hint(e: BaseException) -> str:
    """What to change, for the errors a sink's path gives."""
    if isinstance(e, (FileExistsError, NotADirectoryError)):
        return "; a directory on the sink's path is a file: choose another path"
    if isinstance(e, PermissionError):
        return "; this process may not write there: choose a writable path"
    return ""
