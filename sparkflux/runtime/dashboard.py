"""The live dashboard and the Prometheus endpoint, served by the driver while a run lasts
(Spark's UI is on 4040; this one takes the first free port from ``DEFAULT_PORT`` in local
mode, ``--ui-port`` otherwise).

Built on aiohttp, on a thread and event loop of its own, so a browser or a scraper never
touches the host's loop: every page reads the run's progress log (``progress_log.py``) under
its lock. Routes:

- ``/``: the page (``dashboard.html``): the sites and the copies each holds (catching up,
  moving), input and output rates, latency, watermarks and state sizes as charts, and the
  timeline of failures, take-overs, adoptions, catch-ups and moves; it polls
  ``/api/progress`` once a second and draws with plotly (served from the installed package,
  ``/static/plotly.js``: no network needed);
- ``/api/progress``: the run's description, every progress kept and every event, as JSON;
- ``/metrics``: the same figures as Prometheus series named ``sparkflux_*``
  (``prometheus_client``'s text format; ``PrometheusSeries`` below).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Iterator
from importlib import resources
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sparkflux.protocol.consistency import State

if TYPE_CHECKING:
    from sparkflux.runtime.driver import Host

log = logging.getLogger(__name__)
DEFAULT_PORT = 4050  # the first port tried in local mode (Spark's UI starts at 4040)
PORTS_TRIED = 20  # ... and how many after it, as Spark does when its port is taken
# A connection that sends no request for this long is closed (as the wire closes one that
# does not authenticate within its handshake timeout): idle sockets cannot pile up.
IDLE_S = 5.0


class PrometheusSeries(Collector):
    """The run's figures as Prometheus series, read from its progress log at each scrape."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def collect(self) -> Iterator[Metric]:
        host = self.host
        plog = host.progress
        with plog.lock:
            p = plog.recent[-1] if plog.recent else None
            kinds: dict[str, int] = {}
            for e in plog.events:
                kinds[e.kind] = kinds.get(e.kind, 0) + 1
        q = host.plan.name
        rows = CounterMetricFamily("sparkflux_input_rows", "input rows admitted, per source",
                                   labels=["query", "source"])
        for k, spec in enumerate(host.plan.streams):
            rows.add_metric([q, spec.name], host.source_rows[k])
        yield rows
        yield _counter("sparkflux_output_rows", "rows delivered to the sinks", q,
                       host.egress.delivered)
        yield _counter("sparkflux_dead_letters", "input records rejected to the dead letters",
                       q, host.stats.dead_letters)
        if host.eventual:
            yield _counter("sparkflux_tentative_rows", "tentative rows delivered "
                           "(--consistency eventual)", q, host.metrics.tentative_rows)
            yield _counter("sparkflux_corrections", "stable rows delivered in place of "
                           "tentative ones", q, host.metrics.corrections)
            eps = host.core.episodes
            if eps is not None:
                now = eps.episode.state.value
                state = GaugeMetricFamily("sparkflux_consistency_state", "1 for the input's "
                                          "consistency state now (stable, upstream-failure, "
                                          "stabilization)", labels=["query", "state"])
                for each in State:
                    state.add_metric([q, each.value], 1.0 if each.value == now else 0.0)
                yield state
        events = CounterMetricFamily("sparkflux_events", "failures, take-overs, adoptions, "
                                     "catch-ups, moves, stalls and checkpoints so far",
                                     labels=["query", "kind"])
        for kind in ("failure", "take-over", "adoption", "catch-up", "caught-up", "moved",
                     "stall", "checkpoint", "tentative", "corrected"):
            events.add_metric([q, kind], kinds.get(kind, 0))
        yield events
        if p is None:
            return
        for name, value, what in (
                ("sparkflux_input_rows_per_second", p.input_rows_per_s, "input rate"),
                ("sparkflux_processed_rows_per_second", p.processed_rows_per_s,
                 "input rows whose output is complete, per second"),
                ("sparkflux_output_rows_per_second", p.output_rows_per_s, "output rate")):
            g = GaugeMetricFamily(name, f"{what} over the last progress interval",
                                  labels=["query"])
            g.add_metric([q], value)
            yield g
        lat = GaugeMetricFamily("sparkflux_latency_seconds", "latency of the rows delivered "
                                "in the last interval (input admitted to output delivered)",
                                labels=["query", "quantile"])
        for quantile, v in (("0.5", p.latency_p50_s), ("0.99", p.latency_p99_s)):
            if v is not None:
                lat.add_metric([q, quantile], v)
        yield lat
        wm = GaugeMetricFamily("sparkflux_watermark", "event-time watermark of a stage's "
                               "input (the lowest over its live copies)",
                               labels=["query", "stage"])
        for s in p.stages:
            if s.watermark is not None:
                wm.add_metric([q, str(s.stage)], s.watermark)
        yield wm
        keys = GaugeMetricFamily("sparkflux_state_keys", "keys an operator holds (each "
                                 "mini-partition once)", labels=["query", "stage", "operator"])
        nbytes = GaugeMetricFamily("sparkflux_state_bytes", "bytes of state an operator "
                                   "holds (each mini-partition once)",
                                   labels=["query", "stage", "operator"])
        for st in p.state:
            keys.add_metric([q, str(st.stage), st.operator], st.keys)
            nbytes.add_metric([q, str(st.stage), st.operator], st.bytes)
        yield keys
        yield nbytes
        up = GaugeMetricFamily("sparkflux_site_up", "1 for a live site (catching up "
                               "included), 0 for a failed one", labels=["query", "site", "role"])
        copies = GaugeMetricFamily("sparkflux_site_copies", "copies of mini-partitions a "
                                   "site holds", labels=["query", "site"])
        busy = GaugeMetricFamily("sparkflux_site_busy_ratio", "a site's busy share of the "
                                 "last interval", labels=["query", "site"])
        held = GaugeMetricFamily("sparkflux_site_memory_bytes", "bytes a site holds: its "
                                 "partitions' state in memory and buffered rows",
                                 labels=["query", "site"])
        budget = GaugeMetricFamily("sparkflux_site_memory_budget_bytes", "a site's memory "
                                   "budget (--site-memory, --squeeze)", labels=["query", "site"])
        disk = GaugeMetricFamily("sparkflux_site_spilled_bytes", "bytes of a site's partitions "
                                 "on disk (state and input)", labels=["query", "site"])
        for site in p.sites:
            if site.site < 0:
                continue
            up.add_metric([q, str(site.site), site.role], 0 if site.role == "failed" else 1)
            copies.add_metric([q, str(site.site)], site.copies)
            if site.busy is not None:
                busy.add_metric([q, str(site.site)], site.busy)
            if site.memory_bytes is not None:
                held.add_metric([q, str(site.site)], site.memory_bytes)
            if site.budget_bytes is not None:
                budget.add_metric([q, str(site.site)], site.budget_bytes)
            if site.spilled_bytes is not None:
                disk.add_metric([q, str(site.site)], site.spilled_bytes)
        yield up
        yield copies
        yield busy
        yield held
        yield budget
        yield disk
        standby = GaugeMetricFamily("sparkflux_standby_sites", "standby processes waiting to "
                                    "adopt a failed site", labels=["query"])
        standby.add_metric([q], sum(1 for s in p.sites if s.role == "standby"))
        yield standby


