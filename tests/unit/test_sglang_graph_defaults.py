"""SGLang's own decode graph list: its largest batch by GPU memory, TP size and release."""

from __future__ import annotations

import pytest

from tuner.sglang.graph_defaults import default_graph_max_bs


@pytest.mark.parametrize(
    ("total_mib", "tp", "release", "expected"),
    [
        (16_000, 8, "0.5.23", 8),  # under 20 GB
        (32_607, 1, "0.5.9", 24),  # an RTX 5090: the old row
        (32_607, 4, "0.5.9", 80),
        (32_607, 1, "0.5.23", 48),  # ... and the later one
        (32_607, 4, "0.5.10rc1", 160),
        (40_960, 2, "0.5.23", 32),
        (81_559, 2, "0.5.17", 256),  # an H100
        (143_771, 8, None, 512),  # an H200 at TP 8
        (183_359, 1, "0.5.23", 512),  # a B200, any TP
    ],
)
def test_the_default_max_batch_follows_sglangs_table(
    total_mib: int, tp: int, release: str | None, expected: int
) -> None:
    assert default_graph_max_bs(total_mib, tp, release) == expected


def test_a_release_that_does_not_parse_takes_the_later_row() -> None:
    assert default_graph_max_bs(32_607, 1, "main") == default_graph_max_bs(32_607, 1, "0.5.23")
