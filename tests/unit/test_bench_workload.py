"""Workload generation: lengths, seeds, range semantics, file formats, bad lines; arrival gaps; self-check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from tuner.bench.client import build_payload
from tuner.bench.load import arrival_offsets_s
from tuner.bench.selfcheck import Judgement, judge, read_schedstat
from tuner.bench.settings import Api, SelfCheckSettings, Workload, WorkloadKind
from tuner.bench.workload import build_requests, parse_jsonl, parse_sharegpt, random_lengths, warmup_specs
from tuner.errors import BenchmarkError


def test_fixed_lengths_with_ratio_one_and_exact_token_ids() -> None:
    reqs = build_requests(Workload(input_len=50, output_len=20, range_ratio=1.0), 10)
    assert len(reqs) == 10
    assert all(r.input_tokens == 50 and len(r.prompt) == 50 and r.output_tokens == 20 for r in reqs)
    assert all(isinstance(r.prompt, tuple) for r in reqs)
    assert [r.index for r in reqs] == list(range(10))


def test_range_semantics_follow_sglang() -> None:
    rng = np.random.default_rng(0)
    lens = random_lengths(100, 0.0, 5000, rng)
    assert lens.min() == 1 and lens.max() == 100  # ratio 0 → [1, L], not fixed L
    lens = random_lengths(100, 0.5, 5000, rng)
    assert lens.min() == 50 and lens.max() == 100
    assert set(random_lengths(7, 1.0, 100, rng)) == {7}
    assert set(random_lengths(1, 0.0, 10, rng)) == {1}
    with pytest.raises(BenchmarkError):
        random_lengths(0, 1.0, 1, rng)


def test_same_seed_same_requests_other_seed_differs() -> None:
    wl = Workload(input_len=30, output_len=30, range_ratio=0.2, seed=7)
    assert build_requests(wl, 5) == build_requests(wl, 5)
    assert build_requests(wl, 5) != build_requests(wl, 5, seed=8)


def test_chat_random_prompts_are_text_of_about_input_len_words() -> None:
    reqs = build_requests(Workload(input_len=40, output_len=8, api=Api.CHAT), 3)
    for r in reqs:
        assert isinstance(r.prompt, str) and len(r.prompt.split()) == 40 and r.input_tokens == 40
    body = orjson.loads(build_payload(reqs[0], Api.CHAT, "m"))
    assert body["messages"] == [{"role": "user", "content": reqs[0].prompt}]
    assert body["max_completion_tokens"] == 8 and "max_tokens" not in body


def test_payload_matches_spec() -> None:
    req = build_requests(Workload(input_len=4, output_len=9), 1)[0]
    body = orjson.loads(build_payload(req, Api.COMPLETIONS, "model-x"))
    assert body["prompt"] == list(req.prompt) and body["max_tokens"] == 9
    assert body["model"] == "model-x" and body["stream"] is True and body["temperature"] == 0.0
    assert body["ignore_eos"] is True and body["stream_options"] == {"include_usage": True}
    assert "continuous_usage_stats" not in body["stream_options"]


def test_warmup_caps_output_at_32_and_cycles() -> None:
    reqs = build_requests(Workload(input_len=4, output_len=100), 3)
    warm = warmup_specs(reqs, 5)
    assert len(warm) == 5 and all(w.output_tokens == 32 for w in warm)
    assert warm[3].prompt == reqs[0].prompt
    assert warmup_specs(reqs, 0) == ()


SHAREGPT = [
    {
        "id": "a",
        "conversations": [
            {"from": "human", "value": "Hello there, how are you?"},
            {"from": "gpt", "value": "Fine."},
        ],
    },
    {"id": "b", "conversations": [{"from": "gpt", "value": "no human turn"}]},
    {"id": "c", "conversations": []},
    {"id": "d"},
    "junk",
    {
        "id": "e",
        "conversations": [{"from": "human", "value": "Second prompt"}, {"from": "gpt", "value": "x"}],
    },
]


def test_sharegpt_takes_first_human_turn_and_skips_unusable_entries(tmp_path: Path) -> None:
    rows = parse_sharegpt(orjson.dumps(SHAREGPT))
    assert [r.prompt for r in rows] == ["Hello there, how are you?", "Second prompt"]
    path = tmp_path / "sg.json"
    path.write_bytes(orjson.dumps(SHAREGPT))
    wl = Workload(kind=WorkloadKind.SHAREGPT, path=path, output_len=64, api=Api.CHAT)
    reqs = build_requests(wl, 5)
    assert len(reqs) == 5 and all(r.output_tokens == 64 for r in reqs)
    assert {r.prompt for r in reqs} == {"Hello there, how are you?", "Second prompt"}
    assert all(r.input_tokens >= 1 for r in reqs)


def test_sharegpt_not_a_list_or_not_json_is_a_clear_error() -> None:
    with pytest.raises(BenchmarkError, match="x.json: expected a JSON list"):
        parse_sharegpt(b'{"a": 1}', "x.json")
    with pytest.raises(BenchmarkError, match="x.json: not JSON"):
        parse_sharegpt(b"[{", "x.json")


def test_jsonl_fields_and_lengths() -> None:
    raw = (
        b'{"prompt": "p1", "output_len": 12}\n'
        b"\n"
        b'{"text": "t2", "max_tokens": 7, "input_len": 99}\n'
        b'{"prompt": [5, 6, 7]}\n'
    )
    rows = parse_jsonl(raw, "d.jsonl")
    assert [r.prompt for r in rows] == ["p1", "t2", (5, 6, 7)]
    assert [r.output_tokens for r in rows] == [12, 7, None]
    assert [r.input_tokens for r in rows] == [None, 99, None]
    assert rows[2].where == "d.jsonl:4"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"{bad json", "d.jsonl:2: not a JSON object"),
        (b"[1, 2]", "d.jsonl:2: expected a JSON object"),
        (b'{"question": "q"}', "d.jsonl:2: expected a non-empty string"),
        (b'{"prompt": "q", "output_len": -3}', "d.jsonl:2: output_len must be a positive integer"),
        (b'{"prompt": "q", "max_tokens": "12"}', "d.jsonl:2: max_tokens must be a positive integer"),
    ],
)
def test_jsonl_bad_line_names_file_and_line(line: bytes, message: str) -> None:
    with pytest.raises(BenchmarkError, match=message):
        parse_jsonl(b'{"prompt": "ok"}\n' + line + b"\n", "d.jsonl")


def test_jsonl_file_defaults_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "u.jsonl"
    path.write_text('{"prompt": "abcdefgh"}\n{"prompt": "x", "output_len": 3}\n')
    reqs = build_requests(Workload(kind=WorkloadKind.JSONL, path=path, output_len=40), 2, seed=1)
    by_prompt = {r.prompt: r for r in reqs}
    assert by_prompt["abcdefgh"].output_tokens == 40 and by_prompt["abcdefgh"].input_tokens == 2
    assert by_prompt["x"].output_tokens == 3
    with pytest.raises(BenchmarkError, match="cannot read dataset"):
        build_requests(Workload(kind=WorkloadKind.JSONL, path=tmp_path / "none.jsonl"), 1)
    with pytest.raises(BenchmarkError, match="needs a path"):
        build_requests(Workload(kind=WorkloadKind.SHAREGPT), 1)
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(BenchmarkError, match="no usable prompt"):
        build_requests(Workload(kind=WorkloadKind.JSONL, path=empty), 1)


def test_arrival_offsets_poisson_and_gamma() -> None:
    off = arrival_offsets_s(20001, 100.0, 1.0, seed=3)
    assert off[0] == 0.0 and np.all(np.diff(off) >= 0)
    gaps = np.diff(off)
    assert gaps.mean() == pytest.approx(0.01, rel=0.05)
    assert gaps.std() == pytest.approx(0.01, rel=0.05)  # exponential: std = mean
    bursty = np.diff(arrival_offsets_s(20001, 100.0, 0.25, seed=3))
    assert bursty.mean() == pytest.approx(0.01, rel=0.05)
    assert bursty.std() == pytest.approx(0.02, rel=0.08)  # gamma: cv = 1/sqrt(shape)
    assert np.array_equal(arrival_offsets_s(5, 2.0, seed=1), arrival_offsets_s(5, 2.0, seed=1))
    with pytest.raises(ValueError):
        arrival_offsets_s(5, 0.0)


LIMITS = SelfCheckSettings()


def test_client_bound_judgement() -> None:
    def verdict(cpu: float, lag: float | None, **kw: object) -> Judgement:
        return judge(cpu, lag, limits=LIMITS, **{"samples": 100, **kw})  # type: ignore[arg-type]

    assert verdict(0.5, 1.0) is Judgement.TRUSTED
    assert verdict(0.71, 1.0) is Judgement.CLIENT_BOUND  # the client's CPU near a core
    assert verdict(0.5, 5.1, wait_share=0.01) is Judgement.CLIENT_BOUND  # lagging, never waiting for a CPU
    assert verdict(0.2, None) is Judgement.TRUSTED
    assert verdict(1.2, 1.0, cores=2) is Judgement.TRUSTED
    # a stage shorter than ~0.5 s of lag samples is too short to judge
    assert verdict(0.9, 9.0, samples=10) is Judgement.TRUSTED
    assert verdict(0.9, 9.0, samples=50) is Judgement.CLIENT_BOUND


def test_starvation_by_other_processes_is_not_a_client_bottleneck() -> None:
    def verdict(cpu: float, lag: float | None, **kw: object) -> Judgement:
        return judge(cpu, lag, limits=LIMITS, **{"samples": 100, **kw})  # type: ignore[arg-type]

    # a busy machine: 2% CPU, lag p99 40 ms, the loop's thread waited for a CPU 60% of its runnable time
    assert verdict(0.02, 40.0, wait_share=0.6) is Judgement.STARVED
    # without schedstat: lagging with the CPU share far from a core is starvation too
    assert verdict(0.02, 40.0) is Judgement.STARVED
    assert verdict(0.5, 40.0) is Judgement.CLIENT_BOUND
    # calibrated: a starved client lagging 5-25 ms measured what a repeat measured, so no mark
    assert verdict(0.02, 12.0, wait_share=0.8) is Judgement.TRUSTED
    assert verdict(0.02, 12.0, wait_share=0.01) is Judgement.CLIENT_BOUND  # not waiting for a CPU
    # thresholds come from the space's bench.self_check section
    strict = SelfCheckSettings(starved_wait_share=0.9, loop_lag_p99_s=0.1)
    assert judge(0.02, 40.0, wait_share=0.6, samples=100, limits=strict) is Judgement.TRUSTED
    assert judge(0.02, 140.0, wait_share=0.6, samples=100, limits=strict) is Judgement.CLIENT_BOUND


def test_schedstat_of_this_thread_is_read_where_linux_reports_it() -> None:
    import threading

    found = read_schedstat(threading.get_native_id())
    assert found is None or (found[0] > 0 and found[1] >= 0)
    assert read_schedstat(-1) is None


def test_random_token_ids_stay_inside_the_served_model_s_vocabulary(tmp_path: Path) -> None:
    """Real SGLang with a 1,024-token model died on ids up to 30,000 (a CUDA index assert under load)."""
    import json as _json

    from tuner.bench.runner import vocab_size_of
    from tuner.bench.settings import Workload as _Workload
    from tuner.bench.workload import TOKEN_ID_HIGH, build_requests, token_id_range

    wl = _Workload(kind="random", input_len=256, output_len=8, api="completions", seed=3)
    small = build_requests(wl, 64, vocab_size=1024)
    ids = [t for spec in small for t in spec.prompt]
    assert max(ids) < 1024 and min(ids) >= 100 and max(ids) > 900  # the whole vocabulary, none past it
    big = build_requests(wl, 64, vocab_size=152_064)
    assert max(t for spec in big for t in spec.prompt) < TOKEN_ID_HIGH
    assert token_id_range(None) == (100, TOKEN_ID_HIGH) and token_id_range(50) == (25, 50)
    (tmp_path / "config.json").write_text(_json.dumps({"text_config": {"vocab_size": 1024}}))
    assert vocab_size_of(tmp_path) == 1024 and vocab_size_of(tmp_path / "missing") is None
