"""Pure parts of the simulator: calibration, performance model, flag resolution, log formats, answers."""

from __future__ import annotations

import re

import pytest

from tuner.gate.settings import DEFAULT_PROMPTS
from tuner.sglang.options import builtin_table, version_key
from tuner.sim import args as simargs
from tuner.sim import logfmt, memory, perf, text
from tuner.sim.resolve import default_backends, resolve_launch, visible_gpus
from tuner.sim.scenario import load_scenario

SEED_BS = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64)
SEED_INPUT, SEED_OUTPUT = 331, 256  # assumed seed workload: total/output = 587/256 = 516/225

# Regexes of reference/sglang.md §4
RE_BACKENDS = re.compile(r"Set (NSA|DSA) backends for (.+?): prefill=(\w+), decode=(\w+)")
RE_LOAD_END = re.compile(r"Load weight end\..*?avail mem=([\d.]+) GB, mem usage=([\d.]+) GB")
RE_KV = re.compile(r"KV Cache is allocated\. (?:dtype: \S+, )?#tokens: (\d+)")
RE_CAPTURE_END = re.compile(r"Capture (?:cuda graph|.*CUDA graph) end\.")
RE_MEM_USAGE = re.compile(r"mem usage=([\d.]+) GB")
RE_SUMMARY = re.compile(
    r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+), max_prefill_tokens=(\d+), "
    r"max_running_requests=(\d+), context_len=(\d+), available_gpu_mem=([\d.]+) GB"
)
RE_DECODE = re.compile(
    r"Decode batch.*?#running-req: (\d+), .*?token usage: ([\d.]+), .*?cuda graph: (True|False), "
    r"gen throughput \(token/s\): ([\d.]+), #queue-req: (\d+)"
)


@pytest.fixture(scope="module")
def glm5():
    return load_scenario("glm5-nvfp4-sm120")


def _plan(scenario, fraction, bs):
    return memory.plan_memory(scenario, tp_size=8, fraction=fraction, kv_dtype="fp8_e4m3", captured_bs=bs)


def test_glm5_memory_matches_the_seeds(glm5):
    no_graphs = _plan(glm5, 0.85, ())
    assert no_graphs.kv_tokens == pytest.approx(370_000, rel=0.02)
    assert no_graphs.free_mib == pytest.approx(16_574, rel=0.10)
    graphs = _plan(glm5, 0.92, SEED_BS)
    assert graphs.kv_tokens == pytest.approx(498_000, rel=0.02)
    assert graphs.free_mib == pytest.approx(5.2 * 1024, rel=0.10)
    assert no_graphs.weights_mib == pytest.approx(57_000 * 1000**2 / 2**20, rel=0.05)  # ~57 GB per GPU


def test_glm5_failure_thresholds(glm5):
    assert not memory.enough_for_kv(glm5, _plan(glm5, 0.60, ()))
    assert memory.enough_for_kv(glm5, _plan(glm5, 0.70, ()))
    ok, oom = _plan(glm5, 0.92, SEED_BS), _plan(glm5, 0.95, SEED_BS)
    assert memory.capture_peak_mib(glm5, ok) <= ok.total_mib < memory.capture_peak_mib(glm5, oom)
    # 0.95 without graphs dies under a 64-request eager decode; 0.92 with graphs does not
    eager95 = _plan(glm5, 0.95, ())
    act64 = memory.activation_mib(glm5, decode_batch=64, graph_mode=False, prefill_tokens=0)
    assert eager95.idle_used_mib + act64 > eager95.total_mib
    assert (
        ok.idle_used_mib + memory.activation_mib(glm5, decode_batch=64, graph_mode=True, prefill_tokens=8192)
        <= ok.total_mib
    )
    # the default decode list (max_bs 512 at TP 8 on 96 GB) OOMs at capture even at 0.85 (PR #29580)
    full = _plan(glm5, 0.85, memory.default_capture_bs(512))
    assert memory.capture_peak_mib(glm5, full) > full.total_mib


def test_glm5_throughput_prediction_matches_the_seeds(glm5):
    def predict(bs):
        return perf.predict_closed_loop(
            glm5.perf,
            concurrency=64,
            input_len=SEED_INPUT,
            output_len=SEED_OUTPUT,
            captured=bs,
            chunked_prefill=8192,
        )

    eager, graphs = predict(()), predict(SEED_BS)
    assert eager.output_tok_s == pytest.approx(225, rel=0.02)
    assert eager.total_tok_s == pytest.approx(516, rel=0.02)
    assert graphs.output_tok_s == pytest.approx(194, rel=0.02)
    # graphs still pay off at batch 1: the launch overhead they remove dominates there
    assert perf.decode_step_ms(glm5.perf, 1, SEED_BS) < perf.decode_step_ms(glm5.perf, 1, ())


