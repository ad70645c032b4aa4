"""What became of each ask (tuner.study.asks) and the status table that shows it at any width."""

from __future__ import annotations

import io
import re
from dataclasses import replace
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console
from support.reports import make_row, study_data

from tuner.config import Outcome
from tuner.report.detail import failures_by_class
from tuner.report.frame import StudyData
from tuner.report.pareto import pareto_front
from tuner.report.status import pruned_lines, status_table
from tuner.store.rows import StoredTrial
from tuner.study.asks import Fate, classify, tally, tally_lines

# A knob set as wide as the B200 study's: the column that used to starve every other one.
WIDE = {
    "mem-fraction-static": FloatDistribution(0.5, 0.95),
    "cuda_graph": CategoricalDistribution(["off", "max:8", "max:16"]),
    "attention_backend_pair": CategoricalDistribution(["flashmla_sparse:flashmla_kv", "tilelang:tilelang"]),
    "chunked-prefill-size": CategoricalDistribution([2048, 4096, 8192]),
    "kv-cache-dtype": CategoricalDistribution(["fp8_e4m3", "bf16"]),
    "max-running-requests": CategoricalDistribution([64, 128, 256]),
}
WIDE_PARAMS: dict[str, Any] = {
    "attention_backend_pair": "flashmla_sparse:flashmla_kv",
    "chunked-prefill-size": 8192,
    "kv-cache-dtype": "fp8_e4m3",
    "max-running-requests": 256,
}


def _trial(
    number: int, row: StoredTrial | None, state: TrialState = TrialState.COMPLETE, **attrs: Any
) -> FrozenTrial:
    params = dict(row.params) if row is not None else {"mem-fraction-static": 0.7, "cuda_graph": "off"}
    ok = row is not None and row.outcome is Outcome.OK
    values = (
        [row.metrics["output_throughput"] or 0.0, float(row.kv_tokens or 0)] if ok and row else [0.0, 0.0]
    )
    feasible = bool(row.feasible) if row is not None else False
    trial = optuna.trial.create_trial(
        state=state,
        params=params,
        distributions={k: WIDE[k] for k in params},
        values=values if state is TrialState.COMPLETE else None,
        user_attrs={"feasible": feasible, "outcome": row.outcome.value if row else "pruned", **attrs},
        constraints={"failure": 0.0 if feasible else 1.0} if state is TrialState.COMPLETE else None,
    )
    trial.number = number
    return trial


def _study() -> StudyData:
    """Launches (ok, noisy ok, oom, constraint missed); asks pruned by rule, by memory, forbidden, reused."""
    rows = [
        make_row(0, tput=1234.5, kv=2_000_000, mem=0.6),
        make_row(1, tput=987.6, kv=3_100_000, mem=0.85, graph="max:16"),
        make_row(2, outcome=Outcome.OOM, mem=0.95),
        make_row(3, tput=1500.0, kv=900_000, mem=0.7, feasible=False),
    ]
    rows = [replace(r, params={**r.params, **WIDE_PARAMS}) for r in rows]
    pruned = [make_row(n, outcome=Outcome.PRUNED, mem=0.94) for n in (4, 5, 6, 7, 8)]
    trials = [
        _trial(0, rows[0]),
        _trial(1, rows[1], warning="noisy: other processes kept the benchmark client off the CPU"),
        _trial(2, rows[2]),
        _trial(3, rows[3]),
        _trial(4, pruned[0], pruned=True, rule="oom_monotone"),
        _trial(5, pruned[1], pruned=True, rule="oom_monotone"),
        _trial(6, pruned[2], pruned=True, rule="memory_model"),
        _trial(7, pruned[3], pruned=True, forbidden=True, rule="forbidden"),
        _trial(8, pruned[4], pruned=True, forbidden=True, rule="forbidden"),
        _trial(9, rows[0], dedup_of=0),
    ]
    return study_data([*rows, *pruned], trials)


def test_every_ask_has_one_fate_and_the_counts_agree() -> None:
    data = _study()
    asks = classify(data.trials, data.rows)
    assert [a.fate for a in asks] == [
        Fate.OK,
        Fate.OK,
        Fate.FAILED,
        Fate.CONSTRAINT_MISSED,
        Fate.PRUNED_RULE,
        Fate.PRUNED_RULE,
        Fate.PRUNED_MEMORY,
        Fate.FORBIDDEN,
        Fate.FORBIDDEN,
        Fate.REUSED,
    ]
    t = tally(asks)
    assert (t.asked, t.launched, t.not_launched) == (10, 4, 6)
    assert dict(t.failed) == {"oom": 1} and dict(t.pruned) == {"oom_monotone": 2}
    assert (t.pruned_memory, t.forbidden, t.reused, t.noisy) == (1, 2, 1, 1)
    lines = tally_lines(t)
    assert (
        lines[0]
        == "10 asks, 4 launches: 2 ok, 1 constraint missed, 1 failed (oom=1); 1 measurements marked noisy"
    )
    assert "2 forbidden by the space" in lines[1] and "SLO" not in " ".join(lines)
    assert "1 SLO missed" in tally_lines(t, has_slo=True)[0]
    # pruned asks never launched: they are not failures
    assert failures_by_class(data.rows) == {"oom": 1, "slo_violation": 1}
    assert pruned_lines(asks) == ["  pruned by oom monotone (2): #4, #5", "  pruned by memory model (1): #6"]


def test_a_trial_failed_for_a_retry_is_not_a_launch_of_the_budget() -> None:
    row = make_row(0, outcome=Outcome.INFRA_ERROR)
    asks = classify([_trial(0, row, state=TrialState.FAIL)], [row])
    assert asks[0].fate is Fate.RETRIED and tally(asks).launched == 0


def _render(data: StudyData, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    console.print(status_table(data, pareto_front(data, strict=False)))
    return console.export_text()


@pytest.mark.parametrize("width", [80, 100, 120, 200])
def test_status_shows_number_status_and_every_metric_at_any_width(width: int) -> None:
    text = _render(_study(), width)
    assert max(len(line) for line in text.splitlines()) <= width
    header = next(line for line in text.splitlines() if "status" in line)
    for column in ("#", "status", "out tok/s", "KV tokens", "free MiB", "knobs"):
        assert column in header, (width, header)
    lines = text.splitlines()

    def row(number: str) -> str:
        return next(line for line in lines if re.match(rf"\s*{re.escape(number)}\s", line))

    assert re.search(r"\bok\b.*1,234\b.*2\.00M.*10,000", row("0*"))
    assert re.search(r"ok~.*988\b.*3\.10M", row("1*"))
    assert "oom" in row("2") and "1,500" in row("3") and "constraint missed" in row("3")
    assert "reused" in row("9*")
    # asks that never launched are counted, not listed as rows
    assert not any(re.match(r"\s*[45678]\*?\s", line) for line in lines)


def test_a_failed_launch_shows_no_benchmark_figure_but_keeps_what_the_server_reported() -> None:
    row = make_row(0, outcome=Outcome.OOM, kv=965_217, min_free=779)
    failed = replace(row, kv_tokens=965_217, metrics={**row.metrics, "output_throughput": 0.0})  # cut short
    text = _render(study_data([failed], [_trial(0, failed)]), 120)
    line = next(line for line in text.splitlines() if re.match(r"\s*0\*?\s", line))
    assert re.search(r"oom\s+-\s+965,217\s+779", line), line
