"""A run's options, as ``sparkflux run`` takes them and as ``sparkflux.start`` takes them
(keyword arguments named like the command's options: ``--spare-sites`` is ``spare_sites``),
checked and turned into a ``RunConfig``. A bad option is a ``PlanError`` that says what to
write instead, before anything starts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkflux.operators.base import PlanError
from sparkflux.runtime.run_config import RunConfig
from sparkflux.runtime.site import LINK_TIMEOUT_S, SiteConfig

# The smallest --heartbeat-timeout: the longest a live site's heartbeats were seen apart, with
# a margin. The sites send one every HEARTBEAT_INTERVAL_S on their event loop, and the driver
# reads them and ticks the controller on its own, so a heartbeat is late whenever either loop
# is busy (a scheduler pass on a big batch, GC, a machine overloaded by the sites, the driver
# and the JVM). bench/heartbeat_gaps.py on this 2-core machine (netmon, 2M events, --ha flux):
# 0.2 s at 4 sites with the default batch, unpaced or --site-cpu 0.4; 0.46 s at 8 sites with
# --batch-size 65536; 0.94 s with --batch-size 262144 (the driver's loop held by the batch).
# Twice that worst, and 20 intervals.
HEARTBEAT_INTERVAL_S: float = SiteConfig.heartbeat_interval
MIN_HEARTBEAT_TIMEOUT_S: float = max(2.0, 20 * HEARTBEAT_INTERVAL_S)
# The smallest --link-timeout: twice the longest a site's loop was seen late (0.46 s).
MIN_LINK_TIMEOUT_S: float = 1.0

# Every option and its default (the command's defaults).
DEFAULTS: dict[str, Any] = {
    "sites": 4, "partitions": 32, "ha": "none", "replicas": None, "master": None,
    "rate": None, "ingress_buffer": 200_000, "window": 300_000, "stall_timeout": 30.0,
    "kill": (), "hang": (), "cut": (), "isolate": (), "slow": (), "tls": False,
    "max_frame_mb": None,
    "heartbeat_timeout": 10.0, "link_timeout": LINK_TIMEOUT_S, "spare_sites": 0,
    "site_cpu": None, "recovery": "standby",
    "balance": True, "balance_delta_min": 0.25, "balance_window": 2.0, "standby_wait": None,
    "start_timeout": 180.0,
}


def run_config(**options: Any) -> RunConfig:
    """The ``RunConfig`` of ``options`` (unknown names and bad values: PlanError)."""
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise PlanError(f"unknown option(s) {', '.join(unknown)}; the options are: "
                        f"{', '.join(sorted(DEFAULTS))}")
    o = DEFAULTS | {k: v for k, v in options.items() if v is not None}
    sites = o["sites"]
    if not isinstance(sites, int) or sites < 1:
        raise PlanError(f"sites={sites!r}: give a number of sites, 1 or more")
    if o["ha"] not in ("none", "flux"):
        raise PlanError(f"ha={o['ha']!r}: use 'none' or 'flux'")
    if o["recovery"] not in ("standby", "survivors"):
        raise PlanError(f"recovery={o['recovery']!r}: use 'standby' or 'survivors'")
    if o["rate"] is not None and o["rate"] <= 0:
        raise PlanError("--rate must be positive")
    if o["spare_sites"] < 0:
        raise PlanError(f"--spare-sites {o['spare_sites']}: give 0 or more")
    kills = list(o["kill"])
    return RunConfig(
        sites=sites, partitions=o["partitions"], master=o["master"], ha=o["ha"],
        replicas=replicas_option(o["ha"], o["replicas"], sites), rate=o["rate"],
        ingress_buffer=o["ingress_buffer"], window=window_option(o["window"]),
        stall_timeout=stall_timeout(o["stall_timeout"]),
        kills=parse_kills(kills, sites), adopted_kills=parse_adopted_kills(kills, sites),
        input_kills=parse_input_kills(kills, sites), move_kills=parse_move_kills(kills, sites),
        process_kills=parse_process_kills(kills, sites, o["master"]),
        hangs=parse_hangs(list(o["hang"]), sites), tls=bool(o["tls"]),
        cuts=parse_cuts(list(o["cut"]), list(o["isolate"]), sites),
        max_frame_mb=o["max_frame_mb"],
        heartbeat_timeout=heartbeat_timeout_option(o["heartbeat_timeout"]),
        link_timeout=link_timeout_option(o["link_timeout"]),
        spares=o["spare_sites"], site_cpu=site_cpu_option(o["site_cpu"]),
        slows=parse_slows(list(o["slow"]), sites), recovery=o["recovery"],
        balance=bool(o["balance"]),
        delta_min=seconds_option("--balance-delta-min", o["balance_delta_min"]),
        window_s=balance_window(o["balance_window"]),
        standby_wait=(None if o["standby_wait"] is None
                      else seconds_option("--standby-wait", o["standby_wait"])),
        start_timeout=seconds_option("start_timeout", o["start_timeout"]))


def options_of(args: Any) -> dict[str, Any]:
    """The options in parsed ``sparkflux run`` arguments (absent ones: their defaults)."""
    out = {k: getattr(args, k) for k in DEFAULTS if hasattr(args, k)}
    if getattr(args, "no_balance", False):
        out["balance"] = False
    return out


def replicas_option(ha: str, replicas: int | None, sites: int) -> int:
    """``--replicas``, checked against ``--ha`` and ``--sites`` (a bad one fails fast)."""
    if replicas is None:
        return 2 if ha == "flux" else 1
    if ha != "flux":
        raise PlanError("--replicas needs --ha flux (--ha none keeps one copy of every "
                        "partition)")
    if replicas < 2:
        raise PlanError(f"--replicas {replicas}: Flux-HA keeps at least 2 copies of every "
                        f"partition (for one copy, use --ha none)")
    if replicas > sites:
        raise PlanError(f"--replicas {replicas} keeps {replicas} copies of every partition on "
                        f"different sites: use --sites >= {replicas}")
    return replicas


def parse_kills(specs: list[str], sites: int) -> tuple[tuple[int, float], ...]:
    """``SITE@SECONDS`` options, checked (a bad one fails fast with what to change).

    ``SITE@recovered+SECONDS`` kills the site that long after the first recovery completes;
    it comes back with a negative time: -(1 + SECONDS)."""
    out = []
    for spec in specs:
        if "@adopted+" in spec or "@input+" in spec or "@move+" in spec or ":" in spec:
            continue  # parse_adopted_kills, parse_input_kills, parse_move_kills,
            # parse_process_kills
        try:
            site_s, at_s = spec.split("@")
            site = int(site_s)
            if at_s.startswith("recovered+"):
                out.append((site, -1.0 - float(at_s.removeprefix("recovered+"))))
                if not 0 <= site < sites:
                    raise ValueError
                continue
            at = float(at_s)
        except ValueError:
            raise PlanError(f"--kill {spec!r}: write SITE@SECONDS (e.g. --kill 1@3), "
                            f"SITE@recovered+SECONDS, SITE@adopted+SECONDS or "
                            f"SITE@input+RECORDS") from None
        if not 0 <= site < sites or at < 0:
            raise PlanError(f"--kill {spec!r}: site must be in 0..{sites - 1}, seconds >= 0")
        out.append((site, at))
    return tuple(out)


def parse_process_kills(specs: list[str], sites: int, master: str | None
                        ) -> tuple[tuple[str, int, float], ...]:
    """``LEVEL:SITE@SECONDS`` options: SIGKILL the process that holds a site on this machine,
    ``python`` (the site's own process, from outside), ``executor`` (its executor JVM) or
    ``worker`` (the Worker daemon JVM that launched it); SITE may be ``most``: the one holding
    the most sites. A test tool for a standalone cluster on the driver's machine
    (``runtime/proctree.py``): in local mode the JVM above the sites is the driver's."""
    from sparkflux.runtime.proctree import LEVELS
    from sparkflux.runtime.run_config import MOST_SITES

    out = []
    for spec in specs:
        if ":" not in spec:
            continue
        try:
            level, rest = spec.split(":", 1)
            site_s, at_s = rest.split("@")
            site = MOST_SITES if site_s == "most" else int(site_s)
            at = float(at_s)
        except ValueError:
            raise PlanError(f"--kill {spec!r}: write LEVEL:SITE@SECONDS, LEVEL one of "
                            f"{', '.join(LEVELS)} and SITE a site or 'most' (e.g. --kill "
                            f"worker:most@20)") from None
        if level not in LEVELS:
            raise PlanError(f"--kill {spec!r}: {level!r} is not one of {', '.join(LEVELS)}")
        if not (site == MOST_SITES or 0 <= site < sites) or at < 0:
            raise PlanError(f"--kill {spec!r}: site must be in 0..{sites - 1} or 'most', "
                            f"seconds >= 0")
        if master is not None and master.startswith("local"):
            raise PlanError(f"--kill {spec!r} kills a site's process, executor or Worker on "
                            f"this machine: it needs a Spark standalone cluster here (--master "
                            f"spark://...); in local mode the JVM above the sites is the "
                            f"driver's own")
        out.append((level, site, at))
    return tuple(out)


def parse_adopted_kills(specs: list[str], sites: int) -> tuple[tuple[int, float], ...]:
    """``SITE@adopted+SECONDS`` options: kill the slot's next process that long after it
    adopts the slot (a standby killed right after its adoption)."""
    return _site_after("@adopted+", "SECONDS", "1@adopted+0.2", float, specs, sites)


def parse_input_kills(specs: list[str], sites: int) -> tuple[tuple[int, int], ...]:
    """``SITE@input+RECORDS`` options: kill the site once that many input records have been
    admitted (a fault timed by the run's progress, not the clock: the same moment of the
    run on a fast machine and a slow one)."""
    return _site_after("@input+", "RECORDS", "1@input+100000", int, specs, sites)


MOVE_ROLES = ("source", "destination", "from", "bystander")


def parse_move_kills(specs: list[str], sites: int) -> tuple[tuple[str, float], ...]:
    """``ROLE@move+SECONDS`` options: kill a site that long after the run's first move starts
    (a failure timed inside a move, the moment make before break is for). ROLE is the move's
    ``source`` (the old copy's site), ``destination``, ``from`` (the site the new copy is
    built from), ``bystander`` (the lowest live site that is none of them) or a site
    number."""
    out = []
    for spec in specs:
        if "@move+" not in spec:
            continue
        role, _, value_s = spec.partition("@move+")
        try:
            delay = float(value_s)
            if role not in MOVE_ROLES and not 0 <= int(role) < sites:
                raise ValueError
        except ValueError:
            raise PlanError(f"--kill {spec!r}: write ROLE@move+SECONDS, ROLE one of "
                            f"{', '.join(MOVE_ROLES)} or a site in 0..{sites - 1}, e.g. "
                            f"--kill from@move+0.5") from None
        if delay < 0:
            raise PlanError(f"--kill {spec!r}: seconds >= 0")
        out.append((role, delay))
    return tuple(out)


def _site_after(marker: str, what: str, example: str, kind: Callable[[str], Any],
                specs: list[str], sites: int) -> tuple[tuple[int, Any], ...]:
    """The ``--kill SITE{marker}{what}`` options among ``specs``, checked."""
    out = []
    for spec in specs:
        if marker not in spec:
            continue
        try:
            site_s, value_s = spec.split(marker)
            site, value = int(site_s), kind(value_s)
        except ValueError:
            raise PlanError(f"--kill {spec!r}: write SITE{marker}{what}, e.g. "
                            f"--kill {example}") from None
        if not 0 <= site < sites or value < 0:
            raise PlanError(f"--kill {spec!r}: site must be in 0..{sites - 1}, "
                            f"{what.lower()} >= 0")
        out.append((site, value))
    return tuple(out)


def _site_at_value(option: str, what: str, example: str, specs: list[str], sites: int
                   ) -> tuple[tuple[int, float, float], ...]:
    """``SITE@SECONDS=VALUE`` options, checked: a site of the run, seconds >= 0, a value
    above 0 (a bad one fails fast with what to write)."""
    out = []
    for spec in specs:
        try:
            where, value_s = spec.split("=")
            site_s, at_s = where.split("@")
            site, at, value = int(site_s), float(at_s), float(value_s)
        except ValueError:
            raise PlanError(f"{option} {spec!r}: write SITE@SECONDS={what}, e.g. "
                            f"{option} {example}") from None
        if not 0 <= site < sites or at < 0 or value <= 0:
            raise PlanError(f"{option} {spec!r}: site in 0..{sites - 1}, seconds >= 0, "
                            f"{what.lower()} > 0")
        out.append((site, at, value))
    return tuple(out)


def parse_hangs(specs: list[str], sites: int) -> tuple[tuple[int, float, float], ...]:
    """``--hang SITE@SECONDS=DURATION`` options, checked."""
    return _site_at_value("--hang", "DURATION", "1@3=8", specs, sites)


def parse_cuts(cuts: list[str], isolates: list[str], sites: int
               ) -> tuple[tuple[int, float, float, bool], ...]:
    """``--cut SITE@SECONDS=DURATION`` (the site's links to its peers) and ``--isolate``
    (its driver links too), checked: (site, at, duration, driver)."""
    return (tuple((s, at, d, False) for s, at, d in
                  _site_at_value("--cut", "DURATION", "1@3=45", cuts, sites))
            + tuple((s, at, d, True) for s, at, d in
                    _site_at_value("--isolate", "DURATION", "1@3=45", isolates, sites)))


def seconds_option(option: str, value: float) -> float:
    if not value > 0:
        raise PlanError(f"{option} {value}: give a positive number of seconds")
    return value


def heartbeat_timeout_option(value: float) -> float:
    """``--heartbeat-timeout``: at least ``MIN_HEARTBEAT_TIMEOUT_S``; a shorter one excludes
    live sites whose heartbeat is merely late, and the run then ends on a lost partition or a
    failed start that hides why."""
    least = f"{MIN_HEARTBEAT_TIMEOUT_S:.1f}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PlanError(f"--heartbeat-timeout {value!r}: give a number of seconds, at least "
                        f"{least}")
    if not value >= MIN_HEARTBEAT_TIMEOUT_S:
        raise PlanError(f"--heartbeat-timeout {value} is too close to the sites' heartbeat "
                        f"interval ({HEARTBEAT_INTERVAL_S:g} s): a site that is merely busy (a "
                        f"big batch, GC, a loaded machine) sends none for up to a second and "
                        f"would be excluded as hung; use at least {least}")
    return float(value)