def _counter(name: str, what: str, query: str, value: float) -> CounterMetricFamily:
    """A counter of the whole query (labelled with its name only)."""
    c = CounterMetricFamily(name, what, labels=["query"])
    c.add_metric([query], value)
    return c


def progress_json(host: Host) -> dict[str, Any]:
    """What ``/api/progress`` serves: the run, its progress kept and its events."""
    plog = host.progress
    with plog.lock:
        recent = [p.to_dict() for p in plog.recent]
        events = [{"at_s": e.at_s, "kind": e.kind, "site": e.site, "detail": e.detail}
                  for e in plog.events]
        consistency = plog.consistency
    cfg = host.cfg
    return {"name": host.plan.name, "ha": cfg.ha, "replicas": cfg.replicas,
            "sites": host.plan.sites, "partitions": host.plan.partitions,
            "stages": [" > ".join(op.name for op in s.operators) for s in host.plan.stages],
            "phase": host.stats.phase, "done": host.done.is_set(),
            "failure": host.failure, "consistency": consistency, "progress": recent,
            "events": events}


class Dashboard:
    """The dashboard's server on its own thread (see the module)."""

    def __init__(self, host: Host, bind: str, port: int, idle_s: float = IDLE_S) -> None:
        self.host = host
        self.bind = bind
        self.port = port
        self.idle_s = idle_s
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(PrometheusSeries(host))
        self._page = resources.files("sparkflux.runtime").joinpath(
            "dashboard.html").read_text()
        self._plotly: bytes | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.bind}:{self.port}"

    def start(self) -> None:
        """Listen (raises OSError when the port is taken) and serve on a thread."""
        ready = threading.Event()

        def serve() -> None:
            loop = self._loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(self._listen())
            except BaseException as e:  # noqa: BLE001 - given to start()'s caller
                self.error = e
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._close())
            loop.close()

        self._thread = threading.Thread(target=serve, name="sparkflux-dashboard", daemon=True)
        self._thread.start()
        ready.wait(30)
        if self.error is not None:
            raise self.error

    async def _listen(self) -> None:
        app = web.Application()
        app.add_routes([web.get("/", self._index), web.get("/api/progress", self._progress),
                        web.get("/metrics", self._metrics),
                        web.get("/static/plotly.js", self._plotly_js)])
        self._runner = web.AppRunner(app, access_log=None, keepalive_timeout=self.idle_s)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.bind, self.port).start()
        if self.port == 0:  # any free port: the one it got
            self.port = int(self._runner.addresses[0][1])

    async def _close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    async def _index(self, request: web.Request) -> web.Response:
        return web.Response(text=self._page, content_type="text/html")

    async def _progress(self, request: web.Request) -> web.Response:
        body = json.dumps(progress_json(self.host), default=str)
        return web.Response(text=body, content_type="application/json",
                            headers={"Cache-Control": "no-store"})

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": "text/plain; version=0.0.4; "
                                                     "charset=utf-8"})

    async def _plotly_js(self, request: web.Request) -> web.Response:
        if self._plotly is None:
            from plotly.offline import get_plotlyjs

            self._plotly = get_plotlyjs().encode()
        response = web.Response(body=self._plotly, content_type="application/javascript",
                                headers={"Cache-Control": "max-age=3600"})
        response.enable_compression()
        return response


def port_free(bind: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((bind, port))
        except OSError:
            return False
        return True


def start_dashboard(host: Host, bind: str, port: int | None, local: bool) -> Dashboard | None:
    """The run's dashboard, serving (None when off: ``--ui-port -1``, or on a cluster
    without ``--ui-port``). Without a port given, the first free one from ``DEFAULT_PORT``;
    a port given that is taken is a ``PlanError``-worthy mistake the caller reports."""
    if port == -1 or (port is None and not local):
        return None
    candidates = ([port] if port is not None else
                  [p for p in range(DEFAULT_PORT, DEFAULT_PORT + PORTS_TRIED)])
    last: OSError | None = None
    for p in candidates:
        if port is None and not port_free(bind, p):
            continue
        board = Dashboard(host, bind, p)
        try:
            board.start()
        except OSError as e:
            last = e
            continue
        return board
    if port is not None:
        raise OSError(f"the dashboard cannot listen on {bind}:{port}: {last}; give another "
                      f"--ui-port (0: any free port) or --ui-port -1 for none")
    log.warning("no free port for the dashboard in %d..%d; running without it",
                DEFAULT_PORT, DEFAULT_PORT + PORTS_TRIED - 1)
    return None
