"""The run's watchdog: a run that stops progressing says what it waits for, and then stops.

Progress is the egress's output progress (its SN), the rows it has delivered and the records
the ingress has admitted. When none of them moves for ``timeout`` seconds (``--stall-timeout``)
while the run is not finished, the watchdog reports the stall once; when the stall lasts
``STOP_AFTER`` times as long and the input is not merely idle (the ingress is blocked, or all
input is in), it stops the run. A hang is a bug, and a stalled run must say what it waits for
rather than hang silently. A source with nothing to admit is reported but never stopped for:
the output may rightly wait for input that has not come (a window that needs later event
times to close), and an idle source with all of its output delivered is no stall at all.

What it waits for (``describe``) is read from where the progress stands (``Standing``): the
lowest progress the egress has from any last-stage partition, and per stage the lowest input
frontier and the lowest output progress over the live sites' last heartbeats, each with the
partition and the site holding it. Walking from the egress up the stages, the first place
where the progress drops names the holder: output that has not reached the driver, a stage
whose operator holds its output below its input (an open window, or other state that waits
for more input), a stage whose input has not arrived from the stage before it, or a first
stage that has not received what the ingress admitted.

Sans-I/O: the host feeds ``Watchdog.observe`` the time and the progress on its ticker and
reports what it returns; the boundary builds the ``Standing``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sparkflux.model.progress import END_OF_STREAM, NO_PROGRESS

STOP_AFTER = 4  # a stall this many times --stall-timeout long stops the run (unless idle)
SILENT_S = 0.5  # a site whose last heartbeat is older is named (they come ten a second)

InputState = Literal["starting", "admitting", "blocked", "idle", "ended"]


@dataclass(frozen=True, slots=True)
class Stall:
    """Nothing has moved for ``seconds``; ``stop``: the run must stop (else: a warning)."""

    seconds: float
    stop: bool


@dataclass(frozen=True, slots=True)
class Resumed:
    """A stall that was reported has ended: the run progressed after ``seconds``."""

    seconds: float


class Watchdog:
    """When the run stops progressing: a warning after ``timeout`` seconds (once per stall),
    a stop after ``stop_after`` times that unless the input is idle. ``timeout <= 0``: off."""

    def __init__(self, timeout: float, stop_after: float = STOP_AFTER) -> None:
        self.timeout = timeout
        self.stop_after = stop_after
        self._mark: tuple[int, ...] | None = None
        self._since = 0.0
        self._warned = False
        self._stopped = False

    def observe(self, now: float, mark: tuple[int, ...], input_state: InputState,
                owed: bool = True) -> Stall | Resumed | None:
        """``mark``: the progress now (any change is progress); ``owed``: output is still
        owed (False: the source is idle and everything admitted is out, which is no stall)."""
        if self.timeout <= 0:
            return None
        if mark != self._mark or not owed:
            resumed = Resumed(now - self._since) if self._warned else None
            self._mark, self._since, self._warned, self._stopped = mark, now, False, False
            return resumed
        quiet = now - self._since
        if not self._warned:
            if quiet < self.timeout:
                return None
            self._warned = True
            return Stall(quiet, stop=False)
        if (self._stopped or input_state == "idle"
                or quiet < self.stop_after * self.timeout):
            return None
        self._stopped = True
        return Stall(quiet, stop=True)


@dataclass(frozen=True, slots=True)
class StageLow:
    """One stage's lowest progress over the live sites' last heartbeats: its input frontier
    and its output progress, each with the partition and the site holding it."""

    stage: int
    name: str
    in_sn: int
    in_part: int
    in_site: int
    out_sn: int
    out_part: int
    out_site: int


@dataclass(frozen=True, slots=True)
class Standing:
    """Where a run's progress stands: what the watchdog's report is made of."""

    admitted: int  # records admitted (the next input SN)
    output_sn: int  # the egress's progress
    egress_sn: int  # the lowest progress the egress has received from a last-stage partition
    egress_part: int  # ... and that partition
    stages: tuple[StageLow | None, ...]  # None: no live site has reported the stage yet
    input: InputState
    admission: str = ""  # why admission waits, when the input is blocked
    silent: tuple[tuple[int, float], ...] = ()  # (site, seconds) since a late heartbeat
    split: str = ""  # a network partition the run waits to heal (``Controller.split``)
    egress_from: str = ""  # which copy of ``egress_part`` the egress reads (``reads_from``)


def describe(stall: Stall, s: Standing, timeout: float) -> str:
    """The stall's report: how long, where the output and the input stand, what holds it."""
    out = ("no output yet" if s.output_sn <= NO_PROGRESS
           else f"the output is at {_at(s.output_sn)}")
    head = (f"no progress for {stall.seconds:.0f} s: {out}, {s.admitted:,} records admitted"
            f"{_input(s)}.")
    text = f"{head} It waits for {s.split or _silent(s.silent) + holder(s)}."
    if stall.stop:
        return (f"{text} The run stops rather than hang; if the stall is expected, raise "
                f"--stall-timeout (0 turns the watchdog off).")
    if s.input == "idle":
        return text
    return (f"{text} (--stall-timeout {timeout:g}: the run stops if this lasts "
            f"{STOP_AFTER * timeout:g} s)")