def test_padding_to_next_captured_size_and_eager_above():
    assert perf.padded_bs(3, SEED_BS) == 4
    assert perf.padded_bs(64, SEED_BS) == 64
    assert perf.padded_bs(65, SEED_BS) is None
    assert perf.padded_bs(5, ()) is None


def test_default_capture_list_rule():
    bs = memory.default_capture_bs(512)
    assert bs[:6] == (1, 2, 4, 8, 12, 16)
    assert 256 in bs and 264 not in bs and 272 in bs and 496 in bs and 512 in bs and 500 not in bs
    assert memory.default_capture_bs(64)[-1] == 64
    assert max(memory.default_capture_bs(100)) == 96


def test_auto_mem_fraction_is_sglang_like():
    frac = memory.auto_mem_fraction(97_887, 8192, 8, 512)
    assert frac == round((97_887 - (512 + 8192 * 1.5 + 1024 + 512 * 2)) / 97_887, 3) == 0.848
    # on a >60 GB GPU at least 10 GB stay outside the static pool
    assert memory.auto_mem_fraction(81_559, 2048, 1, 8) == round((81_559 - 10 * 1024) / 81_559, 3)


def _launch(scenario, version, argv, cvd=None):
    given = simargs.parse_sglang_argv(builtin_table(version), ["--model-path", "/m", *argv])
    return resolve_launch(scenario, version, given, cvd)


def test_flag_dialects_resolve_to_the_same_launch(glm5):
    old = _launch(
        glm5, "0.5.9", ["--cuda-graph-bs", "1", "2", "4", "--nsa-decode-backend", "trtllm", "--tp-size", "8"]
    )
    mid = _launch(
        glm5, "0.5.16", ["--cuda-graph-bs", "1", "2", "4", "--nsa-decode-backend", "trtllm", "--tp-size", "8"]
    )
    new = _launch(
        glm5,
        "0.5.23",
        ["--cuda-graph-bs-decode", "1", "2", "4", "--dsa-decode-backend", "trtllm", "--tp-size", "8"],
    )
    for launch in (old, mid, new):
        assert launch.captured_bs == (1, 2, 4) and launch.decode_backend == "trtllm" and launch.tp_size == 8
    assert old.args["cuda_graph_bs"] == [1, 2, 4] and "nsa_decode_backend" in old.args
    assert new.args["cuda_graph_bs_decode"] == [1, 2, 4] and "dsa_decode_backend" in new.args


@pytest.mark.parametrize(
    "argv",
    [
        ["--disable-cuda-graph"],
        ["--disable-decode-cuda-graph"],
        ["--cuda-graph-backend-decode", "disabled"],
        ["--cuda-graph-config", '{"decode": {"backend": "disabled"}}'],
    ],
)
def test_new_dialect_ways_to_turn_graphs_off(glm5, argv):
    launch = _launch(glm5, "0.5.23", argv)
    assert not launch.graphs and launch.captured_bs == ()


def test_default_max_bs_capped_by_max_running_requests_in_new_releases(glm5):
    new = _launch(glm5, "0.5.23", ["--tp-size", "8", "--max-running-requests", "64"])
    old = _launch(glm5, "0.5.9", ["--tp-size", "8", "--max-running-requests", "64"])
    assert new.cuda_graph_max_bs == 64 and old.cuda_graph_max_bs == 512  # the resolved argument
    # ... but every release captures no batch past its request pool (get_batch_sizes_to_capture)
    assert new.captured_bs[-1] == 64 and old.captured_bs[-1] == 64


def test_an_explicit_graph_list_is_cut_at_the_request_pool(glm5):
    launch = _launch(glm5, "0.5.9", ["--cuda-graph-bs", "8", "16", "96", "--max-running-requests", "50"])
    assert launch.captured_bs == (8, 16, 49, 50)
    assert (
        _launch(glm5, "0.5.9", ["--cuda-graph-max-bs", "32", "--max-running-requests", "50"]).captured_bs[-1]
        == 32
    )


