"""The driver's part of a checkpoint (docs/design.md §9), sans I/O: which checkpoint is being
taken, at which input SN it cuts, which partition parts are stored, whether the egress has
delivered the cut and the sinks have made it durable, and so when the manifest may be
written, which is what makes a checkpoint complete.

``Checkpoints`` is a field of the driver core (``Boundary``), which feeds it and turns its
answers into actions: ``begin`` names a new checkpoint's cut (None: none now), ``stored``
takes a site's ``PartStored``, ``delivered`` the egress's progress, ``committed`` the sinks'
commit, and each returns what is due next. One checkpoint is taken at a time: the next one
begins only once the last one completed or was given up. It is given up when a site
failure, a move or an adoption changes which copy of a partition writes it (a part may then
never come), when a part could not be written, or when it has taken ``timeout`` seconds;
the next one starts afresh (a site replaces a cut it has not reached with the newer one).

A checkpoint's name in the store is ``checkpoint-<k>``, zero-padded so that names sort by
number; its parts ``checkpoint-<k>/stage-<s>/part-<q>``; its manifest, written last,
``checkpoint-<k>/manifest.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.protocol import control_messages as cm

MANIFEST = "manifest.json"
FORMAT = 1  # the manifest's format: a restart refuses one it does not know


def checkpoint_dir(checkpoint: int) -> str:
    return f"checkpoint-{checkpoint:010d}"


def part_name(checkpoint: int, stage: int, q: int) -> str:
    """Where a partition's part of checkpoint ``checkpoint`` is stored (the store's name)."""
    return f"{checkpoint_dir(checkpoint)}/stage-{stage}/part-{q:05d}"


def manifest_name(checkpoint: int) -> str:
    return f"{checkpoint_dir(checkpoint)}/{MANIFEST}"


@dataclass
class Pending:
    """The checkpoint being taken: cut at input SN ``cut``, begun at ``started``, with the
    driver's own state at the cut (``driver``: the ingress's next SN, the sources'
    positions, the sequencer's held records' count), the parts stored so far
    (``(stage, q) -> (name, bytes)``), whether the egress has delivered every row at or
    below the cut, and whether the sinks have committed them (their records)."""

    checkpoint: int
    cut: int
    started: float
    driver: dict[str, Any]
    parts: dict[tuple[int, int], tuple[str, int]] = field(default_factory=dict)
    delivered: bool = False
    sinks: list[dict[str, Any]] | None = None  # each sink's commit record, once committed
    manifest_sent: bool = False
    held: tuple[Any, ...] = ()  # per stream, the records the sequencer held at the cut


@dataclass(frozen=True)
class Due:
    """What the driver must do next for a checkpoint: commit the sinks at ``cut``
    (``commit``), or write ``manifest`` (``manifest`` not None)."""

    checkpoint: int
    cut: int
    commit: bool = False
    manifest: dict[str, Any] | None = None


@dataclass
class Checkpoints:
    """The driver's record of checkpoints: the one being taken, the completed ones (newest
    last), and why the last one was given up."""

    stages: int
    partitions: int
    fingerprint: dict[str, Any]
    keep: int = 3
    timeout: float = 120.0
    first: int = 0  # the first checkpoint number of this run (after a restored one's)
    pending: Pending | None = None
    completed: list[tuple[int, int]] = field(default_factory=list)  # (checkpoint, cut)
    given_up: list[tuple[int, str]] = field(default_factory=list)
    _next: int = -1

    def __post_init__(self) -> None:
        self._next = self.first

    @property
    def last_cut(self) -> int:
        """The newest completed checkpoint's cut (-1: none)."""
        return self.completed[-1][1] if self.completed else -1

    def begin(self, cut: int, now: float, driver: dict[str, Any], held: tuple[Any, ...] = ()
              ) -> Pending | None:
        """A new checkpoint at input SN ``cut`` (the last SN handed out), unless one is
        being taken (and has not outlasted ``timeout``: then it is given up first) or nothing
        was admitted since the last one's cut."""
        p = self.pending
        if p is not None:
            if now - p.started < self.timeout:
                return None
            self.give_up(f"it took over {self.timeout:g} s")
        if cut < 0 or cut <= self.last_cut:
            return None
        self.pending = Pending(self._next, cut, now, dict(driver), held=held)
        self._next += 1
        return self.pending

    def give_up(self, reason: str) -> int | None:
        """The checkpoint being taken is given up (its parts are left for ``retire``)."""
        p = self.pending
        if p is None:
            return None
        self.given_up.append((p.checkpoint, reason))
        self.pending = None
        return p.checkpoint

    def stored(self, checkpoint: int, stage: int, q: int, name: str, nbytes: int
               ) -> Due | None:
        p = self.pending
        if p is None or p.checkpoint != checkpoint:
            return None  # a given-up checkpoint's late part
        p.parts[(stage, q)] = (name, nbytes)
        return self._manifest_due()

    def delivered(self, egress_sn: int) -> Due | None:
        """The egress's progress: once it passes the cut, the sinks commit."""
        p = self.pending
        if p is None or p.delivered or egress_sn < p.cut:
            return None
        p.delivered = True
        return Due(p.checkpoint, p.cut, commit=True)

    def committed(self, checkpoint: int, sinks: list[dict[str, Any]]) -> Due | None:
        p = self.pending
        if p is None or p.checkpoint != checkpoint:
            return None
        p.sinks = sinks
        return self._manifest_due()

    def written(self, checkpoint: int) -> list[int]:
        """The manifest is written: the checkpoint is complete. Returns the checkpoints to
        remove: those beyond the ``keep`` newest, and every given-up one older than it."""
        p = self.pending
        if p is None or p.checkpoint != checkpoint:
            return []
        self.completed.append((p.checkpoint, p.cut))
        self.pending = None
        old = [k for k, _ in self.completed[:-self.keep]]
        self.completed = self.completed[-self.keep:]
        old += [k for k, _ in self.given_up if k < checkpoint]
        self.given_up = [(k, r) for k, r in self.given_up if k > checkpoint]
        return sorted(old)

    def _manifest_due(self) -> Due | None:
        p = self.pending
        assert p is not None
        if (p.manifest_sent or p.sinks is None
                or len(p.parts) < self.stages * self.partitions):
            return None
        p.manifest_sent = True
        parts = [{"stage": s, "q": q, "name": name, "bytes": nbytes}
                 for (s, q), (name, nbytes) in sorted(p.parts.items())]
        return Due(p.checkpoint, p.cut, manifest={
            "format": FORMAT, "checkpoint": p.checkpoint, "cut": p.cut,
            "dataflow": self.fingerprint, "driver": p.driver, "sinks": p.sinks,
            "parts": parts})


