"""A site's load as its last heartbeat reports it (``site_load`` in the run's metrics)."""

from __future__ import annotations

from sparkflux.protocol import control_messages as cm


def site_load(beat: cm.Heartbeat, last: dict[str, float]) -> dict[str, float]:
    """A site's counters at its last heartbeat (``site_load`` in the metrics), with the rows
    it holds and the most it has held so far: in FH-Prod buffers (``buffered``), in its skew
    buffer for connections that cannot take them (``held``), received and waiting for the
    merge (``pending``)."""
    out: dict[str, float] = {"busy_s": round(beat.busy_s, 3), "passes": beat.passes,
                             "cpu_s": round(beat.cpu_s, 3)}
    for name, rows in (("buffered", beat.buffered), ("held", beat.held),
                       ("pending", beat.pending)):
        out[f"{name}_rows"] = rows
        out[f"{name}_rows_max"] = max(rows, int(last.get(f"{name}_rows_max", 0)))
    if beat.has_state:  # memory (``protocol/memory.py``), with the state's sizes
        out["memory_bytes"] = beat.memory
        out["memory_bytes_max"] = max(beat.memory, int(last.get("memory_bytes_max", 0)))
        out["budget_bytes"] = beat.budget
        out["spilled_bytes"] = beat.spilled
        out["spills"], out["loads"] = beat.spills, beat.loads
    else:
        for k in ("memory_bytes", "memory_bytes_max", "budget_bytes", "spilled_bytes",
                  "spills", "loads"):
            if k in last:
                out[k] = last[k]
    return out
