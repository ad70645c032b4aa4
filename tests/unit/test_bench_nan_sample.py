"""The benchmark's own responses, sampled, through NaN's signatures: a NaN only batched decode shows fails."""

from __future__ import annotations

import orjson

from tuner.bench.accumulate import SAMPLE_EVERY, StreamAccumulator
from tuner.bench.settings import Api, LoadPoint
from tuner.bench.types import BenchResult, LoadPointResult
from tuner.bench.workload import RequestSpec
from tuner.gate.garbage import nan_signature
from tuner.trial import nan_under_load


def record(index: int, pieces: list[str]):  # type: ignore[no-untyped-def]
    acc = StreamAccumulator(Api.COMPLETIONS)
    for t, piece in enumerate(pieces):
        acc.add(orjson.dumps({"choices": [{"index": 0, "text": piece}]}), float(t))
    spec = RequestSpec(index=index, prompt=(1, 2), input_tokens=2, output_tokens=len(pieces))
    return acc.record(spec, label="c8", t_queued=0.0, t_sent=0.0, status=200, error=None)


def result(records: list) -> BenchResult:  # type: ignore[type-arg]
    """A benchmark result holding one load point of `records` (its metrics are not what is read)."""
    point = object.__new__(LoadPointResult)  # the fields the NaN check reads, no metrics needed
    object.__setattr__(point, "point", LoadPoint(concurrency=8, num_prompts=len(records)))
    object.__setattr__(point, "records", tuple(records))
    return BenchResult(points=(point,), client_cpu_share=0.1, loop_lag_p99_ms=None, duration_s=1.0)


def test_every_eighth_response_keeps_its_start_and_nan_s_signature_fails_the_trial() -> None:
    healthy = [record(i, ["the", " cat", " sat", " the", " cat"]) for i in range(16)]
    assert [r.text_sample is not None for r in healthy].count(True) == 16 // SAMPLE_EVERY
    assert healthy[0].text_sample == "the cat sat the cat" and healthy[1].text_sample is None
    assert nan_under_load(result(healthy)) is None  # a loop is what random prompts with ignore_eos give
    sick = [*healthy[:8], record(8, ["!"] * 12), *healthy[9:]]
    why = nan_under_load(result(sick))
    assert why is not None and "request #8" in why and "1 of 2 sampled responses" in why
    assert nan_signature("nan nan nan nan") is not None and nan_signature("a b a b a b") is None