def fingerprint(plan: PhysicalPlan) -> dict[str, Any]:
    """What a checkpoint's state is valid for: the dataflow's stages (their operators, keys
    and schemas), its partitions, its streams and its sinks. A restart with a dataflow whose
    fingerprint differs is refused (``differences``); the sites' number may differ."""
    return {
        "name": plan.name,
        "partitions": plan.partitions,
        "streams": [[s.name, s.event_time, s.lateness] for s in plan.streams],
        "stages": [{"name": st.name, "key": list(st.key),
                    "operators": [type(op).__name__ for op in st.operators],
                    "input": st.input_schema.to_string(show_schema_metadata=False),
                    "output": st.output_schema.to_string(show_schema_metadata=False)}
                   for st in plan.stages],
        "sinks": [s.name for s in plan.sinks],
    }


def differences(was: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs between a checkpoint's dataflow and this run's, one line each."""
    out: list[str] = []
    for key in ("name", "partitions", "streams", "sinks"):
        if was.get(key) != now.get(key):
            out.append(f"{key}: {was.get(key)!r} in the checkpoint, {now.get(key)!r} now")
    a, b = was.get("stages", []), now.get("stages", [])
    if len(a) != len(b):
        out.append(f"stages: {len(a)} in the checkpoint, {len(b)} now")
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        for key in ("name", "key", "operators", "input", "output"):
            if x.get(key) != y.get(key):
                what = f"{key} schema" if key in ("input", "output") else key
                out.append(f"stage {i} ({y.get('name')}): its {what} differs: "
                           f"{x.get(key)!r} in the checkpoint, {y.get(key)!r} now")
    return out


# -- the driver core's events and actions for checkpoints (``Boundary.handle``) ---------------
@dataclass(frozen=True, slots=True, kw_only=True)
class TakeCheckpoint:
    """Take a checkpoint now (every ``--checkpoint-interval``), between two admissions:
    ``sources``, each source's position after the records it has handed to the core (what
    a restart resumes it from)."""

    now: float
    sources: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredFrom:
    """Slot ``slot``'s member reports a part written (or not: ``report.error``)."""

    slot: int
    report: cm.PartStored


@dataclass(frozen=True, slots=True, kw_only=True)
class SinksCommitted:
    """Every sink has made the output up to the pending checkpoint's cut durable; ``sinks``
    is what each recorded of it (``Sink.commit``)."""

    checkpoint: int
    sinks: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ManifestWritten:
    """The checkpoint's manifest is written (or could not be: ``error``)."""

    checkpoint: int
    error: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitSinks:
    """Make every row up to input SN ``cut`` durable in every sink, then say
    ``SinksCommitted``."""

    checkpoint: int
    cut: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteManifest:
    """Write ``manifest`` as ``name`` in the store (and the sequencer's held records beside
    it), then say ``ManifestWritten``."""

    checkpoint: int
    name: str
    manifest: dict[str, Any]
    held: tuple[Any, ...] = ()  # per stream, the records the sequencer held at the cut


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointDone:
    """Checkpoint ``checkpoint`` is complete (cut at input SN ``cut``); ``remove``: the
    older ones to delete from the store."""

    checkpoint: int
    cut: int
    remove: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointGivenUp:
    checkpoint: int
    reason: str
