"""The run's metrics, computed from the driver host's records when the run ends: throughput,
digest and latency, and per failure, catch-up, adoption and move what it cost."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sparkflux.runtime.transport import bytes_sent_total

if TYPE_CHECKING:
    from sparkflux.control.moves import MoveRecord
    from sparkflux.runtime.driver import Host

SPAN_OPENS_S = 1.0  # a failure's span short of copies opens at most this long after it


def back_to_copies(unsafe: list[tuple[float, float]], failed_at: float) -> float | None:
    """When every partition had ``--replicas`` complete copies again after a failure at
    ``failed_at``: the end of the first span short of copies that ends after it and began by
    the time the host had carried out its view change (the host opens a span when it next
    looks, some milliseconds after the failure on a busy loop). None: the run ended first."""
    return next((end for start, end in sorted(unsafe)
                 if failed_at <= end and start <= failed_at + SPAN_OPENS_S), None)


def result_metrics(host: Host) -> dict[str, Any]:
    m = host.metrics
    duration = (m.end or time.time()) - (m.start or time.time())
    # this run's input (a restart numbers on after its checkpoint's cut)
    inp = host.ingress.next_isn - (host.restored.cut + 1 if host.restored else 0)
    return {
        "input_tuples": inp,
        # what the driver's ingress numbered and sent: a record each, or one per chunk of a
        # source read on the sites (whose rows never pass through the driver)
        "ingress_records": host.ingress.records,
        "output_tuples": host.egress.delivered,
        "duration_s": round(duration, 4),
        "throughput_tps": round(inp / duration, 1) if duration > 0 else 0.0,
        "output_digest": host.digest.hexdigest(),
        "rows_digest": host.rows_digest.hexdigest(),
        **({"sinks": {spec.name: {"rows": host.sink_rows[k],
                                  "output_digest": host.digests[k].hexdigest(),
                                  "rows_digest": host.rows_digests[k].hexdigest()}
                      for k, spec in enumerate(host.plan.sinks)}}
           if len(host.plan.sinks) > 1 else {}),
        **m.summary(),
        **({"consistency": consistency_report(host)} if host.core.episodes is not None else {}),
        "ingress_dropped": host.stats.dropped,
        # flow control: the most admitted records unacknowledged by a first-stage replica
        # when the ingress admitted a batch (bounded by --window), and the watchdog's reports
        "ingress_unacked_max": host.unacked_max,
        "stalls": list(host.stalls),
        "dead_letters": host.stats.dead_letters,
        **({"dead_letter_reasons": {k: {"count": c, "first": first}
                                    for k, (c, first) in host.dead_reasons.items()}}
           if host.dead_reasons else {}),
        "kills": len(host.faults.kills),
        **({"cuts": [{k: v for k, v in c.items() if k != "time"} for c in host.faults.cuts]}
           if host.faults.cuts else {}),
        **({"partitions": [{k: v for k, v in p.items() if k != "time"}
                           for p in host.faults.partitions]} if host.faults.partitions else {}),
        **({"source_cuts": list(host.faults.source_cuts)} if host.faults.source_cuts else {}),
        "failures": [failure_report(host, f) for f in host.failures],
        **({"checkpoints": list(host.checkpointing.taken),
            "checkpoints_given_up": list(host.checkpointing.given_up)}
           if host.checkpointing.store is not None else {}),
        **({"restored": {"checkpoint": host.restored.checkpoint,
                         "cut": host.restored.cut}} if host.restored is not None else {}),
        # from the driver process's start to its first output row (a restart's time back)
        **({"first_output_after_start_s": round(m.times[0] - started, 3)}
           if m.times and (started := process_started_at()) is not None else {}),
        "recoveries": [recovery_report(host, c) for c in host.catch_ups],
        "adoptions": [{k: v for k, v in a.items() if k != "time"} for a in host.adoptions],
        # how long the sites took to start, and the standby wait measured from it
        "site_start_s": round(host.site_start_s, 3) if host.site_start_s is not None else None,
        "standby_wait_s": round(host.controller.standby_wait, 3),
        **({"executor_start_s": round(host.executor_start_s, 3)}
           if host.executor_start_s is not None else {}),
        "moves": [move_report(host, mv) for mv in host.controller.moves],
        # each rescale of the running query (``control/rescale.py``): its record
        **({"rescales": list(host.rescales)} if host.rescales else {}),
        # the ring over the sites' failure domains chosen at view 1, and what it could not avoid
        # and every re-deployment by measured latencies (its time from the input's start)
        "placement": {**host.controller.placement, **(
            {"redeploys": _timed(host, host.controller.placement["redeploys"])}
            if "redeploys" in host.controller.placement else {})},
        "balance_rounds": len(host.controller.rounds),
        "balance": _timed(host, host.controller.rounds),
        "utilisation": utilisation(host),
        # the driver process's CPU time over the run's duration (every thread of it: sources,
        # ingress, egress, sinks, controller); near 1.0 the driver, one core for Python's
        # GIL, limits the input rate
        "driver_cpu_share": (round((host.cpu_end - host.cpu_start) / duration, 3)
                             if host.cpu_end > host.cpu_start and duration > 0 else None),
        # what the run wrote to its connections (the sites' as of their last heartbeats)
        "bytes_sent": {"driver": bytes_sent_total() - host.sent_at_start,
                       "sites": sum(host.site_sent.values())},
        # --ha race: output rows the egress dropped because another copy brought them first
        "raced_rows": host.core.egress.cons.duplicates,
        # --stream-replicas: input streams garbage-collected and revived (the egress's and
        # the sites' as of their last heartbeats)
        "stream_replicas": {
            "keep": host.core.egress.cons.keep,
            "collected": host.core.egress.cons.collected + sum(
                c for c, _ in host.site_streams.values()),
            "revived": host.core.egress.cons.revived + sum(
                r for _, r in host.site_streams.values())},
        # --unordered-output: rows handed on as they passed the filter (output_digest then
        # follows their arrival; rows_digest does not)
        "unordered_output": host.core.egress.unordered,
        # --ha race: the stages run in arrival order, without the SN-ordered merge (their
        # operators are order-insensitive, and --arrival-order was given)
        "arrival_stages": [st.name for st, on in zip(
            host.core.plan.stages, host.core.plan.arrival(host.cfg.ha == "race"),
            strict=True) if on],
        # connections closed before or right after authentication, never decoded
        "refused_connections": {"driver": host.gate.total_refused,
                                "sites": sum(host.site_refused.values()),
                                "driver_reasons": dict(host.gate.refused)},
        # per site (its last process): busy seconds in passes, passes run, process CPU
        "site_load": {str(k): {n: x for n, x in v.items()
                               if not n.endswith(("_before", "_now"))}
                      for k, v in sorted(host.site_load.items())},
    }

def utilisation(host: Host) -> dict[str, float]:
    """Per site, the fraction of the run its event loop was busy (thesis U_j = 1 - I_j/d).

    Computed from the heartbeats' cumulative busy time; a site that was replaced counts
    its last process only."""
    out = {}
    lo, hi = host.metrics.start or 0.0, host.metrics.end or time.time()
    for site, all_samples in sorted(host.utilisation.items()):
        samples = [x for x in all_samples if lo <= x[0] <= hi]  # while data flowed
        if len(samples) < 2:
            continue
        (t0, b0, _), (t1, b1, _) = samples[0], samples[-1]
        if t1 > t0 and b1 >= b0:
            out[str(site)] = round((b1 - b0) / (t1 - t0), 3)
    return out

def _timed(host: Host, records: Any) -> list[dict[str, Any]]:
    """Controller records (each with ``at``, the controller's clock) with ``at_s``: seconds
    from the input's start."""
    return [{**r, "at_s": round(r["at"] - host._mono_start, 3)} for r in records]


def move_report(host: Host, mv: MoveRecord) -> dict[str, Any]:
    """One move (a finished one: ``Controller.moves``): which copy went where, why, the state
    it took and how long."""
    assert mv.end is not None, f"move {mv.epoch} has not ended"
    start = host.move_started.get(mv.epoch, 0.0)
    t0 = host.metrics.start or start
    confirmed = mv.confirmed if mv.confirmed is not None else mv.end
    out = {"partition": mv.q, "replica": mv.r, "from": mv.src, "to": mv.dst,
           "reason": mv.reason, "bytes": mv.nbytes,
           "started_at_s": round(start - t0, 3),
           "duration": round(mv.end - mv.start, 4),
           # until every live site had applied it (``moved``); catch-up follows
           "confirmed_s": round(confirmed - mv.start, 4),
           # make before break: the column the new copy was built in (its own: rebuilt after
           # its site failed), and the time the partition had fewer complete copies than
           # --replicas because of the move (failures aside)
           "built_in": mv.c, "short_of_copies_s": round(mv.short_s, 4)}
    if mv.retired is not None:
        out["old_copy_retired_s"] = round(mv.retired - mv.start, 4)
    if mv.abandoned is not None:
        out["abandoned"] = mv.abandoned
    return out

def recovery_report(host: Host, c: dict[str, Any]) -> dict[str, Any]:
    """One partition's catch-up: state moved, how long it took, the output gap meanwhile."""
    m = host.metrics
    t = np.asarray(m.times)
    sel = t[(t >= c["start"]) & (t <= c["end"])]
    edges = np.r_[c["start"], sel, c["end"]]
    return {
        "stage": c["stage"], "partition": c["partition"], "replica": c["replica"],
        "site": c["site"], "state_bytes": c["state_bytes"],
        "state_move_s": round(c["move_s"], 5),
        "started_at_s": round(c["start"] - (m.start or c["start"]), 3),
        "duration_s": round(c["end"] - c["start"], 4),
        "output_gap_s": round(float(np.diff(edges).max()), 4),
    }

def consistency_report(host: Host) -> dict[str, Any]:
    """``--consistency eventual``: the bound, the mode, the seconds the input spent in each
    state of the machine (``protocol/consistency.py``), each state change (seconds after
    the output started), the seconds each stage spent in each (``stage_states.py``), and the
    records sent tentatively."""
    eps = host.core.episodes
    assert eps is not None
    ep, start = eps.episode, host.metrics.start or 0.0
    return {"max_delay_s": ep.config.max_delay, "mode": ep.config.mode,
            "episodes": ep.epoch,
            "seconds": {k: round(v, 3) for k, v in ep.time_in(time.time()).items()},
            "states": [{"at_s": round(t - start, 3), "state": st} for t, st in ep.history],
            "stages": [{"stage": k, "seconds": {s: round(v, 3) for s, v in sec.items()}}
                       for k, sec in enumerate(eps.stages.time_in(time.time()))],
            "tentative_input": eps.tentative_rows,
            "tentative_wait_max_s": round(eps.max_wait, 3)}


def failure_report(host: Host, f: dict[str, Any]) -> dict[str, Any]:
    """What one failure cost: detection delay, output gap and latency around it."""
    faults = [*host.faults.kills, *host.faults.cuts, *host.faults.hangs,
              *({"site": s, "time": p["time"]} for p in host.faults.partitions
                for g in p["groups"] for s in g)]
    before = sorted(k["time"] for k in faults
                     if k["site"] == f["site"] and k["time"] <= f["time"])
    at = before[-1] if before else f["time"]
    m = host.metrics
    safe = back_to_copies(host.unsafe, f["time"])
    return {
        "site": f["site"],
        "reason": f.get("reason", ""),
        "killed_at_s": round(at - (m.start or at), 3),
        "detected_after_s": round(f["time"] - at, 4),
        "max_output_gap_s": round(m.gaps_around(at), 4),
        "latency_p99_s": round(m.latency_p99_between(at - 0.5, at + 3.0), 4),
        "fault_tolerant_after_s": round(safe - f["time"], 3) if safe is not None else None,
    }


def process_started_at() -> float | None:
    """When this process started (wall time), from ``/proc`` (None where there is none)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text()
                    .splitlines() if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration, IndexError):
        return None
