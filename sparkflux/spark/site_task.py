"""The body of a site's Spark task, kept free of heavy imports at module level.

Spark's retry of a crashed site task becomes a standby, and the sooner it registers the
sooner its slot is caught up and every partition has two copies again. Its start-up
(importing pyarrow, pandas and the runtime: one to two CPU-seconds) runs at the sites'
priority: started at a lower one it took two to three times as long to adopt its slot on a
busy machine, with no gain in the survivors' latency (docs/design-choices.md).

Everything up to the site's registration runs inside a ``StartGuard``: an error there (the plan
that does not unpickle on this executor, a module it needs that is missing here, a server that
cannot listen) is reported to the driver before the task fails (``runtime/start_report.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


def make_site_task(blob: bytes, host: str, port: int, bind_host: str, advertise_host: str,
                   replicas: int, security: Any, cpu_cap: float | None = None,
                   link_timeout: float = 1.0) -> Callable[[int, Any], Iterator[dict[str, Any]]]:
    """The site task; ``bind_host`` "" (a cluster): the site listens on, and advertises, its
    own address towards the driver, not every interface."""

    def site_task(index: int, _rows: Any) -> Iterator[dict[str, Any]]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx is not None else 0
        from sparkflux.runtime.start_report import StartGuard

        with StartGuard(host, port, security, index, attempt) as guard:
            from pyspark import cloudpickle

            from sparkflux.runtime.site import SiteConfig, run_site

            bind, advertise = bind_host, advertise_host
            if not bind:
                bind = advertise = local_address_towards(host, port)
            cfg = SiteConfig(site=index, attempt=attempt, controller_host=host,
                             controller_port=port, bind_host=bind, advertise_host=advertise,
                             security=security, replicas=replicas, cpu_cap=cpu_cap,
                             link_timeout=link_timeout)
            plan = cloudpickle.loads(blob)  # the dataflow's operators, rebuilt here
            yield run_site(cfg, plan, guard.registered)

    return site_task


def local_address_towards(host: str, port: int) -> str:
    """This machine's address on the route to ``host`` (no packet is sent: a UDP socket's
    ``connect`` only picks the route)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, port))
        return str(s.getsockname()[0])
