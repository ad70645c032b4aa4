"""SGLang's native /generate as a benchmark API: bench_serving's sglang backend's body, and its chunks."""

from __future__ import annotations

import orjson
import pytest

from tuner.bench.accumulate import StreamAccumulator
from tuner.bench.client import build_payload, endpoint
from tuner.bench.serving_json import _backend
from tuner.bench.settings import Api, BenchSettings
from tuner.bench.types import OutputSource
from tuner.bench.workload import RequestSpec


def _chunk(text: str, completion_tokens: int, prompt_tokens: int = 4) -> bytes:
    meta = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "finish_reason": None}
    return orjson.dumps({"text": text, "output_ids": [1], "meta_info": meta})


def test_the_body_carries_token_ids_and_sampling_params_like_bench_serving() -> None:
    spec = RequestSpec(index=0, prompt=(5, 6, 7), input_tokens=3, output_tokens=9)
    body = orjson.loads(build_payload(spec, Api.GENERATE, "m"))
    assert endpoint(Api.GENERATE) == "/generate"
    assert body == {
        "input_ids": [5, 6, 7],
        "sampling_params": {"max_new_tokens": 9, "temperature": 0.0, "ignore_eos": True},
        "stream": True,
    }
    text = RequestSpec(index=0, prompt="hi there", input_tokens=2, output_tokens=1)
    assert orjson.loads(build_payload(text, Api.GENERATE, "m"))["text"] == "hi there"


@pytest.mark.parametrize("cumulative", [True, False])
def test_chunks_count_tokens_once_whether_the_text_repeats_or_grows(cumulative: bool) -> None:
    pieces = ["", "Hel", "lo", " wor", "ld"]  # the first token decodes to nothing yet (a partial character)
    acc = StreamAccumulator(Api.GENERATE)
    so_far = ""
    contents = []
    for i, piece in enumerate(pieces):
        so_far += piece
        contents.append(acc.add(_chunk(so_far if cumulative else piece, i + 1), 1.0 + i))
    acc.add(_chunk(so_far if cumulative else "", len(pieces)), 9.0)  # a repeat with no new token
    acc.add(b"[DONE]", 9.5)
    spec = RequestSpec(index=0, prompt=(1, 2, 3, 4), input_tokens=4, output_tokens=5)
    record = acc.record(spec, label="c16", t_queued=0.0, t_sent=0.5, status=200, error=None)
    assert contents == [False, True, True, True, True]
    assert record.success and record.output_tokens == 5 and record.output_source is OutputSource.USAGE
    assert record.input_tokens_server == 4
    assert record.ttft_s == pytest.approx(1.5)  # the first chunk with text, as bench_serving times it
    assert record.content_events == 4 and record.t_end_s == 9.5
    assert record.text_sample == "Hello world"


def test_an_error_chunk_fails_the_request_with_the_servers_message() -> None:
    acc = StreamAccumulator(Api.GENERATE)
    acc.add(_chunk("a", 1), 1.0)
    acc.add(orjson.dumps({"error": {"message": "CUDA error: an illegal memory access"}}), 2.0)
    spec = RequestSpec(index=1, prompt=(1,), input_tokens=1, output_tokens=4)
    record = acc.record(spec, label="c1", t_queued=0.0, t_sent=0.1, status=200, error=None)
    assert not record.success and "illegal memory access" in record.error_text


def test_the_verify_line_names_bench_servings_native_backend() -> None:
    settings = BenchSettings.model_validate({"workload": {"api": "generate"}})
    assert _backend(settings) == "sglang"
