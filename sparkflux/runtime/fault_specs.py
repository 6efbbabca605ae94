"""The faults a run's options ask for, as typed records: ``--kill`` (five forms), ``--hang``,
``--cut``/``--isolate``, ``--cut-source``, ``--partition`` and ``--slow``, each parsed from its
spec string here and only here, and each printing back as the spec it came from
(``str(KillAfterRecovery(1, 2.0))`` is ``1@recovered+2``). A bad spec is a ``PlanError`` that
says what to write.

    SITE@WHEN                 KillAt             SIGKILL the site at that moment
    SITE@recovered+SECONDS    KillAfterRecovery  that long after the first recovery completes
    SITE@adopted+SECONDS      KillAdopted        that long after the slot's next process adopts it
    ROLE@move+SECONDS         KillInMove         that long after the run's first move starts
    LEVEL:SITE@WHEN           KillProcess        the site's Python worker, executor or Worker

``WHEN`` (also in ``--hang SITE@WHEN=DURATION``, ``--cut``, ``--isolate`` and ``--slow``) is a
``Moment``: ``SECONDS`` after the input starts, or ``input+RECORDS``, once the ingress has
admitted that many input records. The second is a moment of the run's progress, not of the
clock: the same point of the input on a fast machine and a slow one, which is what a test
wants.

``faults.py`` carries them out; the records are what ``RunOptions`` holds and ``RunConfig``
hands the driver.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sparkflux.model.errors import PlanError

# ``--kill ROLE@move+SECONDS``: the move's old copy's site, the new copy's, the site it is
# built from, the lowest live site that is none of them
MOVE_ROLES = ("source", "destination", "from", "bystander")
# ``--kill LEVEL:SITE@SECONDS``: the process SIGKILLed (``proctree.py``)
PROCESS_LEVELS = ("python", "executor", "worker")
MOST = "most"  # ``--kill worker:most@SECONDS``: the holder of the most sites


@dataclass(frozen=True)
class Admitted:
    """``input+RECORDS``: the moment the ingress has admitted ``records`` input records."""

    records: int

    def __str__(self) -> str:
        return f"input+{self.records}"


Moment = float | Admitted  # seconds after the input starts, or a count of admitted records


def moment_str(at: Moment) -> str:
    """``at`` as a spec writes it."""
    return str(at) if isinstance(at, Admitted) else _num(at)


@dataclass(frozen=True)
class KillAt:
    """``SITE@WHEN``: SIGKILL the site's process at that moment (a slot with no live process
    then: its next one, once it adopts the slot)."""

    site: int
    at: Moment

    def __str__(self) -> str:
        return f"{self.site}@{moment_str(self.at)}"


@dataclass(frozen=True)
class KillAfterRecovery:
    """``SITE@recovered+SECONDS``: kill the site this long after the first recovery
    completes."""

    site: int
    after_s: float

    def __str__(self) -> str:
        return f"{self.site}@recovered+{_num(self.after_s)}"


@dataclass(frozen=True)
class KillAdopted:
    """``SITE@adopted+SECONDS``: kill the slot's next process this long after it adopts the
    slot (a standby killed right after its adoption)."""

    site: int
    after_s: float

    def __str__(self) -> str:
        return f"{self.site}@adopted+{_num(self.after_s)}"


@dataclass(frozen=True)
class KillInMove:
    """``ROLE@move+SECONDS``: kill a site this long after the run's first move starts (a
    failure timed inside a move, the moment make before break is for). ``role`` is one of
    ``MOVE_ROLES`` or a site number."""

    role: str | int
    after_s: float

    def __str__(self) -> str:
        return f"{self.role}@move+{_num(self.after_s)}"


@dataclass(frozen=True)
class KillProcess:
    """``LEVEL:SITE@WHEN``: SIGKILL, from outside, the process of ``level`` (one of
    ``PROCESS_LEVELS``) that holds the site on this machine; ``site`` None: the one holding
    the most sites (``most``). A test tool for a standalone cluster on the driver's
    machine."""

    level: str
    site: int | None
    at: Moment

    def __str__(self) -> str:
        return f"{self.level}:{MOST if self.site is None else self.site}@{moment_str(self.at)}"


def _num(x: float) -> str:
    """``x`` as a spec writes it: ``3`` for 3.0, every digit kept (the spec parses back to the
    same record)."""
    short = f"{x:g}"
    return short if float(short) == x else repr(x)


Kill = KillAt | KillAfterRecovery | KillAdopted | KillInMove | KillProcess


@dataclass(frozen=True)
class Hang:
    """``--hang SITE@WHEN=DURATION``: SIGSTOP the site's process at that moment, SIGCONT it
    ``for_s`` later."""

    site: int
    at: Moment
    for_s: float

    def __str__(self) -> str:
        return f"{self.site}@{moment_str(self.at)}={_num(self.for_s)}"


@dataclass(frozen=True)
class Cut:
    """``--cut SITE@WHEN=DURATION``: drop the packets of the site's links to its peers for
    ``for_s`` from that moment; ``isolate`` (``--isolate``): its links to the driver too."""

    site: int
    at: Moment
    for_s: float
    isolate: bool = False

    @property
    def flag(self) -> str:
        return "--isolate" if self.isolate else "--cut"

    def __str__(self) -> str:
        return f"{self.site}@{moment_str(self.at)}={_num(self.for_s)}"


@dataclass(frozen=True)
class Slow:
    """``--slow SITE@WHEN=FACTOR``: from that moment the site gets ``factor`` times its
    capacity."""

    site: int
    at: Moment
    factor: float

    def __str__(self) -> str:
        return f"{self.site}@{moment_str(self.at)}={_num(self.factor)}"


@dataclass(frozen=True)
class Squeeze:
    """``--squeeze SITE@WHEN=MB``: from that moment the site's memory budget is ``mb``
    megabytes (``protocol/memory.py``): it spills what does not fit."""

    site: int
    at: Moment
    mb: float

    def __str__(self) -> str:
        return f"{self.site}@{moment_str(self.at)}={_num(self.mb)}"


def parse_squeeze(spec: str, sites: int) -> Squeeze:
    """One ``--squeeze SITE@WHEN=MB``, checked."""
    return Squeeze(*_site_at_value("--squeeze", "MB", "1@10=64", spec, sites))


KILL_FORMS = ("SITE@SECONDS (e.g. --kill 1@3), SITE@recovered+SECONDS, SITE@adopted+SECONDS "
              "or SITE@input+RECORDS")


def parse_moment(text: str) -> Moment:
    """``SECONDS`` or ``input+RECORDS``; a ``ValueError`` when it is neither, or negative."""
    value: Moment = (Admitted(int(text.removeprefix("input+"))) if text.startswith("input+")
                     else float(text))
    if (value.records if isinstance(value, Admitted) else value) < 0:
        raise ValueError(text)
    return value


def parse_kill(spec: str, sites: int, master: str | None = None) -> Kill:
    """One ``--kill`` spec, checked against the run's ``sites`` (and, for ``LEVEL:SITE``,
    its ``master``: those need a standalone cluster on this machine)."""
    if ":" in spec:
        return _process_kill(spec, sites, master)
    if "@move+" in spec:
        return _move_kill(spec, sites)
    if "@adopted+" in spec:
        site, after = _site_after(spec, "@adopted+", "SECONDS", "1@adopted+0.2", float, sites)
        return KillAdopted(site, after)
    if "@input+" in spec:
        site, records = _site_after(spec, "@input+", "RECORDS", "1@input+100000", int, sites)
        return KillAt(site, Admitted(records))
    try:
        site_s, at_s = spec.split("@")
        site = int(site_s)
        recovered = at_s.startswith("recovered+")
        at = float(at_s.removeprefix("recovered+"))
    except ValueError:
        raise PlanError(f"--kill {spec!r}: write {KILL_FORMS}") from None
    if not 0 <= site < sites or at < 0:
        raise PlanError(f"--kill {spec!r}: site must be in 0..{sites - 1}, seconds >= 0")
    return KillAfterRecovery(site, at) if recovered else KillAt(site, at)


def _process_kill(spec: str, sites: int, master: str | None) -> KillProcess:
    try:
        level, rest = spec.split(":", 1)
        site_s, at_s = rest.split("@")
        site = None if site_s == MOST else int(site_s)
        at = parse_moment(at_s)
    except ValueError:
        raise PlanError(f"--kill {spec!r}: write LEVEL:SITE@WHEN (WHEN: SECONDS or "
                        f"input+RECORDS), LEVEL one of "
                        f"{', '.join(PROCESS_LEVELS)} and SITE a site or 'most' (e.g. --kill "
                        f"worker:most@20)") from None
    if level not in PROCESS_LEVELS:
        raise PlanError(f"--kill {spec!r}: {level!r} is not one of {', '.join(PROCESS_LEVELS)}")
    if not (site is None or 0 <= site < sites):
        raise PlanError(f"--kill {spec!r}: site must be in 0..{sites - 1} or 'most'")
    if master is not None and master.startswith("local"):
        raise PlanError(f"--kill {spec!r} kills a site's process, executor or Worker on "
                        f"this machine: it needs a Spark standalone cluster here (--master "
                        f"spark://...); in local mode the JVM above the sites is the "
                        f"driver's own")
    return KillProcess(level, site, at)


def _move_kill(spec: str, sites: int) -> KillInMove:
    role_s, _, value_s = spec.partition("@move+")
    try:
        delay = float(value_s)
        role: str | int = role_s if role_s in MOVE_ROLES else int(role_s)
        if isinstance(role, int) and not 0 <= role < sites:
            raise ValueError
    except ValueError:
        raise PlanError(f"--kill {spec!r}: write ROLE@move+SECONDS, ROLE one of "
                        f"{', '.join(MOVE_ROLES)} or a site in 0..{sites - 1}, e.g. "
                        f"--kill from@move+0.5") from None
    if delay < 0:
        raise PlanError(f"--kill {spec!r}: seconds >= 0")
    return KillInMove(role, delay)


N = TypeVar("N", int, float)


def _site_after(spec: str, marker: str, what: str, example: str, kind: Callable[[str], N],
                sites: int) -> tuple[int, N]:
    """``SITE{marker}{what}``, checked."""
    try:
        site_s, value_s = spec.split(marker)
        site, value = int(site_s), kind(value_s)
    except ValueError:
        raise PlanError(f"--kill {spec!r}: write SITE{marker}{what}, e.g. "
                        f"--kill {example}") from None
    if not 0 <= site < sites or value < 0:
        raise PlanError(f"--kill {spec!r}: site must be in 0..{sites - 1}, "
                        f"{what.lower()} >= 0")
    return site, value


def _site_at_value(option: str, what: str, example: str, spec: str, sites: int
                   ) -> tuple[int, Moment, float]:
    """``SITE@WHEN=VALUE``, checked: a site of the run, a moment, a value above 0."""
    try:
        where, value_s = spec.split("=")
        site_s, at_s = where.split("@")
        site, at, value = int(site_s), parse_moment(at_s), float(value_s)
    except ValueError:
        raise PlanError(f"{option} {spec!r}: write SITE@WHEN={what} (WHEN: SECONDS or "
                        f"input+RECORDS), e.g. {option} {example}") from None
    if not 0 <= site < sites or value <= 0:
        raise PlanError(f"{option} {spec!r}: site in 0..{sites - 1}, "
                        f"{what.lower()} > 0")
    return site, at, value


def parse_hang(spec: str, sites: int) -> Hang:
    """One ``--hang SITE@WHEN=DURATION``, checked."""
    return Hang(*_site_at_value("--hang", "DURATION", "1@3=8", spec, sites))


def parse_cut(spec: str, sites: int, isolate: bool = False) -> Cut:
    """One ``--cut SITE@WHEN=DURATION`` (``isolate``: ``--isolate``), checked."""
    flag = "--isolate" if isolate else "--cut"
    return Cut(*_site_at_value(flag, "DURATION", "1@3=45", spec, sites), isolate=isolate)


@dataclass(frozen=True)
class CutSource:
    """``--cut-source NAME@WHEN+DURATION``: the source ``name``'s records are held outside
    the dataflow for ``for_s`` from that moment (a network cut between the data source and
    the ingress), then read as they come; nothing of them is lost."""

    name: str
    at: Moment
    for_s: float

    def __str__(self) -> str:
        return f"{self.name}@{moment_str(self.at)}+{_num(self.for_s)}"


def _at_plus(option: str, form: str, example: str, spec: str) -> tuple[str, Moment, float]:
    """``WHAT@WHEN+DURATION`` (``form`` names WHAT), checked: (what, the moment, seconds
    above 0)."""
    what, sep, rest = spec.partition("@")
    when, plus, duration = rest.rpartition("+")
    try:
        if not (sep and plus and what):
            raise ValueError
        at, seconds = parse_moment(when), float(duration)
    except ValueError:
        raise PlanError(f"{option} {spec!r}: write {form}@WHEN+DURATION (WHEN: SECONDS or "
                        f"input+RECORDS), e.g. {option} {example}") from None
    if seconds <= 0:
        raise PlanError(f"{option} {spec!r}: the duration must be above 0 seconds")
    return what, at, seconds


def parse_cut_source(spec: str) -> CutSource:
    """One ``--cut-source NAME@WHEN+DURATION``, checked (the name against the dataflow's
    sources when the run starts)."""
    return CutSource(*_at_plus("--cut-source", "NAME", "bids@10+15", spec))


DRIVER_SIDE = "driver"  # ``--partition``: the driver, as a member of one of the groups


@dataclass(frozen=True)
class Partition:
    """``--partition A,B/C,D@WHEN+DURATION``: the links between the sites of the two groups
    (and between a group and the driver where ``driver`` is named in it) drop their packets
    for ``for_s`` from that moment; every process stays alive (a network partition)."""

    groups: tuple[tuple[int, ...], tuple[int, ...]]
    driver: int | None  # the group the driver is in (0 or 1), None: reached by both
    at: Moment
    for_s: float

    def __str__(self) -> str:
        sides = [",".join([*map(str, g), *([DRIVER_SIDE] if self.driver == k else [])])
                 for k, g in enumerate(self.groups)]
        return f"{sides[0]}/{sides[1]}@{moment_str(self.at)}+{_num(self.for_s)}"


def parse_partition(spec: str, sites: int) -> Partition:
    """One ``--partition A,B/C,D@WHEN+DURATION``, checked: two groups of distinct sites of
    the run, ``driver`` in at most one of them."""
    example = "0,1/2,3,driver@10+15"
    groups_s, at, seconds = _at_plus("--partition", "A,B/C,D", example, spec)
    sides = groups_s.split("/")
    groups: list[tuple[int, ...]] = []
    driver = None
    try:
        if len(sides) != 2:
            raise ValueError
        for k, side in enumerate(sides):
            members = [m.strip() for m in side.split(",") if m.strip()]
            if DRIVER_SIDE in members:
                if driver is not None:
                    raise ValueError
                driver = k
            groups.append(tuple(int(m) for m in members if m != DRIVER_SIDE))
    except ValueError:
        raise PlanError(f"--partition {spec!r}: write two groups of sites, A,B/C,D, "
                        f"'driver' in one of them at most, then @WHEN+DURATION, e.g. "
                        f"--partition {example}") from None
    both = groups[0] + groups[1]
    if not groups[0] or not groups[1] or len(set(both)) != len(both) or any(
            not 0 <= s < sites for s in both):
        raise PlanError(f"--partition {spec!r}: each group needs sites, each site in one "
                        f"group, every site in 0..{sites - 1}")
    return Partition((groups[0], groups[1]), driver, at, seconds)


@dataclass(frozen=True)
class RescaleAt:
    """``--rescale SITES@WHEN``: spread the running query over ``sites`` sites from that
    moment (``control/rescale.py``); one asked while another runs waits for its end."""

    sites: int
    at: Moment

    def __str__(self) -> str:
        return f"{self.sites}@{moment_str(self.at)}"


def parse_rescale(spec: str) -> RescaleAt:
    """One ``--rescale SITES@WHEN``, checked."""
    sites, sep, when = spec.partition("@")
    try:
        if not sep or not sites.isdigit() or int(sites) < 1:
            raise ValueError(spec)
        return RescaleAt(int(sites), parse_moment(when))
    except ValueError:
        raise PlanError(f"--rescale {spec!r}: write SITES@WHEN, e.g. 6@10 (6 sites 10 s after "
                        f"the input starts) or 3@input+500000") from None


def parse_slow(spec: str, sites: int) -> Slow:
    """One ``--slow SITE@WHEN=FACTOR``, checked."""
    return Slow(*_site_at_value("--slow", "FACTOR", "2@2=0.5", spec, sites))
