"""The driver's part of a checkpoint (``control.checkpoints``, inside ``Boundary``), driven
directly with the exact actions asserted: the cut at the last SN handed out, sent in-band to
every live site; the sinks committed once the egress passes it; the manifest once every
part is stored and the sinks committed; complete once the manifest is written; given up on
a failure, a move, an unwritable part or a timeout; old ones removed; a restart's core
numbering on from the cut. The tiny workload of ``test_boundary.py``: 4 sites, 8
partitions, 2 stages."""

from __future__ import annotations

from typing import Any

from sparkflux.control.boundary import Boundary, Deliver, FromSite, Input, InputEnd
from sparkflux.control.checkpoints import (
    CheckpointDone,
    CheckpointGivenUp,
    CommitSinks,
    ManifestWritten,
    SinksCommitted,
    StoredFrom,
    TakeCheckpoint,
    WriteManifest,
    differences,
    fingerprint,
    manifest_name,
    part_name,
)
from sparkflux.control.events import ConnectionClosed
from sparkflux.model.schema import SN
from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.messages import Cut, Data, Outgoing
from sparkflux.sim.workload import tiny_plan
from tests.unit.control.test_boundary import (
    PARTITIONS,
    SITES,
    STAGES,
    egress_data,
    first_batch,
    started,
)


def admitted(b: Boundary) -> int:
    """One batch of input in; the last SN handed out."""
    b.handle(Input(batch=first_batch(), now=1.0))
    return b.ingress.next_isn - 1


def stored(b: Boundary, k: int, skip: tuple[int, int] | None = None) -> list[Any]:
    """Every part of checkpoint k reported stored (but ``skip``), by the site of its first
    copy."""
    out: list[Any] = []
    for s in range(STAGES):
        for q in range(PARTITIONS):
            if (s, q) != skip:
                out += b.handle(StoredFrom(slot=q % SITES, report=cm.PartStored(
                    site=q % SITES, checkpoint=k, stage=s, q=q, name=part_name(k, s, q),
                    nbytes=100 + q)))
    return out


def deliver_up_to(b: Boundary, sn: int) -> list[Any]:
    """Every last-stage partition claims ``sn`` at the egress (from its replica 0)."""
    out: list[Any] = []
    for q in range(PARTITIONS):
        out += b.handle(FromSite(slot=q % SITES, message=egress_data(b, q, 0, [], sn)))
    return [a for a in out if not isinstance(a, Outgoing)]  # the acknowledgements aside


def test_a_checkpoint_cuts_in_band_and_completes_with_its_parts_sinks_and_manifest() -> None:
    b = started()
    cut = admitted(b)
    acts = b.handle(TakeCheckpoint(now=5.0, sources=(4096,)))
    # the cut at the last SN handed out, to every live site on its data connection
    assert acts == [Outgoing(s, Cut(0, 0, cut)) for s in range(SITES)]
    assert stored(b, 0) == []  # the parts alone do not complete it
    # the egress passes the cut: the sinks commit
    acts = deliver_up_to(b, cut)
    assert [a for a in acts if not isinstance(a, Deliver)] == [CommitSinks(checkpoint=0,
                                                                           cut=cut)]
    (manifest,) = b.handle(SinksCommitted(checkpoint=0, sinks=({"parts": 3},
                                                                {"dead_letters": {}})))
    assert isinstance(manifest, WriteManifest) and manifest.name == manifest_name(0)
    m = manifest.manifest
    assert (m["checkpoint"], m["cut"], m["format"]) == (0, cut, 1)
    assert m["driver"]["next_isn"] == cut + 1 and m["driver"]["sources"] == [4096]
    assert m["sinks"] == [{"parts": 3}, {"dead_letters": {}}]
    assert m["dataflow"] == fingerprint(tiny_plan()[0])
    assert len(m["parts"]) == STAGES * PARTITIONS
    assert m["parts"][1] == {"stage": 0, "q": 1, "name": part_name(0, 0, 1), "bytes": 101}
    assert b.handle(ManifestWritten(checkpoint=0)) == [CheckpointDone(checkpoint=0, cut=cut)]
    assert b.checkpoints.last_cut == cut and b.checkpoints.pending is None
    # nothing admitted since: no new checkpoint; new input: checkpoint 1
    assert b.handle(TakeCheckpoint(now=6.0)) == []
    cut1 = admitted(b)
    assert b.handle(TakeCheckpoint(now=7.0)) == [Outgoing(s, Cut(0, 1, cut1))
                                                 for s in range(SITES)]


def test_the_manifest_waits_for_the_last_part_and_a_part_not_written_gives_it_up() -> None:
    b = started()
    cut = admitted(b)
    b.handle(TakeCheckpoint(now=5.0))
    deliver_up_to(b, cut)
    assert b.handle(SinksCommitted(checkpoint=0)) == []  # parts still to come
    assert stored(b, 0, skip=(1, 5)) == []
    acts = b.handle(StoredFrom(slot=1, report=cm.PartStored(
        site=1, checkpoint=0, stage=1, q=5, name=part_name(0, 1, 5), nbytes=0,
        error="OSError: [Errno 28] No space left on device")))
    assert acts == [CheckpointGivenUp(checkpoint=0, reason=(
        "site 1 could not write partition 5 of stage 1: OSError: [Errno 28] No space left "
        "on device"))]
    # the next one begins afresh, numbered on, the given-up one removed once it completes
    cut = admitted(b)
    assert b.handle(TakeCheckpoint(now=6.0)) == [Outgoing(s, Cut(0, 1, cut))
                                                 for s in range(SITES)]
    stored(b, 1)
    deliver_up_to(b, cut)
    assert isinstance(b.handle(SinksCommitted(checkpoint=1))[0], WriteManifest)
    assert b.handle(ManifestWritten(checkpoint=1)) == [
        CheckpointDone(checkpoint=1, cut=cut, remove=(0,))]


