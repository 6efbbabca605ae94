"""The release rule of operators that hold rows until they close (``model/progress.py``)."""

import numpy as np

from sparkflux.model.progress import release_closed


def _rule(claim: list[int], part: list[int], sn: list[int], closed: list[bool]
          ) -> tuple[list[bool], list[int]]:
    release, out = release_closed(np.array(claim, dtype=np.int64), np.array(part, dtype=np.int64),
                                  np.array(sn, dtype=np.int64), np.array(closed, dtype=bool))
    return release.tolist(), out.tolist()


def test_an_open_row_holds_its_partitions_claim_below_its_sn() -> None:
    # partition 0: the open row at SN 7 holds the claim at 6, the closed one at 5 goes out;
    # partition 1: nothing open, its claim is the input's
    assert _rule([10, 10], [0, 0, 1], [5, 7, 3], [True, False, True]) == (
        [True, False, True], [6, 10])


def test_a_closed_row_behind_an_open_one_waits_and_holds_the_claim() -> None:
    assert _rule([10], [0, 0], [5, 3], [True, False]) == ([False, False], [2])


def test_a_closed_row_above_the_inputs_claim_waits() -> None:
    assert _rule([4, 9], [0, 1], [5, 2], [True, True]) == ([False, True], [4, 9])


def test_nothing_held_leaves_the_claim_as_it_is() -> None:
    assert _rule([3, 8], [], [], []) == ([], [3, 8])