def holder(s: Standing) -> str:
    """The first place, walking from the egress up the stages, where the progress drops."""
    last = len(s.stages) - 1
    st = s.stages[last]
    if st is not None and s.egress_sn < st.out_sn:
        return (f"the output of stage {last} ({st.name}) partition {s.egress_part} to reach "
                f"the driver: the egress has it up to {_at(s.egress_sn)} while every copy "
                f"of the stage claims at least {_at(st.out_sn)} (a connection to the "
                f"driver that is slow or stalled{'; ' + s.egress_from if s.egress_from else ''})")
    for k in range(last, -1, -1):
        st = s.stages[k]
        if st is None:
            return f"stage {k}, which no live site has reported on yet"
        if st.in_sn > st.out_sn:
            return (f"stage {k} ({st.name}) partition {st.out_part} on site {st.out_site}, "
                    f"which holds its output at {_at(st.out_sn)} while its input is at "
                    f"{_at(st.in_sn)} or more: its operator keeps an open window, or "
                    f"other state that waits for more input")
        before = s.stages[k - 1] if k else None
        if before is not None and st.in_sn < before.out_sn:
            return (f"the input of stage {k} ({st.name}) partition {st.in_part} on site "
                    f"{st.in_site}: it has {_at(st.in_sn)} while stage {k - 1} claims at "
                    f"least {_at(before.out_sn)} (not read yet: a slow or stalled site, "
                    f"or connection between sites)")
    first, end = s.stages[0], s.stages[last]
    assert first is not None and end is not None
    if first.in_sn < s.admitted - 1:
        return (f"the input of stage 0 ({first.name}) partition {first.in_part} on site "
                f"{first.in_site}: it has input up to {_at(first.in_sn)} of the "
                f"{s.admitted:,} records admitted")
    return (f"nothing the sites report: every stage is as far as its input (the lowest "
            f"output is stage {last} partition {end.out_part} at {_at(end.out_sn)})")


def window_reason(unacked: int, window: int, sn: int, q: int, c: int, site: int) -> str:
    """Why admission waits when ``--window`` is full."""
    return (f"{unacked:,} records admitted are not yet acknowledged by every first-stage "
            f"replica (--window {window:,}); the slowest is stage 0 partition {q} replica {c} "
            f"on site {site}, at {_at(sn)}")


def pool_reason(rows: int, sites: list[int]) -> str:
    """Why admission waits when the ingress's skew buffer is full."""
    names = ", ".join(map(str, sites))
    return (f"the ingress's skew buffer holds {rows:,} rows for site{'s' if len(sites) > 1 else ''}"
            f" {names}, whose connection{'s' if len(sites) > 1 else ''} cannot take more")


def _silent(silent: tuple[tuple[int, float], ...]) -> str:
    """Members whose heartbeat is late come first: the progress they reported is old."""
    if not silent:
        return ""
    sites = ", ".join(str(j) for j, _ in silent)
    times = " and ".join(f"{t:.1f} s" for _, t in silent)
    which = (f"site {sites}, which has" if len(silent) == 1 else f"sites {sites}, which have")
    return (f"{which} sent no heartbeat for {times} (hung, or too busy to send one); by the "
            f"sites' last heartbeats, for ")


def _input(s: Standing) -> str:
    if s.input == "blocked":
        return f"; the ingress is blocked by admission: {s.admission}"
    if s.input == "idle":
        return "; the source has nothing to admit"
    if s.input == "ended":
        return "; all input is admitted"
    return ""


def _at(sn: int) -> str:
    if sn >= END_OF_STREAM:
        return "the end of the stream"
    if sn <= NO_PROGRESS:
        return "no SN yet"
    return f"SN {sn:,}"


__all__ = ["STOP_AFTER", "InputState", "Resumed", "StageLow", "Stall", "Standing", "Watchdog",
           "describe", "holder", "pool_reason", "window_reason"]
