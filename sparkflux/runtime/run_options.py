"""A run's options as one typed, frozen record (``RunOptions``): every option of ``sparkflux
run`` and ``sparkflux.start`` with its type, its default (written here and nowhere else), its
help text and flag, and its check. ``RunOptions(...)`` checks itself and raises a
``PlanError`` that says what to write instead, before anything starts.

The command's parser and its reference page are generated from these fields
(``sparkflux/options.py``), ``sparkflux.start(**options)`` builds one, and the runtime's view
of a run (``RunConfig``, ``run_config.py``) is derived from one (``RunConfig.of``), taking its
defaults from here. It sits in the runtime layer, below those, so that ``RunConfig`` can.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from sparkflux.control.controller import HEARTBEAT_TIMEOUT_S
from sparkflux.model.errors import PlanError
from sparkflux.protocol.consistency import MODES, Eventual
from sparkflux.protocol.site_boundary import LINK_TIMEOUT_S
from sparkflux.runtime.fault_specs import (
    Cut,
    CutSource,
    Hang,
    Kill,
    Partition,
    RescaleAt,
    Slow,
    Squeeze,
    parse_cut,
    parse_cut_source,
    parse_hang,
    parse_kill,
    parse_partition,
    parse_rescale,
    parse_slow,
    parse_squeeze,
)
from sparkflux.runtime.site import SiteConfig
from sparkflux.runtime.wan import WanModel

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
MIN_BATCH_DELAY_MS: float = 0.5  # the shortest --max-batch-delay
FLUX_REPLICAS = 2  # the copies --ha flux keeps of every partition unless --replicas says


def option(default: Any, help: str, *, metavar: str | None = None,
           choices: tuple[str, ...] | None = None, flag: str | None = None) -> Any:
    """A ``RunOptions`` field: its default and what the command's parser shows for it
    (``flag``: when not ``--`` and the field's name with dashes)."""
    meta = {"help": help, "metavar": metavar, "choices": choices, "flag": flag}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class RunOptions:
    """Every option of a run, checked on construction (PlanError says what to change).
    Repeatable fault specs (``kill``, ``hang``, ``cut``, ``isolate``, ``partition``,
    ``cut_source``, ``slow``) may be given as spec strings or as ``fault_specs`` records;
    they are kept as records."""

    sites: int = option(4, "number of sites (Spark tasks)")
    partitions: int = option(32, "mini-partitions per stage")
    ha: str = option("none", "availability mode: none, flux (process pairs with take-over) "
                             "or race (racing replicas: every copy feeds every copy, the first "
                             "to arrive wins)", choices=("none", "flux", "race"))
    replicas: int | None = option(
        None, f"with --ha flux or race: copies of every partition, on different sites "
              f"(default {FLUX_REPLICAS}; K copies survive any K-1 sites failing at once)")
    master: str | None = option(
        None, "Spark master URL (default: embedded local mode local[SITES,400])")
    rate: float | None = option(
        None, "pace the source at R events/s as a push source (drops when full)")
    ingress_buffer: int = option(
        200_000, "records the ingress buffers in --rate mode before it drops")
    window: int = option(
        300_000, "admission: input records admitted and not yet acknowledged by every "
                 "first-stage replica (consumers acknowledge on receipt, so this never waits "
                 "for a window to close)")
    stall_timeout: float = option(
        30.0, "the watchdog: warn, naming the stage and partition that hold the run, when "
              "neither output nor input has moved for this long; stop the run after 4 times as "
              "long unless the source is idle (0: off)", metavar="SECONDS")
    spare_sites: int = option(
        0, "standby sites launched up front (with --ha flux they replace failed sites at "
           "once; Spark's retry of a crashed site is a standby too)")
    site_cpu: float | None = option(
        None, "emulate site capacity: each site's event loop is busy at most this fraction of "
              "wall time (all sites share this machine's cores)", metavar="FRACTION")
    slow: tuple[Slow, ...] = option(
        (), "from that moment the site gets FACTOR times its capacity (WHEN: seconds after the "
            "input starts, or input+RECORDS: once that many input records are admitted)",
        metavar="SITE@WHEN=FACTOR")
    kill: tuple[Kill, ...] = option(
        (), "SIGKILL a site's process at WHEN: seconds after the input starts, or "
            "input+RECORDS, once that many input records are admitted (a slot with no live "
            "process then: its next one, when it adopts the slot); "
            "SITE@recovered+SECONDS: that long after the first recovery completes; "
            "SITE@adopted+SECONDS: that long after the slot's next process adopts it; "
            "ROLE@move+SECONDS: that long after the first move starts, ROLE source, "
            "destination, from or a site. On a standalone cluster on this machine (a test "
            "tool): python:SITE@WHEN, executor:SITE@WHEN or worker:SITE@WHEN SIGKILL "
            "the site's Python worker, its executor JVM or the Worker daemon that launched it "
            "(SITE 'most': the one hosting the most sites)", metavar="SITE@WHEN")
    site_memory: float | None = option(
        None, "each site's memory budget in MB: a site whose partitions' state and buffered "
              "rows exceed it spills whole partitions to its local disk and loads them back "
              "in turn (default: spark.sparkflux.siteMemory if set, else "
              "spark.executor.pyspark.memory shared by the sites of an executor, else none)",
        metavar="MB")
    squeeze: tuple[Squeeze, ...] = option(
        (), "cut a site's memory budget to MB megabytes at WHEN (as --kill's): a site short "
            "of memory spills", metavar="SITE@WHEN=MB")
    wan: str | None = option(
        None, "wide-area links on this machine: a JSON file of one-way latencies between the "
              "driver and every site, jitter, link outages and changes of the latencies "
              "(docs/racing.md)", metavar="FILE")
    placement: str = option(
        "chained", "where the copies of each partition go: chained (chained declustering over "
                   "the sites' failure domains) or latency (each partition near the driver "
                   "and its copies far apart, by a latency matrix: --latencies, else --wan's; "
                   "re-deployed when the latencies the sites measure change; docs/racing.md)",
        choices=("chained", "latency"))
    latencies: str | None = option(
        None, "with --placement latency: the one-way latencies between the driver and every "
              "site measured on your cluster, a JSON file in --wan's format (only its "
              "latency_ms is read; default: the --wan file)", metavar="FILE")
    rescale: tuple[RescaleAt, ...] = option(
        (), "with --ha flux: rescale the running query to SITES sites at WHEN (as --kill's): "
            "new site tasks adopt new slots, or the highest slots retire, the copies moving "
            "by make-before-break moves (one given while another runs waits for it)",
        metavar="SITES@WHEN")
    cut: tuple[Cut, ...] = option(
        (), "drop the packets of a site's links to its peers from WHEN (as --kill's) for "
            "DURATION seconds (iptables on "
            "the loopback interface, a same-machine test tool; the processes and their driver "
            "links live): a partial partition", metavar="SITE@WHEN=DURATION")
    isolate: tuple[Cut, ...] = option(
        (), "as --cut, and the site's links to the driver too", metavar="SITE@WHEN=DURATION")
    partition: tuple[Partition, ...] = option(
        (), "drop the packets of the links between two groups of sites (and between a group "
            "and the driver, where 'driver' is named in it) from WHEN (as --kill's) for "
            "DURATION seconds (iptables on the loopback interface, a same-machine test tool; "
            "every process lives): a network partition", metavar="A,B/C,D@WHEN+DURATION")
    cut_source: tuple[CutSource, ...] = option(
        (), "a network cut between the source NAME and the ingress from WHEN (as --kill's) "
            "for DURATION seconds: its records are held on the far side while the other "
            "sources' keep arriving, then come at once", metavar="NAME@WHEN+DURATION")
    consistency: str = option(
        "strict", "strict: every input waits for every other (a cut source stalls the output "
                  "until it is back); eventual: after --max-delay the run goes on without a "
                  "silent source, its results marked tentative, and corrects them when the "
                  "source is back (the stable output is exactly the strict one)",
        choices=("strict", "eventual"))
    max_delay: float = option(
        2.0, "with --consistency eventual: the longest a record waits for a silent source "
             "before it is processed without it (tentatively)", metavar="SECONDS")
    tentative_mode: str = option(
        "process", "with --consistency eventual: process (tentative rows as soon as a source "
                   "is found silent, and while the backlog is corrected), delay (each held as "
                   "long as --max-delay allows) or suspend (none while the backlog is "
                   "corrected)", choices=MODES)
    tentative_output: str | None = option(
        None, "with --consistency eventual: write the whole output stream a live consumer "
              "saw there (Parquet, a column _op: insert, tentative, undo, rec_done)",
        metavar="PATH")
    unordered_output: bool = option(
        False, "hand each output row on as soon as it passes the egress's duplicate filter, "
               "without waiting for the sequence-number order across partitions (lower "
               "latency for a consumer that does not care about order; every row keeps its "
               "_sn/_snm; docs/racing.md)")
    arrival_order: bool = option(
        False, "with --ha race: run the stages of order-insensitive operators (filters, "
               "maps, projections) and time-window aggregates on their rows as they arrive, "
               "without the sequence-number merge (the racing-replicas paper's "
               "replica-consistent operators; docs/racing.md)")
    stream_replicas: int | None = option(
        None, "with --ha race: each copy takes each input stream from only the N copies of "
              "its producer whose data came first (the others stop sending, and are revived "
              "when one of those fails, moves or stands still 0.3 s behind the others): "
              "fewer bytes, at the price of that stall when a kept sender hangs (the "
              "racing-replicas paper's garbage collection; docs/racing.md)", metavar="N")
    hang: tuple[Hang, ...] = option(
        (), "freeze a site's process (SIGSTOP) at WHEN (as --kill's) for DURATION seconds, then "
            "let it go on (SIGCONT): a hung site, found by its heartbeat",
        metavar="SITE@WHEN=DURATION")
    tls: bool = option(
        False, "TLS on every connection of the run (a certificate made for the run); "
               "connections are authenticated with the run's secret either way")
    max_frame_mb: float | None = option(
        None, "the largest frame a data or control connection accepts (default 256; a larger "
              "frame closes the connection as a protocol error)", metavar="MB")
    max_batch_delay: float | None = option(
        None, "the longest a record waits for its batch to fill at any hop: the push "
              "source's admission (default 20 ms), a busy site's gathering before a pass "
              "(default 10 ms; 50 under --site-cpu) and the resend of frames held for a full "
              "connection (when it drains, at the latest 5 ms); an idle site never gathers. "
              "Lower trades throughput at load for latency", metavar="MS")
    heartbeat_timeout: float = option(
        HEARTBEAT_TIMEOUT_S, f"seconds without a heartbeat before a site counts as failed "
        f"(hung); at least {MIN_HEARTBEAT_TIMEOUT_S:.1f} (a busy site's heartbeats can be a "
        f"second apart)")
    link_timeout: float = option(
        LINK_TIMEOUT_S, "seconds a site may wait on a link to a peer and hear nothing before it "
                        "reports the peer unreachable (a site cut off from its peers, or hung, "
                        f"is excluded); at least {MIN_LINK_TIMEOUT_S:.1f}")
    recovery: str = option(
        "standby", "with --ha flux: rebuild a failed site's replicas on a standby (Spark's "
                   "restarted task or a spare) or at once on the surviving sites",
        choices=("standby", "survivors"))
    standby_wait: float | None = option(
        None, "with --recovery standby: recover onto the surviving sites if no standby has "
              "adopted a failed site's slot after this long (default: measured: at least 5 s, "
              "twice the sites' start, 1.5 times the slowest adoption so far, at most 60 s)",
        metavar="SECONDS")
    balance: bool = option(True, "with --ha flux or race: turn the load-balancing policy off",
                           flag="--no-balance")
    policy: str = option(
        "hybrid", "with --ha flux: which policy moves partitions in the balancing rounds: cpu "
                  "(load), memory (spare memory) or hybrid (memory while a site is short of "
                  "it, else cpu moving only where the receiver has room)",
        choices=("cpu", "memory", "hybrid"))
    balance_delta_min: float = option(
        0.25, "the shortest collection phase of the load-balancing policy", metavar="SECONDS")
    balance_window: float = option(
        2.0, "how far back the load-balancing policy's statistics reach while the placement "
             "is unchanged (0: each collection phase alone)", metavar="SECONDS")
    progress_interval: float = option(
        1.0, "how often the run's progress is taken (query.last_progress, the live view, the "
             "dashboard, the Prometheus series)", metavar="SECONDS")
    ui_port: int | None = option(
        None, "serve the live dashboard and Prometheus /metrics on this port (0: any free "
              "port; -1: off; default: the first free port from 4050 in local mode, off on a "
              "cluster)", metavar="PORT")
    start_timeout: float = option(
        180.0, "give up, saying what the Spark master lacks, when the sites have not all "
               "registered this long after the job was submitted", metavar="SECONDS")
    checkpoint: str | None = option(
        None, "take checkpoints there (a directory, or a URI pyarrow reaches: hdfs://, "
              "s3://, gs://; on a cluster, storage every executor reaches); a run started "
              "with a checkpoint that holds a complete one goes on from the newest",
        metavar="URI")
    checkpoint_interval: float = option(
        10.0, "with --checkpoint: seconds between checkpoints", metavar="SECONDS")
    checkpoint_keep: int = option(
        3, "with --checkpoint: how many complete checkpoints are kept (the older removed)",
        metavar="N")
    restart: int = option(
        0, "with --checkpoint: run the driver under a supervisor that starts it again from its "
           "newest checkpoint when it dies, at most N times, after a back-off from 1 s "
           "doubling to 30 s (not after exit code 2 or 3; docs/supervision.md)", metavar="N")

    @classmethod
    def of(cls, **options: Any) -> RunOptions:
        """The options named in ``options`` (None: the default; an unknown name: PlanError
        listing the options)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise PlanError(f"unknown option(s) {', '.join(unknown)}; the options are: "
                            f"{', '.join(sorted(names))}")
        return cls(**{k: v for k, v in options.items() if v is not None})

    def __post_init__(self) -> None:
        sites = self.sites
        if isinstance(sites, bool) or not isinstance(sites, int) or sites < 1:
            raise PlanError(f"sites={sites!r}: give a number of sites, 1 or more")
        if self.ha not in ("none", "flux", "race"):
            raise PlanError(f"ha={self.ha!r}: use 'none', 'flux' or 'race'")
        if self.policy not in ("cpu", "memory", "hybrid"):
            raise PlanError(f"policy={self.policy!r}: use 'cpu', 'memory' or 'hybrid'")
        if self.recovery not in ("standby", "survivors"):
            raise PlanError(f"recovery={self.recovery!r}: use 'standby' or 'survivors'")
        if self.rate is not None and self.rate <= 0:
            raise PlanError("--rate must be positive")
        if self.spare_sites < 0:
            raise PlanError(f"--spare-sites {self.spare_sites}: give 0 or more")
        replicas_option(self.ha, self.replicas, sites)
        window_option(self.window)
        stall_timeout(self.stall_timeout)
        self._set("rescale", tuple(parse_rescale(str(r)) for r in self.rescale))
        if self.rescale and self.ha != "flux":
            raise PlanError("--rescale moves partitions between sites by catch-up from another "
                            "copy, which needs replicas: add --ha flux")
        for r in self.rescale:
            if not self.replica_count <= r.sites <= self.partitions:
                raise PlanError(f"--rescale {r}: give between {self.replica_count} sites (the "
                                f"copies of every partition, on different sites) and "
                                f"{self.partitions} (--partitions: a site holds one at least)")
        # a fault may name a slot a rescale opens
        most = max([sites, *(r.sites for r in self.rescale)])
        self._set("kill", tuple(parse_kill(str(k), most, self.master) for k in self.kill))
        self._set("hang", tuple(parse_hang(str(h), most) for h in self.hang))
        self._set("squeeze", tuple(parse_squeeze(str(q), most) for q in self.squeeze))
        if self.site_memory is not None and not (isinstance(self.site_memory, (int, float))
                                                 and self.site_memory > 0):
            raise PlanError(f"--site-memory {self.site_memory!r}: give megabytes, above 0")
        self._set("cut", tuple(parse_cut(str(c), most) for c in self.cut))
        self._set("isolate", tuple(parse_cut(str(c), most, True) for c in self.isolate))
        self._set("partition", tuple(parse_partition(str(p), most) for p in self.partition))
        self._set("cut_source", tuple(parse_cut_source(str(c)) for c in self.cut_source))
        self._set("heartbeat_timeout", heartbeat_timeout_option(self.heartbeat_timeout))
        self._set("link_timeout", link_timeout_option(self.link_timeout))
        if self.max_batch_delay is not None:
            self._set("max_batch_delay", max_batch_delay_option(self.max_batch_delay))
        site_cpu_option(self.site_cpu)
        self._set("slow", tuple(parse_slow(str(s), sites) for s in self.slow))
        self._set("tls", bool(self.tls))
        self._set("balance", bool(self.balance))
        seconds_option("--balance-delta-min", self.balance_delta_min)
        balance_window(self.balance_window)
        if self.standby_wait is not None:
            seconds_option("--standby-wait", self.standby_wait)
        seconds_option("start_timeout", self.start_timeout)
        checkpoint_options(self.checkpoint, self.checkpoint_interval, self.checkpoint_keep)
        if not self.progress_interval >= 0.1:
            raise PlanError(f"--progress-interval {self.progress_interval}: give 0.1 seconds "
                            f"or more")
        if self.ui_port is not None and (isinstance(self.ui_port, bool) or not isinstance(
                self.ui_port, int) or not -1 <= self.ui_port <= 65535):
            raise PlanError(f"--ui-port {self.ui_port!r}: give a port number (0: any free "
                            f"port, -1: no dashboard)")
        restart_option(self.restart, self.checkpoint)
        consistency_options(self.consistency, self.max_delay, self.tentative_mode,
                            self.tentative_output)
        race_options(self)
        unordered_options(self)
        if self.wan is not None:
            if self.rescale:
                raise PlanError("--wan does not combine with --rescale yet: its matrix names "
                                "the sites the run starts with")
            WanModel.load(self.wan, sites)  # a bad file fails now, saying what to change
        placement_options(self)

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # normalised while constructed (frozen after)

    @property
    def eventual(self) -> Eventual | None:
        """``--consistency eventual``'s settings, or None (strict)."""
        return consistency_options(self.consistency, self.max_delay, self.tentative_mode,
                                   self.tentative_output)

    @property
    def replica_count(self) -> int:
        """Copies of every partition: ``replicas``, else FLUX_REPLICAS with ``--ha flux`` and
        one without."""
        return self.replicas if self.replicas is not None else default_replicas(self.ha)


def default_replicas(ha: str) -> int:
    """The copies of every partition without ``--replicas``."""
    return FLUX_REPLICAS if ha in ("flux", "race") else 1


# What --ha race does not combine with yet: the option, and what it needs of the run
RACE_ALONE = (("rescale", "--rescale"),)


def race_options(o: RunOptions) -> None:
    """``--ha race`` runs without rescaling and eventual consistency for now (the moves of
    balancing and recovery, spilling under a memory budget and checkpoints do run), and its
    stages in arrival order neither spill nor take a checkpoint's cut yet: a combination
    fails fast, saying what to drop."""
    if o.arrival_order and o.ha != "race":
        raise PlanError("--arrival-order is an option of --ha race (only racing copies "
                        "run stages in arrival order): drop it, or add --ha race")
    if o.stream_replicas is not None and o.ha != "race":
        raise PlanError("--stream-replicas is an option of --ha race (only racing copies "
                        "send every stream from every copy): drop it, or add --ha race")
    if o.ha != "race":
        return
    if o.stream_replicas is not None and not 1 <= o.stream_replicas < o.replica_count:
        most = o.replica_count - 1
        keeps = "1" if most == 1 else f"1 to {most}"
        raise PlanError(f"--stream-replicas {o.stream_replicas}: each copy keeps {keeps} of "
                        f"the {o.replica_count} copies of each input stream (--replicas "
                        f"{o.replica_count}); give {'that' if most == 1 else 'one of those'}, "
                        f"or drop it to race every copy")
    held = [flag for name, flag in (("site_memory", "--site-memory"), ("squeeze", "--squeeze"),
                                    ("checkpoint", "--checkpoint")) if getattr(o, name)]
    if o.arrival_order and held:
        raise PlanError(f"--arrival-order does not combine with {' and '.join(held)} yet "
                        f"(a stage run in arrival order neither spills nor cuts for a "
                        f"checkpoint): drop one of them")
    given = [flag for name, flag in RACE_ALONE if getattr(o, name)]
    if o.consistency != "strict":
        given.append("--consistency eventual")
    if given:
        raise PlanError(f"--ha race does not combine with {', '.join(given)} yet: drop "
                        f"{'it' if len(given) == 1 else 'them'}, or use --ha flux")


def unordered_options(o: RunOptions) -> None:
    """``--unordered-output`` hands rows on above the merge's frontier: a checkpoint's cut
    (the output delivered up to it) and eventual consistency's corrections (held above the
    episode's start) both count on the order, so those combinations fail fast."""
    if not o.unordered_output:
        return
    given = [flag for flag, on in (("--checkpoint", o.checkpoint is not None),
                                   ("--consistency eventual", o.consistency != "strict"))
             if on]
    if given:
        raise PlanError(f"--unordered-output does not combine with {', '.join(given)}: the "
                        f"output order is what {'they count' if len(given) > 1 else 'it counts'}"
                        f" on; drop one of them")


def placement_options(o: RunOptions) -> None:
    """``--placement latency`` needs a latency matrix (``--latencies``, else ``--wan``'s)
    and a fixed set of sites; ``--latencies`` means nothing without it."""
    if o.placement == "chained":
        if o.latencies is not None:
            raise PlanError("--latencies places the copies with --placement latency: add it, "
                            "or drop --latencies")
        return
    if o.latencies is None and o.wan is None:
        raise PlanError("--placement latency places the copies by a latency matrix: give "
                        "--latencies FILE (one-way milliseconds between the driver and every "
                        "site, docs/racing.md) or --wan FILE")
    if o.rescale:
        raise PlanError("--placement latency does not combine with --rescale yet: a rescale "
                        "re-places the copies by chained declustering; drop one of them")
    if o.latencies is not None:
        WanModel.load(o.latencies, o.sites, "--latencies")


def latency_matrix(o: RunOptions) -> tuple[tuple[float, ...], ...] | None:
    """The one-way latencies the copies are placed by (``--latencies``, else ``--wan``'s),
    or None without a file."""
    path = o.latencies if o.latencies is not None else o.wan
    if path is None:
        return None
    flag = "--latencies" if o.latencies is not None else "--wan"
    return WanModel.load(path, o.sites, flag).latency_ms


def replicas_option(ha: str, replicas: int | None, sites: int) -> int:
    """``--replicas``, checked against ``--ha`` and ``--sites`` (a bad one fails fast)."""
    if replicas is None:
        return default_replicas(ha)
    if ha not in ("flux", "race"):
        raise PlanError("--replicas needs --ha flux or --ha race (--ha none keeps one copy of "
                        "every partition)")
    if replicas < FLUX_REPLICAS:
        mode = "Flux-HA" if ha == "flux" else "Racing replicas"
        raise PlanError(f"--replicas {replicas}: {mode} keeps at least {FLUX_REPLICAS} copies "
                        f"of every partition (for one copy, use --ha none)")
    if replicas > sites:
        raise PlanError(f"--replicas {replicas} keeps {replicas} copies of every partition on "
                        f"different sites: use --sites >= {replicas}")
    return replicas


def consistency_options(consistency: str, max_delay: float, mode: str,
                        tentative_output: str | None) -> Eventual | None:
    """``--consistency`` and what goes with it: the eventual mode's settings, or None."""
    if consistency not in ("strict", "eventual"):
        raise PlanError(f"--consistency {consistency!r}: use 'strict' or 'eventual'")
    if mode not in MODES:
        raise PlanError(f"--tentative-mode {mode!r}: use {', '.join(MODES)}")
    if isinstance(max_delay, bool) or not isinstance(max_delay, int | float) \
            or not max_delay > 0:
        raise PlanError(f"--max-delay {max_delay!r}: give a positive number of seconds")
    if consistency == "strict":
        if tentative_output is not None:
            raise PlanError("--tentative-output writes the tentative rows and corrections of "
                            "--consistency eventual: add --consistency eventual")
        return None
    return Eventual(float(max_delay), mode)


def restart_option(restart: int, checkpoint: str | None) -> int:
    """``--restart N``: 0 or more, and only with ``--checkpoint``: the supervisor starts the
    command again as it was given, so without a checkpoint to resume from, a restart would
    produce the output again from the start."""
    if isinstance(restart, bool) or not isinstance(restart, int) or restart < 0:
        raise PlanError(f"--restart {restart!r}: give a number of restarts, 0 or more")
    if restart > 0 and not checkpoint:
        raise PlanError(f"--restart {restart} starts the run again from its newest checkpoint: "
                        f"give --checkpoint DIR too; without one a restart would produce the "
                        f"output again from the start")
    return restart


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


def max_batch_delay_option(value: float) -> float:
    """``--max-batch-delay``: milliseconds, at least ``MIN_BATCH_DELAY_MS`` (below it a timer
    wakes more often than the event loop can serve it, and every pass carries a row or two)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PlanError(f"--max-batch-delay {value!r}: give milliseconds, at least "
                        f"{MIN_BATCH_DELAY_MS:g}")
    if not value >= MIN_BATCH_DELAY_MS:
        raise PlanError(f"--max-batch-delay {value} is too short: batches of a row or two cost "
                        f"a pass and a frame each; use at least {MIN_BATCH_DELAY_MS:g} ms")
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


def checkpoint_options(uri: str | None, interval: float, keep: int) -> None:
    """``--checkpoint``, ``--checkpoint-interval`` and ``--checkpoint-keep``."""
    if uri is not None and (not isinstance(uri, str) or not uri.strip()):
        raise PlanError(f"--checkpoint {uri!r}: give a directory or a URI (hdfs://, s3://, "
                        f"gs://, file://)")
    if isinstance(interval, bool) or not isinstance(interval, int | float) or not interval > 0:
        raise PlanError(f"--checkpoint-interval {interval!r}: give a positive number of "
                        f"seconds")
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise PlanError(f"--checkpoint-keep {keep!r}: keep at least 1 checkpoint")
