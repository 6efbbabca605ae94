"""The body of a site's Spark task, kept free of heavy imports at module level.

Spark's retry of a crashed site task becomes a standby with nothing to do yet; its start-up
(importing pyarrow, pandas and the runtime: about a CPU-second) would otherwise compete with
the surviving sites for cores exactly while they take over. So a retried attempt lowers its
own priority *before* importing anything heavy.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

STANDBY_NICE = 10


def make_site_task(blob: bytes, host: str, port: int, bind_host: str, advertise_host: str,
                   replicas: int, cpu_cap: float | None = None
                   ) -> Callable[[int, Any], Iterator[dict[str, Any]]]:
    def site_task(index: int, _rows: Any) -> Iterator[dict[str, Any]]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx is not None else 0
        if attempt > 0:
            os.nice(STANDBY_NICE)
        from pyspark import cloudpickle

        from sparkflux.runtime.site import SiteConfig, run_site

        cfg = SiteConfig(site=index, attempt=attempt, controller_host=host,
                         controller_port=port, bind_host=bind_host,
                         advertise_host=advertise_host, replicas=replicas, cpu_cap=cpu_cap)
        yield run_site(cfg, cloudpickle.loads(blob))

    return site_task
