"""benchmarks/search_live_check.py: the live outcome agrees with the oracle's within one class."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from search_live_check import agrees  # noqa: E402

from tuner.config import Outcome  # noqa: E402


def test_nan_garbage_and_a_wrong_answer_are_one_class() -> None:
    gate = (Outcome.NAN, Outcome.GARBAGE, Outcome.WRONG_ANSWER)
    assert all(agrees(a, b) for a in gate for b in gate)
    assert agrees(Outcome.OOM, Outcome.OOM)
    assert not agrees(Outcome.NAN, Outcome.OK) and not agrees(Outcome.WRONG_ANSWER, Outcome.OOM)
