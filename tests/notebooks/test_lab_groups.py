"""mq.lab.rebalance: the pause figures the group lab and benchmark report are computed right."""

from __future__ import annotations

import pytest

from mq.core.types import TopicPartition
from mq.lab.rebalance import (
    Ownership,
    activity,
    is_balanced,
    longest_gaps,
    never_lapsed,
    pause_stats,
)

A, B, C = (TopicPartition("t", p) for p in range(3))


def test_longest_gap_counts_from_the_last_poll_before_the_window() -> None:
    times = {A: [0.0, 0.9, 1.1, 1.2, 2.0], B: [1.5]}
    gaps = longest_gaps(times, [A, B, C], 1.0, 2.5)
    assert gaps[A] == pytest.approx(0.8)  # 1.2 -> 2.0
    assert gaps[B] == pytest.approx(1.0)  # 1.5 -> the end of the window
    assert gaps[C] == pytest.approx(1.5)  # never consumed: the whole window


def test_ownership_lapses_only_where_no_member_held_the_partition() -> None:
    owned = [Ownership("c1", A, 0.0, 1.5), Ownership("c2", A, 1.5, None),
             Ownership("c1", B, 0.0, 1.2), Ownership("c2", B, 1.4, None)]
    assert never_lapsed(owned, A, 1.0, 3.0)
    assert not never_lapsed(owned, B, 1.0, 3.0)
    assert not never_lapsed(owned, C, 1.0, 3.0)


def test_pause_stats_summarise_a_rebalance() -> None:
    times = {A: [0.9, 1.1, 1.3, 1.5, 1.7, 1.9], B: [0.9, 1.8], C: [0.95, 1.2, 1.5, 1.9]}
    owned = [Ownership("c1", A, 0.0, None), Ownership("c1", B, 0.0, 1.1), Ownership("c2", B, 1.7, None),
             Ownership("c2", C, 0.0, None)]
    stats = pause_stats(times, owned, [A, B, C], 1.0, 2.0, threshold_s=0.45)
    assert stats.partitions == 3 and stats.kept_consuming == 2 and stats.kept_assigned == 2
    assert stats.max_gap_s == pytest.approx(0.9) and stats.median_gap_s == pytest.approx(0.4)
    row = stats.row()
    assert row["kept_consuming_fraction"] == pytest.approx(0.667) and row["max_gap_s"] == 0.9


def test_balanced_means_one_owner_each_and_sizes_within_one() -> None:
    assert is_balanced({"a": [A, B], "b": [C]}, [A, B, C])
    assert not is_balanced({"a": [A, B, C], "b": []}, [A, B, C])
    assert not is_balanced({"a": [A, B], "b": [B, C]}, [A, B, C])
    assert not is_balanced({"a": [A], "b": [C]}, [A, B, C])
    assert not is_balanced({}, [A])


def test_activity_counts_partitions_polled_recently() -> None:
    t, n = activity({A: [0.1, 0.3], B: [0.3]}, [A, B], 0.0, 0.4, window_s=0.15, step_s=0.1)
    assert t == [0.0, 0.1, 0.2, 0.3, 0.4] and n == [0, 1, 1, 2, 2]
