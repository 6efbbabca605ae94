"""What Flux-HA costs: throughput with and without replication, and what a failure costs.

    .venv/bin/python bench/ha_overhead.py [--events 1000000] [--repeat 2] [--plot PNG]

In one Spark session: (1) ``--ha none`` and ``--ha flux`` on the same input as fast as the
dataflow accepts, each over authenticated plain TCP and over TLS, and ``--ha flux
--replicas 3`` over plain TCP, alternated, and their ratios (the paper: 36K vs 82K tuples/s,
0.44); (2) what authentication itself costs: every connection
of a run pays one handshake and nothing after it (frames carry no MAC), so the bench times the
real handshake against a bare TCP connect on loopback and puts the difference, times the
connections a run opens, against the run's duration; (3) ``--ha flux`` with the input held at
``--rate`` while a site is SIGKILLed, and the output gap and p99 latency around the kill
(target: no gap above 0.2 s). Every run's output digest must equal the others' (the failure
run's too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sparkflux.dataflow.examples import load_example  # noqa: E402
from sparkflux.io.sinks import DeadLetters, NullSink  # noqa: E402
from sparkflux.runner import run_example  # noqa: E402
from sparkflux.runtime import handshake  # noqa: E402
from sparkflux.runtime.handshake import Claim, Gate  # noqa: E402
from sparkflux.runtime.plot import plot_timeline  # noqa: E402
from sparkflux.runtime.security import make_security  # noqa: E402
from sparkflux.runtime.transport import connect, serve, start_server  # noqa: E402
from sparkflux.spark.launcher import default_master, spark_session  # noqa: E402

SITES = 4
# (mode, TLS): "flux3" is --ha flux --replicas 3
MODES = (("none", False), ("flux", False), ("flux3", False), ("none", True), ("flux", True))


def args_for(events: int, ha: str, rate: float | None = None,
             kill: list[str] | None = None, tls: bool = False) -> argparse.Namespace:
    replicas = 3 if ha == "flux3" else None
    return argparse.Namespace(
        events=events, batch_size=8192, seed=7, cpu_work=False, bad_every=0, sites=SITES,
        partitions=32, ha="flux" if replicas else ha, replicas=replicas, master=None,
        rate=rate, ingress_buffer=200_000, window=300_000,
        output=None, dead_letter=None, kill=kill or [], heartbeat_timeout=10.0, tls=tls,
    )


def label(mode: str) -> str:
    return "--ha flux --replicas 3" if mode == "flux3" else f"--ha {mode}"


def connections_per_run(sites: int) -> int:
    """Connections a run without failures opens: a data and a control connection per site,
    one link per pair of sites (a run with catch-ups adds a StateMover connection per pair
    that moves state, at most as many again)."""
    return 2 * sites + sites * (sites - 1) // 2


async def _time_connects(n: int, tls: bool) -> tuple[float, float]:
    """Seconds per bare TCP (or TLS) connect and per authenticated connect, on loopback
    (interleaved rounds after a warm-up; the server finishes every connection it accepts)."""
    sec = make_security(secrets.token_bytes(32), tls=tls)
    gate = Gate(sec.secret, lambda: (-1, 0), sec.handshake_timeout, sec.max_pending)
    done: list[asyncio.Future] = []

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if authenticate:
            await serve(reader, writer, gate, sec)
        writer.close()

    def track(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        done.append(asyncio.ensure_future(on_conn(reader, writer)))

    server = await start_server(track, "127.0.0.1", sec)
    port = server.sockets[0].getsockname()[1]

    async def one() -> None:
        if authenticate:
            conn = await connect("127.0.0.1", port, "bench", sec, Claim(handshake.DATA, 0, 0, 0),
                                 (-1, 0))
            conn.close()
        else:
            _r, w = await asyncio.open_connection(
                "127.0.0.1", port, ssl=sec.client_ssl(),
                server_hostname="sparkflux" if tls else None)
            w.close()

    spent = {False: 0.0, True: 0.0}
    for rnd in range(11):  # round 0 warms up
        for authenticate in (False, True):
            t = time.perf_counter()
            for _ in range(n // 10):
                await one()
            if rnd:
                spent[authenticate] += time.perf_counter() - t
    await asyncio.gather(*done, return_exceptions=True)
    server.close()
    return spent[False] / n, spent[True] / n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--rate", type=float, default=100_000)
    p.add_argument("--kill-events", type=int, default=800_000)
    p.add_argument("--plot", default=None)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    console = Console()
    module = load_example(ROOT / "examples" / "netmon.py")
    spark = spark_session(default_master(5))
    tps: dict[str, list[float]] = {f"{ha}{'+tls' if tls else ''}": [] for ha, tls in MODES}
    durations: dict[str, list[float]] = {k: [] for k in tps}
    digests = set()

    def run(args: argparse.Namespace):
        return run_example(module, args, sink=NullSink(),
                           dead=DeadLetters(), spark=spark)

    for r in range(a.repeat):
        for ha, tls in MODES:
            key = f"{ha}{'+tls' if tls else ''}"
            res = run(args_for(a.events, ha, tls=tls))
            tps[key].append(res.metrics["throughput_tps"])
            durations[key].append(res.metrics["duration_s"])
            digests.add(res.metrics["output_digest"])
            console.print(f"run {r + 1} {label(ha)}{' --tls' if tls else ''}: "
                          f"{res.metrics['throughput_tps']:,.0f} tuples/s")

    def ratio(num: str, den: str) -> float:
        return statistics.median([x / y for x, y in zip(tps[num], tps[den], strict=True)])

    t = Table(title=f"netmon, {a.events:,} events, 4 sites, 32 partitions, back-pressure, "
                    f"every connection authenticated")
    t.add_column("mode")
    t.add_column("input tuples/s (median)", justify="right")
    for key, values in tps.items():
        t.add_row(label(key.replace("+tls", "")) + (" --tls" if "+tls" in key else ""),
                  f"{statistics.median(values):,.0f}")
    t.add_row("flux / none (plain TCP)", f"{ratio('flux', 'none'):.2f} (paper: 0.44)")
    t.add_row("flux, 3 replicas / none (plain TCP)", f"{ratio('flux3', 'none'):.2f}")
    t.add_row("3 replicas / 2 (plain TCP)", f"{ratio('flux3', 'flux'):.2f}")
    t.add_row("flux / none (TLS)", f"{ratio('flux+tls', 'none+tls'):.2f}")
    t.add_row("TLS / plain, --ha none", f"{ratio('none+tls', 'none'):.2f}")
    t.add_row("TLS / plain, --ha flux", f"{ratio('flux+tls', 'flux'):.2f}")
    console.print(t)

    n = connections_per_run(SITES)
    h = Table(title=f"authentication: one handshake per connection ({n} per run at {SITES} "
                    f"sites), nothing per frame")
    h.add_column("transport")
    h.add_column("connect", justify="right")
    h.add_column("connect + handshake", justify="right")
    h.add_column(f"{n} handshakes / run (--ha flux)", justify="right")
    auth: dict[str, float] = {}
    for tls in (False, True):
        bare, authed = asyncio.run(_time_connects(500, tls))
        cost = n * max(authed - bare, 0.0)
        run_s = statistics.median(durations["flux+tls" if tls else "flux"])
        auth["tls" if tls else "plain"] = cost / run_s
        h.add_row("TLS" if tls else "plain TCP", f"{bare * 1e6:.0f} us",
                  f"{authed * 1e6:.0f} us", f"{cost * 1e6:.0f} us = "
                  f"{100 * cost / run_s:.4f}% of {run_s:.1f} s")
    console.print(h)

    res = run(args_for(a.kill_events, "flux", rate=a.rate, kill=["1@3"]))
    m = res.metrics
    f = m["failures"][0]
    k = Table(title=f"--ha flux at {a.rate:,.0f} events/s, site 1 SIGKILLed at 3 s")
    k.add_column("figure")
    k.add_column("value", justify="right")
    k.add_row("failure detected after", f"{f['detected_after_s'] * 1000:.0f} ms")
    k.add_row("longest output gap around the kill", f"{f['max_output_gap_s'] * 1000:.0f} ms")
    k.add_row("p99 latency around the kill", f"{f['latency_p99_s'] * 1000:.0f} ms")
    k.add_row("p99 latency, whole run", f"{m['latency_p99_s'] * 1000:.0f} ms")
    k.add_row("input dropped at the ingress", f"{m['ingress_dropped']:,}")
    console.print(k)
    if a.plot:
        plot_timeline(a.plot, res.timeline, res.ingress_timeline, res.events,
                      "netmon --ha flux, 4 sites, site 1 killed at 3 s")
        console.print(f"timeline drawn to {a.plot}")
    out = {"tps": tps, "ratio_median": ratio("flux", "none"),
           "ratio_median_3": ratio("flux3", "none"),
           "ratio_median_tls": ratio("flux+tls", "none+tls"), "auth_share": auth, "kill": m}
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2, default=str))
    same = len(digests) == 1
    console.print(f"all back-pressure runs produced the same output digest: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
