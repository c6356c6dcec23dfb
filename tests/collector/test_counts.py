"""Acceptance from counts: the one home of the convention, and pooling several counts."""

from __future__ import annotations

import pytest

from specscope.collector.counts import Acceptance, clamp, pool


def test_length_includes_the_bonus_token_and_the_rate_is_pooled():
    a = Acceptance(steps=4, drafted=12, accepted=5)
    assert a.length == pytest.approx(9 / 4)  # 5 accepted + one bonus token per step
    assert a.rate == pytest.approx(5 / 12)


def test_an_unknown_count_leaves_its_figures_unknown_never_zero():
    assert Acceptance(steps=4, accepted=None).length is None
    assert Acceptance(drafted=None, accepted=3).rate is None
    assert Acceptance(steps=0, drafted=0, accepted=0).length is None


def test_pooling_adds_counts_never_averages_figures():
    """Two requests of very different lengths: the pooled length is the token-weighted one."""
    short, long_ = Acceptance(1, 3, 3), Acceptance(9, 27, 0)
    p = pool([short, long_])
    assert (p.steps, p.drafted, p.accepted) == (10, 30, 3)
    assert p.length == pytest.approx(13 / 10)
    assert p.length != pytest.approx((short.length + long_.length) / 2)


def test_a_count_one_part_does_not_know_is_unknown_in_the_pool():
    p = pool([Acceptance(2, 6, 1), Acceptance(3, None, 2)])
    assert p.drafted is None and p.rate is None
    assert p.length == pytest.approx((3 + 5) / 5)
    assert pool([]).length is None


def test_clamp_makes_an_impossible_entry_possible_and_says_so():
    assert clamp(3, 5) == (3, 3, True)
    assert clamp(-1, 2) == (0, 0, True)
    assert clamp(3, 2) == (3, 2, False)