def link_timeout_option(value: float) -> float:
    """``--link-timeout``: at least ``MIN_LINK_TIMEOUT_S``. A peer link waited on in silence
    this long is reported, and its cut-off or hung end excluded; a live site's event loop
    can be half a second late (see ``MIN_HEARTBEAT_TIMEOUT_S``), so a shorter one would
    exclude busy sites."""
    least = f"{MIN_LINK_TIMEOUT_S:.1f}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PlanError(f"--link-timeout {value!r}: give a number of seconds, at least {least}")
    if not value >= MIN_LINK_TIMEOUT_S:
        raise PlanError(f"--link-timeout {value} is too short: a site that is merely busy can "
                        f"leave its links quiet for half a second and would be excluded as cut "
                        f"off; use at least {least}")
    return float(value)


def window_option(value: int) -> int:
    """``--window``: input records admitted and not yet acknowledged by every first-stage
    replica. A window smaller than a source batch admits one batch at a time."""
    if not value >= 1:
        raise PlanError(f"--window {value}: give a number of input records, 1 or more")
    return value


def stall_timeout(value: float) -> float:
    if not value >= 0:
        raise PlanError(f"--stall-timeout {value}: give seconds, 0 or more (0: no watchdog)")
    return value


def balance_window(value: float) -> float:
    if not value >= 0:
        raise PlanError(f"--balance-window {value}: give seconds, 0 or more (0: each "
                        "collection phase alone)")
    return value


def site_cpu_option(value: float | None) -> float | None:
    if value is not None and not 0.0 < value <= 1.0:
        raise PlanError(f"--site-cpu {value}: give a fraction of wall time in (0, 1], e.g. 0.4")
    return value


def parse_slows(specs: list[str], sites: int) -> tuple[tuple[int, float, float], ...]:
    """``--slow SITE@SECONDS=FACTOR`` options, checked."""
    return _site_at_value("--slow", "FACTOR", "2@2=0.5", specs, sites)