def test_a_failure_while_a_checkpoint_is_taken_gives_it_up() -> None:
    b = started()
    admitted(b)
    b.handle(TakeCheckpoint(now=5.0))
    acts = b.handle(ConnectionClosed(site=1, attempt=0, reason="crash", now=6.0))
    assert CheckpointGivenUp(checkpoint=0, reason="site(s) [1] failed while it was taken") \
        in acts
    assert b.checkpoints.pending is None
    # late parts of the given-up checkpoint change nothing
    assert stored(b, 0) == []
    # the next cut goes to the live sites only
    cut = admitted(b)
    assert b.handle(TakeCheckpoint(now=7.0)) == [Outgoing(s, Cut(0, 1, cut))
                                                 for s in (0, 2, 3)]


def test_one_that_outlasts_its_timeout_is_given_up_for_the_next() -> None:
    b = started()
    b.checkpoints.timeout = 30.0
    admitted(b)
    b.handle(TakeCheckpoint(now=5.0))
    cut = admitted(b)
    assert b.handle(TakeCheckpoint(now=20.0)) == []  # still being taken
    assert b.handle(TakeCheckpoint(now=35.0)) == [
        CheckpointGivenUp(checkpoint=0, reason="it took over 30 s"),
        *[Outgoing(s, Cut(0, 1, cut)) for s in range(SITES)]]


def test_only_the_newest_are_kept() -> None:
    b = started()
    b.checkpoints.keep = 2
    done = []
    for k in range(4):
        cut = admitted(b)
        b.handle(TakeCheckpoint(now=float(k)))
        stored(b, k)
        deliver_up_to(b, cut)
        b.handle(SinksCommitted(checkpoint=k))
        done += b.handle(ManifestWritten(checkpoint=k))
    assert [d.remove for d in done] == [(), (), (0,), (1,)]
    assert [k for k, _ in b.checkpoints.completed] == [2, 3]


def test_no_cut_after_the_input_ended() -> None:
    b = started()
    admitted(b)
    b.handle(InputEnd(now=2.0))
    assert b.handle(TakeCheckpoint(now=5.0)) == []


def test_a_restored_core_numbers_on_after_the_cut() -> None:
    b = started()
    cut = admitted(b)
    b.handle(TakeCheckpoint(now=5.0, sources=(4096,)))
    stored(b, 0)
    deliver_up_to(b, cut)
    (w,) = b.handle(SinksCommitted(checkpoint=0))
    assert isinstance(w, WriteManifest)
    r = started()
    r.restore(w.manifest, [None])
    assert r.ingress.next_isn == cut + 1 and r.egress.progress.sn == cut
    assert r.checkpoints.last_cut == cut
    sends = r.handle(Input(batch=first_batch(), now=6.0))
    sns = [sn for o in sends if isinstance(o, Outgoing) and isinstance(o.message, Data)
           and o.message.batch is not None for sn in o.message.batch.column(SN).to_pylist()]
    assert min(sns) == cut + 1  # numbered on after the cut
    cut2 = r.ingress.next_isn - 1
    assert r.handle(TakeCheckpoint(now=7.0)) == [Outgoing(s, Cut(0, 1, cut2))
                                                 for s in range(SITES)]
    # output at or below the cut is no news to the restored egress: no row, its SN stays
    assert all(a.batch.num_rows == 0 and a.progress.sn == cut
               for a in deliver_up_to(r, cut) if isinstance(a, Deliver))


def test_a_checkpoint_of_another_dataflow_says_what_differs() -> None:
    plan = tiny_plan()[0]
    was = fingerprint(plan)
    now = fingerprint(plan)
    now["partitions"] = 16
    now["stages"][1]["key"] = ["dst"]
    now["stages"][1]["operators"] = ["Other"]
    lines = differences(was, now)
    assert lines[0] == "partitions: 8 in the checkpoint, 16 now"
    assert any(line.startswith(f"stage 1 ({was['stages'][1]['name']}): its key differs")
               for line in lines)
    assert any("its operators differs: ['" in line for line in lines)
    assert differences(was, fingerprint(plan)) == []


def test_a_restart_numbers_after_every_checkpoint_in_the_store_and_removes_the_rest() -> None:
    """Restored from checkpoint 2 of a store that also holds complete 1 and incomplete 3
    and 4 (the dead run's last): the next is 5; keeping 2, its completion removes 1 and the
    incomplete ones."""
    b = started()
    cut = admitted(b)
    b.handle(TakeCheckpoint(now=5.0))
    stored(b, 0)
    deliver_up_to(b, cut)
    (w,) = b.handle(SinksCommitted(checkpoint=0))
    assert isinstance(w, WriteManifest)
    manifest = {**w.manifest, "checkpoint": 2}
    r = started()
    r.checkpoints.keep = 2
    r.restore(manifest, [None], complete=(1,), incomplete=(3, 4))
    cut = admitted(r)
    assert r.handle(TakeCheckpoint(now=6.0)) == [Outgoing(s, Cut(0, 5, cut))
                                                 for s in range(SITES)]
    stored(r, 5)
    deliver_up_to(r, cut)
    r.handle(SinksCommitted(checkpoint=5))
    assert r.handle(ManifestWritten(checkpoint=5)) == [
        CheckpointDone(checkpoint=5, cut=cut, remove=(1, 3, 4))]
