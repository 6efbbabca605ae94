"""A site task that fails before it registers tells the driver why, on a connection of its own.

Why this mechanism: the driver must learn, within seconds, that site tasks cannot start and
why, while Spark keeps retrying them (``spark.task.maxFailures`` is high on purpose). Spark
itself does not say so in time: a task's exception reaches the driver's Python only when the
job fails, after every retry; PySpark has no task listener; its status tracker counts failed
attempts but carries no error text. A file the task writes works only where driver and
executors share a disk. The one channel that exists wherever a site can run at all is the
site's own connection to the driver, with the run's secret in hand. So the task catches what
is raised before it registers, opens a connection to the driver (authenticated like every
other, on channel ``REPORT``), sends one typed ``StartFailed`` frame (type, message, where it
was raised, the traceback as text: nothing is pickled, and the frame's size is capped), waits
until the driver has closed the connection (so the report is counted before Spark counts the
failed attempt), then raises the error again, so Spark sees the task fail as before and may
retry it. ``control/start_failures.py`` decides when failures repeat enough to stop the run.
What cannot report (code that fails before this module runs: sparkflux missing on the
executor; a driver the task cannot reach) is still caught, without the traceback, by Spark's
count of failed attempts (``spark/job.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sysconfig
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Literal

import sparkflux
from sparkflux.dataflow.placement import DRIVER
from sparkflux.protocol.control_messages import StartFailed
from sparkflux.runtime import handshake
from sparkflux.runtime.handshake import Claim
from sparkflux.runtime.security import Security
from sparkflux.runtime.transport import ConnectionLost, connect

log = logging.getLogger(__name__)
REPORT_TIMEOUT_S = 5.0  # to reach the driver, send and see it close; then the task fails anyway
MAX_MESSAGE = 2000  # characters of the exception's message
MAX_SOURCE = 400
MAX_TRACEBACK = 60_000  # characters (the report frame's limit is 1 MB: REPORT_MAX_FRAME)
# Frames in these are the engine's or Python's, not the dataflow's own code.
_NOT_USER = (os.path.dirname(os.path.abspath(sparkflux.__file__)),
             *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")))
_NOT_USER_PARTS = ("site-packages", "dist-packages", "pyspark.zip", "/pyspark/")


def _is_user_code(filename: str) -> bool:
    if filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return False
    path = os.path.abspath(filename)
    return not (any(path.startswith(p + os.sep) for p in _NOT_USER)
                or any(part in path for part in _NOT_USER_PARTS))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 15] + " ...(clipped)"


def start_failed(exc: BaseException, site: int, attempt: int) -> StartFailed:
    """The report of ``exc``: where it was raised is the innermost frame of the dataflow's own
    code (a helper module, an operator's ``__setstate__``), else the innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    user = [fr for fr in frames if _is_user_code(fr.filename)]
    at = user[-1] if user else frames[-1] if frames else None
    message = str(exc).strip() or repr(exc)
    return StartFailed(
        site=site, attempt=attempt, error_type=type(exc).__name__,
        message=_clip(message, MAX_MESSAGE),
        file=at.filename if at else "?", line=(at.lineno or 0) if at else 0,
        function=at.name if at else "?", source=_clip((at.line or "") if at else "", MAX_SOURCE),
        traceback=_clip("".join(traceback.format_exception(exc)), MAX_TRACEBACK))


async def send_report(host: str, port: int, security: Security, report: StartFailed,
                      timeout: float = REPORT_TIMEOUT_S) -> None:
    """Send one report and wait for the driver to close the connection (raises
    ConnectionLost or TimeoutError if it cannot)."""
    claim = Claim(handshake.REPORT, report.site, report.attempt, report.site)
    conn = await connect(host, port, "driver (report)", security, claim, (DRIVER, 0), timeout)
    try:
        conn.send(report)
        await asyncio.wait_for(conn.drain(), timeout)
        # The driver reads the one frame and closes: EOF here means it has counted it.
        await asyncio.wait_for(conn.reader.read(), timeout)
    finally:
        conn.close()


def report_start_failure(exc: BaseException, host: str, port: int, security: Security,
                         site: int, attempt: int) -> bool:
    """Report ``exc`` to the driver; whether it went (never raises: the task fails anyway)."""
    try:
        asyncio.run(send_report(host, port, security, start_failed(exc, site, attempt)))
        return True
    except Exception as e:  # noqa: BLE001 - a report that cannot be sent is only logged
        log.warning("site %d could not report its start failure to the driver: %r", site, e)
        return False


class StartGuard:
    """Around a site task's start: an exception raised before ``registered()`` is reported
    (``report_start_failure``) and then propagates unchanged. Not reported: a lost or
    unreachable driver (``ConnectionLost``: a report could not get there either) and what is
    not an ``Exception`` (the task being cancelled or interrupted)."""

    def __init__(self, host: str, port: int, security: Security, site: int, attempt: int,
                 report: Callable[..., bool] = report_start_failure) -> None:
        self.target = (host, port, security)
        self.site = site
        self.attempt = attempt
        self.report = report
        self.is_registered = False
        self.reported: bool | None = None  # None: nothing to report

    def registered(self) -> None:
        self.is_registered = True

    def __enter__(self) -> StartGuard:
        return self

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        if (exc is not None and not self.is_registered and isinstance(exc, Exception)
                and not isinstance(exc, ConnectionLost)):
            self.reported = self.report(exc, *self.target, self.site, self.attempt)
        return False
