"""The racing replicas' duplicate filter (``protocol/dedup.py``, Hwang et al. Algorithm 1),
driven with exact masks, and its Theorem 1 over random interleavings: copies that each
deliver every row once (in any order, a resend or two, markers behind their rows) pass every
row exactly once, and memory stays bounded by the markers."""

from __future__ import annotations

import numpy as np
import pytest

from sparkflux.protocol.dedup import DuplicateFilter


def arr(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def test_the_first_copy_of_each_row_passes_and_the_later_ones_are_duplicates() -> None:
    f = DuplicateFilter(2)
    assert f.offer(0, arr(1, 2, 3), arr(0, 0, 0)).tolist() == [True, True, True]
    assert f.offer(1, arr(2, 3, 4, 5), arr(0, 0, 0, 0)).tolist() == [False, False, True, True]
    assert f.offer(0, arr(4, 5), arr(0, 0)).tolist() == [False, False]
    assert (f.passed, f.dropped) == (5, [2, 2])


def test_the_minor_number_is_part_of_a_rows_identity() -> None:
    f = DuplicateFilter(2)
    assert f.offer(0, arr(5, 5), arr(0, 1)).tolist() == [True, True]
    assert f.offer(1, arr(5, 5, 5), arr(1, 2, 0)).tolist() == [False, True, False]


def test_a_key_twice_in_one_batch_passes_once_and_a_resend_is_a_duplicate() -> None:
    f = DuplicateFilter(2)
    assert f.offer(0, arr(7, 7, 8), arr(0, 0, 0)).tolist() == [True, False, True]
    assert f.offer(0, arr(8), arr(0)).tolist() == [False]  # the same copy again


def test_a_marker_forgets_the_keys_below_it_and_what_is_at_or_below_it_is_a_duplicate(
        ) -> None:
    f = DuplicateFilter(3)
    f.offer(0, arr(1, 2, 3, 4), arr(0, 0, 0, 0))
    assert f.held() == 4
    assert f.punctuate(0, 3) == 3  # forwarded: it raises the filter's marker
    assert f.held() == 1
    assert f.punctuate(2, 2) is None  # below it: nothing to forward
    # copy 1 is late: its rows at or below the marker are dropped without a lookup
    assert f.offer(1, arr(2, 3, 4, 5), arr(0, 0, 0, 0)).tolist() == [False, False, False,
                                                                     True]
    assert f.held() == 2


def test_copies_are_numbered_from_zero() -> None:
    f = DuplicateFilter(2)
    with pytest.raises(ValueError, match="copy 2 of an input fed by 2 copies"):
        f.offer(2, arr(1), arr(0))
    with pytest.raises(ValueError, match="at least one copy"):
        DuplicateFilter(0)


@pytest.mark.parametrize("seed", range(40))
def test_every_row_passes_exactly_once_in_any_interleaving(seed: int) -> None:
    """Theorem 1: K copies each deliver every row once (their own order, in batches, a few
    resends), each followed by its markers; interleaved at random, the filter passes every
    row exactly once, and remembers no key at or below its marker."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 5))
    n = int(rng.integers(1, 200))
    sn = np.sort(rng.choice(10 * n, size=n, replace=False)).astype(np.int64)
    snm = rng.integers(0, 3, size=n).astype(np.int64)
    order = np.lexsort((snm, sn))
    sn, snm = sn[order], snm[order]
    events: list[list[tuple[str, object]]] = []
    for _ in range(k):
        # a copy sends in SN order with local shuffles inside a batch (order-insensitive
        # operators), a marker after each batch at the batch's largest SN, and may resend
        stream: list[tuple[str, object]] = []
        i = 0
        while i < n:
            j = min(n, i + int(rng.integers(1, 20)))
            idx = rng.permutation(np.arange(i, j))
            if rng.random() < 0.2 and i:  # a resend of rows already sent
                idx = np.concatenate([idx, rng.integers(0, i, size=3)])
            stream.append(("rows", idx))
            stream.append(("marker", int(sn[j - 1]) - 1 if j < n else int(sn[-1])))
            i = j
        events.append(stream)
    f = DuplicateFilter(k)
    got: list[tuple[int, int]] = []
    cursors = [0] * k
    while any(c < len(events[c_]) for c_, c in enumerate(cursors)):
        live = [c for c in range(k) if cursors[c] < len(events[c])]
        c = int(rng.choice(live))
        kind, what = events[c][cursors[c]]
        cursors[c] += 1
        if kind == "rows":
            idx = np.asarray(what)
            mask = f.offer(c, sn[idx], snm[idx])
            got += list(zip(sn[idx][mask].tolist(), snm[idx][mask].tolist(), strict=True))
        else:
            f.punctuate(c, int(what))  # type: ignore[arg-type]
            assert f.held() == 0 or int(f._sn.min()) > f.punctuation
    assert sorted(got) == sorted(zip(sn.tolist(), snm.tolist(), strict=True))
    assert f.passed == n
