"""A site's load as its last heartbeat reports it (``site_load`` in the run's metrics)."""

from __future__ import annotations

from sparkflux.protocol import control_messages as cm


def site_load(beat: cm.Heartbeat, last: dict[str, float]) -> dict[str, float]:
    """A site's counters at its last heartbeat (``site_load`` in the metrics), with the rows
    it holds and the most it has held so far: in FH-Prod buffers (``buffered``), in its skew
    buffer for connections that cannot take them (``held``), received and waiting for the
    merge (``pending``); its memory (``memory_bytes``: state in memory and buffered rows;
    ``state_bytes``: its partitions' state in memory and on disk, with their input there),
    and the spills, loads and input batches spilled of every process the slot has had, with
    the longest pause one of them caused its other partitions (``memory_pause_max_s``)."""
    out: dict[str, float] = {"busy_s": round(beat.busy_s, 3), "passes": beat.passes,
                             "cpu_s": round(beat.cpu_s, 3)}
    for name, rows in (("buffered", beat.buffered), ("held", beat.held),
                       ("pending", beat.pending)):
        out[f"{name}_rows"] = rows
        out[f"{name}_rows_max"] = max(rows, int(last.get(f"{name}_rows_max", 0)))
    # the longest pause a spill or a load caused, over every process the slot has had
    out["memory_pause_max_s"] = round(max(beat.memory_pause_s,
                                          float(last.get("memory_pause_max_s", 0.0))), 4)
    # Spills and loads count over the slot's processes: a process that adopted the slot
    # counts from 0 again, so its predecessors' counts carry over.
    out["pid"] = beat.pid
    before = last.get("pid", beat.pid) != beat.pid
    for k in ("spills", "loads", "input_spills"):
        base = last.get(f"{k}_before", 0) + (last.get(f"{k}_now", 0) if before else 0)
        now = getattr(beat, k)
        out[f"{k}_before"] = base
        out[f"{k}_now"] = now if beat.has_state else (0 if before else last.get(f"{k}_now", 0))
        out[k] = base + out[f"{k}_now"]
    if beat.has_state:  # memory (``protocol/memory.py``), with the state's sizes
        out["memory_bytes"] = beat.memory
        out["memory_bytes_max"] = max(beat.memory, int(last.get("memory_bytes_max", 0)))
        out["budget_bytes"] = beat.budget
        out["spilled_bytes"] = beat.spilled
        out["state_bytes"] = int(beat.state_bytes.sum()) + beat.spilled
        out["state_bytes_max"] = max(out["state_bytes"], int(last.get("state_bytes_max", 0)))
    else:
        for k in ("memory_bytes", "memory_bytes_max", "budget_bytes", "spilled_bytes",
                  "state_bytes", "state_bytes_max"):
            if k in last:
                out[k] = last[k]
    return out