def test_backend_behaviour_on_sm120(glm5):
    def behaviour(p, d, version="0.5.9", extra=()):
        return _launch(
            glm5, version, ["--nsa-prefill-backend", p, "--nsa-decode-backend", d, *extra]
        ).behaviour

    assert behaviour("trtllm", "trtllm") == "ok"
    assert behaviour("trtllm", "flashmla_kv") == "nan_batched"
    assert behaviour("flashmla_sparse", "flashmla_sparse") == "garbage"
    assert behaviour("fa3", "trtllm") == "unsupported"
    assert behaviour("flashmla_auto", "trtllm") == "unsupported"
    tile = _launch(glm5, "0.5.9", ["--nsa-prefill-backend", "tilelang", "--nsa-decode-backend", "tilelang"])
    assert tile.behaviour == "ok" and tile.kv_cache_dtype == "bfloat16"
    assert memory.kv_bytes_per_token(glm5, "bfloat16") == 2 * memory.kv_bytes_per_token(glm5, "fp8_e4m3")
    # 0.5.10 forces trtllm for fp8 on SM>=10 whatever the user asked
    assert behaviour("flashmla_sparse", "flashmla_sparse", "0.5.10", ["--kv-cache-dtype", "fp8_e4m3"]) == "ok"


def test_automatic_backends_by_version():
    assert default_backends("0.5.9", "fp8_e4m3", 12, "GlmMoeDsaForCausalLM") == (
        "flashmla_auto",
        "flashmla_kv",
    )
    assert default_backends("0.5.12", "fp8_e4m3", 12, "GlmMoeDsaForCausalLM") == ("trtllm", "trtllm")
    assert (
        default_backends("0.5.23", "fp8_e4m3", 12, "GlmMoeDsaForCausalLM") == ("flashinfer_sparse_mla",) * 2
    )
    assert default_backends("0.5.23", "bfloat16", 9, "DeepseekV32ForCausalLM") == ("flashmla_sparse", "fa3")


def test_cuda_visible_devices_mapping():
    assert visible_gpus(None, 8) == tuple(range(8))
    assert visible_gpus("4,5", 8) == (4, 5)
    assert visible_gpus("1,9,2", 8) == (1,)  # enumeration stops at the first bad entry
    assert visible_gpus("", 8) == ()


def test_sim_flags_are_split_off():
    sim, rest = simargs.split_sim_flags(
        [
            "--model-path",
            "m",
            "--sim-scenario=glm5-nvfp4-sm120",
            "--sim-inject",
            "hang_at=load",
            "--sim-seed",
            "3",
        ]
    )
    assert rest == ["--model-path", "m"]
    assert sim.scenario == "glm5-nvfp4-sm120" and sim.seed == 3 and sim.inject.hang_at == "load"
    for bad in (
        ["--sim-inject", "nope=1"],
        ["--sim-inject", "hang_at=later"],
        ["--sim-bogus", "1"],
        ["--sim-seed"],
    ):
        with pytest.raises(simargs.SimFlagError):
            simargs.split_sim_flags(bad)


def test_deprecation_warnings_by_version():
    t16 = builtin_table("0.5.16")
    warnings = simargs.deprecation_warnings(
        t16, ["--model-path", "m", "--nsa-decode-backend", "trtllm", "--disable-cuda-graph"]
    )
    assert len(warnings) == 2
    assert "'--nsa-decode-backend' is deprecated" in warnings[0] and "'--dsa-decode-backend'" in warnings[0]
    assert warnings[0].startswith("\033[1;33m")
    assert simargs.deprecation_warnings(builtin_table("0.5.9"), ["--nsa-decode-backend", "trtllm"]) == []


def _log_lines(version, graphs=True):
    scenario = load_scenario("glm5-nvfp4-sm120")
    argv = ["--tp-size", "8"] + (
        ["--cuda-graph-max-bs", "64"] if version != "0.5.23" else ["--cuda-graph-max-bs-decode", "64"]
    )
    if not graphs:
        argv.append("--disable-cuda-graph")
    launch = _launch(scenario, version, argv)
    return launch, [
        logfmt.backends_line(launch),
        logfmt.load_end(1.0, "X", "torch.bfloat16", 40_000, 54_360),
        logfmt.kv_allocated(launch, 369_211, 19_454, "torch.float8_e4m3fn"),
        logfmt.capture_begin(launch, 20_000),
        logfmt.capture_end(launch, 1.0, 4_397, 5_324),
        logfmt.kv_summary(launch, 369_211, 2048, 202_752, 16_573),
        logfmt.decode_batch(64, 30_000, 0.08, False, 225.3, 0),
    ]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.12", "0.5.13", "0.5.16", "0.5.23"])
