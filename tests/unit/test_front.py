"""The front module: dominance, the non-dominated set, utopia distance and ranking, on plain vectors."""

from __future__ import annotations

import pytest

from tuner.front import dominates, non_dominated, ranked, utopia_distances

MAX2 = ("maximize", "maximize")


def test_dominance_needs_as_good_everywhere_and_better_somewhere() -> None:
    assert dominates((2.0, 2.0), (1.0, 2.0), MAX2)
    assert not dominates((2.0, 2.0), (2.0, 2.0), MAX2)  # equal points: neither dominates
    assert not dominates((3.0, 1.0), (1.0, 3.0), MAX2)
    assert dominates((1.0, 5.0), (2.0, 5.0), ("minimize", "maximize"))


def test_vectors_and_directions_of_other_lengths_are_a_bug() -> None:
    with pytest.raises(ValueError):
        dominates((1.0, 2.0), (1.0, 2.0, 3.0), MAX2)


def test_equal_points_all_stay_on_the_front() -> None:
    points = {0: (1.0, 1.0), 1: (1.0, 1.0), 2: (0.5, 0.5)}
    assert non_dominated(points, MAX2) == (0, 1)


def test_utopia_distance_weighs_objectives_by_their_best_value() -> None:
    d = utopia_distances({0: (1000.0, 1.0e6), 1: (900.0, 2.0e6)}, MAX2)
    assert d[0] == pytest.approx(0.5) and d[1] == pytest.approx(0.1)
    low = utopia_distances({0: (10.0,), 1: (20.0,)}, ("minimize",))
    assert low[0] == 0.0 and low[1] == pytest.approx(1.0)


def test_ranking_puts_the_front_first_then_the_closest_to_utopia() -> None:
    points = {5: (100.0, 1.0), 6: (50.0, 2.0), 7: (99.0, 0.9), 8: (40.0, 0.5)}
    assert ranked(points, MAX2) == [5, 6, 7, 8]
