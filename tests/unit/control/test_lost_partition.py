"""The message of a run that cannot go on (``control/lost_partition.py``): which sites, which
partitions per stage, and what makes such failures survivable."""

from __future__ import annotations

from collections.abc import Callable

from sparkflux.control.lost_partition import lost_partition
from sparkflux.dataflow.placement import NOWHERE, Layout

LAYOUT = Layout(4, 8, 2)  # partition q on sites q mod 4 and (q + 1) mod 4


def complete_unless(dead: set[int], rebuilding: set[tuple[int, int]] = frozenset()
                    ) -> Callable[[int, int, int], bool]:
    """A copy is complete unless its site is dead, it is nowhere, or (site, stage) is being
    rebuilt."""
    def complete(stage: int, q: int, c: int) -> bool:
        site = LAYOUT.site_of(q, c)
        return site != NOWHERE and site not in dead and (site, stage) not in rebuilding
    return complete


def test_no_message_while_every_partition_has_a_complete_copy() -> None:
    assert lost_partition(LAYOUT, 2, complete_unless({1}), {1}, 1, "standby") is None
    # sites 1 and 3 share no partition: both failed, nothing is lost
    assert lost_partition(LAYOUT, 2, complete_unless({1, 3}), {1, 3}, 3, "standby") is None


def test_two_neighbours_failing_names_both_and_the_partitions_per_stage() -> None:
    msg = lost_partition(LAYOUT, 2, complete_unless({1, 2}), {1, 2}, 2, "standby")
    assert msg is not None
    assert msg.startswith("sites 1 and 2 failed before either could be recovered; no complete "
                          "replica is left of stage 0: partitions 1, 5; stage 1: partitions "
                          "1, 5. Their state is lost")
    assert "replica r of partition q on site (q + r) mod 4" in msg
    assert "--spare-sites" in msg  # recovery by standby: launching them up front is sooner
    assert msg.endswith("(--replicas 3 survives any 2 sites failing at once; it needs "
                        "--sites >= 3).")


def test_a_copy_still_being_caught_up_is_named_as_such() -> None:
    msg = lost_partition(LAYOUT, 2, complete_unless({1}, {(2, 1)}), {1}, 1, "survivors")
    assert msg is not None
    # only stage 1's copies on site 2 were being rebuilt: stage 0 survives
    assert msg.startswith("site 1 failed while site 2 was still being caught up; no complete "
                          "replica is left of stage 1: partitions 1, 5. ")
    assert "--spare-sites" not in msg  # no standby to launch with --recovery survivors