def test_log_lines_match_reference_regexes(version):
    launch, (backends, load_end, kv, begin, end, summary, decode) = _log_lines(version)
    m = RE_BACKENDS.search(backends)
    assert m and m.group(1) == ("DSA" if version_key(version) >= version_key("0.5.13") else "NSA")
    assert RE_LOAD_END.search(load_end).groups() == ("39.06", "53.09")
    assert RE_KV.search(kv).group(1) == "369211"
    assert ("dtype: torch.float8_e4m3fn" in kv) == (version_key(version) >= version_key("0.5.13"))
    assert RE_CAPTURE_END.search(end) and RE_MEM_USAGE.search(end).group(1) == "4.29"
    assert RE_SUMMARY.search(summary).group(1) == "369211"
    assert RE_DECODE.search(decode).groups() == ("64", "0.08", "False", "225.30", "0")
    # the captured list is readable from the log in every era
    listed = [
        int(x)
        for x in re.search(r"bs=\[([\d, ]+)\]", begin + end + logfmt.server_args_line(launch.args))
        .group(1)
        .split(",")
    ]
    assert listed == list(launch.captured_bs) == list(memory.default_capture_bs(64))


def test_capture_line_format_by_era():
    _, lines9 = _log_lines("0.5.9")
    assert lines9[3].startswith("Capture cuda graph begin. This can take up to several minutes.")
    assert lines9[4].startswith("Capture cuda graph end. Time elapsed: ")
    _, lines16 = _log_lines("0.5.16")
    assert "bs=[1, 2, 4" in lines16[3] and "num_tokens_per_req=1" in lines16[3]
    _, lines23 = _log_lines("0.5.23")
    assert lines23[3].startswith("Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1")
    assert lines23[4].startswith("Capture target decode CUDA graph end. bs=[1, 2, 4")


def test_failure_messages_by_version():
    assert "self.server_args.mem_fraction_static=0.6" in logfmt.not_enough_memory("0.5.9", 0.6)
    assert "Current value: mem_fraction_static=0.6" in logfmt.not_enough_memory("0.5.23", 0.6)
    assert logfmt.rank_dead("0.5.9", 1).startswith("Rank 0 scheduler is dead")
    assert "died during initialization (exit code: -9)" in logfmt.rank_dead("0.5.23", -9)
    tb = logfmt.scheduler_exception("capture", logfmt.capture_failed("0.5.9", "CUDA out of memory."))
    assert tb.startswith("Scheduler hit an exception: Traceback (most recent call last):")
    assert "Exception: Capture cuda graph failed: CUDA out of memory." in tb and "--disable-cuda-graph" in tb


@pytest.mark.parametrize("gate", DEFAULT_PROMPTS, ids=lambda g: g.name)
def test_gate_prompts_get_right_answers(gate):
    ans = text.answer(
        gate.prompt, max_tokens=gate.max_tokens, ignore_eos=False, temperature=0, request_seed=0
    )
    out = "".join(ans.pieces)
    if gate.expect:
        assert gate.expect.lower() in out.lower()
    if gate.expect_regex:
        assert re.search(gate.expect_regex, out)
    assert gate.min_tokens <= len(ans.pieces) <= gate.max_tokens
    assert ans.finish_reason == "stop"


def test_answers_are_deterministic_and_respect_lengths():
    a = text.answer("Tell me a story", max_tokens=500, ignore_eos=False, temperature=0, request_seed=1)
    b = text.answer("Tell me a story", max_tokens=500, ignore_eos=False, temperature=0, request_seed=2)
    assert a == b and a.finish_reason == "stop"
    exact = text.answer(
        "What is the capital of France?", max_tokens=37, ignore_eos=True, temperature=0, request_seed=0
    )
    assert len(exact.pieces) == 37 and exact.finish_reason == "length" and "Paris" in "".join(exact.pieces)
    short = text.answer("Tell me a story", max_tokens=5, ignore_eos=False, temperature=0, request_seed=0)
    assert len(short.pieces) == 5 and short.finish_reason == "length"
    assert "".join(text.tokenize("Hello, world!  ok")) == "Hello, world!  ok"
    assert text.count_tokens("Hello, world!") == 4
