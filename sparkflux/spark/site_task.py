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
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SiteSettings:
    """What every site task of a run is started with besides the plan, the same for all of
    them: where the driver listens, where the site listens and is reached (``bind_host`` "",
    on a cluster: its own address towards the driver, not every interface), the run's
    security, and the options the sites read: the replica count (1 with ``--ha none``),
    ``--site-cpu`` and ``--link-timeout``. Made once from the run's ``RunConfig``
    (``of``); light to unpickle, so the heavy imports wait for the task body."""

    controller_host: str
    controller_port: int
    bind_host: str
    advertise_host: str
    security: Any
    replicas: int
    cpu_cap: float | None
    link_timeout: float
    checkpoint: str | None = None  # --checkpoint: where the sites write their parts
    restore: int = -1  # the checkpoint the sites start from (-1: none)
    memory: int | None = None  # each site's memory budget in bytes (None: none)
    race: bool = False  # --ha race
    wan: Any = None  # --wan: the links' model (``runtime/wan.py``), and the run's start
    wan_start: float = 0.0
    max_batch_delay: float | None = None  # --max-batch-delay (ms)

    @classmethod
    def of(cls, cfg: Any, controller: tuple[str, int], site_bind: str) -> SiteSettings:
        """The settings of a run of ``cfg`` (a ``RunConfig``) whose driver listens at
        ``controller``; ``site_bind``: where its sites listen ("": their own address)."""
        assert cfg.replicas is not None and cfg.security is not None
        return cls(controller_host=controller[0], controller_port=controller[1],
                   bind_host=site_bind, advertise_host=site_bind, security=cfg.security,
                   replicas=cfg.replicas, cpu_cap=cfg.site_cpu, link_timeout=cfg.link_timeout,
                   checkpoint=cfg.checkpoint, restore=cfg.restore,
                   memory=None if cfg.site_memory is None else int(cfg.site_memory * (1 << 20)),
                   race=cfg.ha == "race", wan=cfg.wan, wan_start=cfg.wan_start,
                   max_batch_delay=cfg.max_batch_delay)


def make_site_task(blob: bytes, settings: SiteSettings
                   ) -> Callable[[int, Any], Iterator[dict[str, Any]]]:
    """The site task: the pickled plan ``blob`` run with ``settings`` in slot ``index``."""
    s = settings

    def site_task(index: int, _rows: Any) -> Iterator[dict[str, Any]]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx is not None else 0
        from sparkflux.runtime.start_report import StartGuard

        host, port = s.controller_host, s.controller_port
        with StartGuard(host, port, s.security, index, attempt) as guard:
            from pyspark import cloudpickle

            from sparkflux.runtime.site import SiteConfig, run_site

            bind, advertise = s.bind_host, s.advertise_host
            if not bind:
                bind = advertise = local_address_towards(host, port)
            cfg = SiteConfig(site=index, attempt=attempt, controller_host=host,
                             controller_port=port, bind_host=bind, advertise_host=advertise,
                             security=s.security, replicas=s.replicas, cpu_cap=s.cpu_cap,
                             link_timeout=s.link_timeout, checkpoint=s.checkpoint,
                             restore=s.restore, memory=s.memory, race=s.race, wan=s.wan,
                             wan_start=s.wan_start, max_batch_delay=s.max_batch_delay)
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
