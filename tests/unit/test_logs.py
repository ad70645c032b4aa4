"""SGLang log parsing and failure classification over realistic 0.5.9-era and 0.5.23-era logs."""
# ruff: noqa: E501 - the fixtures are verbatim log lines, which run long

from __future__ import annotations

import pytest

from tuner.config import Outcome, Phase
from tuner.sglang.log_events import (
    CaptureBegin,
    CaptureEnd,
    DecodeBatch,
    Deprecation,
    FailureKind,
    FailureLine,
    HttpUp,
    KvCacheAllocated,
    KvRetraction,
    KvSummary,
    PrefillBatch,
    Ready,
    ServerArgs,
    SparseBackends,
    WeightLoadEnd,
)
from tuner.sglang.log_parse import parse_line, strip_ansi
from tuner.sglang.logs import LogState, classify_failure, is_fatal, nan_lines

YELLOW, RESET = "\x1b[1;33m", "\x1b[0m"

STARTUP_059 = f"""\
[2026-05-01 10:00:00] server_args=ServerArgs(model_path='zai-org/GLM-5-FP8', tokenizer_path='zai-org/GLM-5-FP8', \
mem_fraction_static=0.85, max_running_requests=None, tp_size=8, watchdog_timeout=300, cuda_graph_max_bs=32, \
cuda_graph_bs=[1, 2, 4, 8, 16, 32], disable_cuda_graph=False, disable_cuda_graph_padding=False, \
piecewise_cuda_graph_max_tokens=4096, enable_nan_detection=True)
[2026-05-01 10:00:00] {YELLOW}--enable-nan-detection is deprecated. Use SGLANG_SPEC_NAN_DETECTION=1 and \
SGLANG_SPEC_OOB_DETECTION=1 instead.{RESET}
[2026-05-01 10:00:00] Set NSA backends for fp8_e4m3 KV Cache: prefill=flashmla_auto, decode=flashmla_kv.
[2026-05-01 10:00:05 TP0] Init torch distributed begin.
[2026-05-01 10:00:07 TP0] Load weight begin. avail mem=139.20 GB
[2026-05-01 10:00:07 TP3] Load weight begin. avail mem=139.20 GB
[2026-05-01 10:02:07 TP0] Load weight end. elapsed=120.31 s, type=GlmMoeDsaForCausalLM, dtype=torch.bfloat16, \
avail mem=51.02 GB, mem usage=88.18 GB.
[2026-05-01 10:02:08 TP0] KV Cache is allocated. #tokens: 631104, KV size: 40.12 GB
[2026-05-01 10:02:08 TP0] Memory pool end. avail mem=10.40 GB
[2026-05-01 10:02:09 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=10.20 GB
[2026-05-01 10:02:40 TP0] Capture cuda graph end. Time elapsed: 31.20 s. mem usage=1.60 GB. avail mem=8.60 GB.
[2026-05-01 10:02:41 TP0] max_total_num_tokens=631104, chunked_prefill_size=8192, max_prefill_tokens=16384, \
max_running_requests=2048, context_len=202752, available_gpu_mem=8.60 GB
INFO:     Uvicorn running on http://127.0.0.1:30001 (Press CTRL+C to quit)
[2026-05-01 10:02:50] The server is fired up and ready to roll!
[2026-05-01 10:03:00 TP0] Prefill batch, #new-seq: 1, #new-token: 128, #cached-token: 0, token usage: 0.00, \
#running-req: 0, #queue-req: 0, input throughput (token/s): 0.00, cuda graph: False
[2026-05-01 10:03:01 TP0] Decode batch. #running-req: 1, #token: 161, token usage: 0.00, cuda graph: True, \
gen throughput (token/s): 57.31, #queue-req: 0
""".splitlines()

STARTUP_0523 = f"""\
[2026-05-01 10:00:00] server_args=ServerArgs(model_path='nvidia/GLM-5-NVFP4', mem_fraction_static=0.9, \
cuda_graph_max_bs_decode=256, cuda_graph_bs_decode=None, cuda_graph_max_bs_prefill=8192, disable_cuda_graph=False)
[2026-05-01 10:00:00] {YELLOW}attention-backend='nsa' is deprecated; use 'dsa' instead.{RESET}
[2026-05-01 10:00:00] Setting KV cache dtype to fp8_e4m3 for DeepSeek DSA on SM12 device.
[2026-05-01 10:00:00] Set DSA backends for GLM FP8 KV Cache on SM120/SM121: prefill=flashinfer_sparse_mla, \
decode=flashinfer_sparse_mla.
[2026-05-01 10:00:07.120 DP1 TP3] Load weight begin. avail mem=94.50 GB
[2026-05-01 10:03:07.500 DP1 TP3] Load weight end. elapsed=180.02 s, type=GlmMoeDsaForCausalLM, \
quant=modelopt_fp4, avail mem=37.40 GB, mem usage=57.10 GB.
[2026-05-01 10:03:08.000 DP1 TP3] KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 314304, \
KV size: 20.01 GB
[2026-05-01 10:03:08.001 DP1 TP3] Draft KV Cache is allocated. dtype: torch.bfloat16, #tokens: 9999, KV size: 1.00 GB
[2026-05-01 10:03:08.100 DP1 TP3] Memory pool end. avail mem=12.01 GB
[2026-05-01 10:03:09.000 DP1 TP3] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, \
avail mem=11.80 GB
[2026-05-01 10:03:54.000 DP1 TP3] Capture target decode CUDA graph end. bs=[1, 2, 4, 8, 16, 24, 32], \
elapsed=45.10 s, mem usage=1.20 GB, avail mem=10.60 GB.
[2026-05-01 10:03:55.000 DP1 TP3] Capture target prefill CUDA graph begin. backend=breakable, \
num_tokens=[4, 8, 12, 16], avail mem=10.60 GB
[2026-05-01 10:04:15.000 DP1 TP3] Capture target prefill CUDA graph end. elapsed=20.00 s, mem usage=0.50 GB, \
avail mem=10.10 GB.
[2026-05-01 10:04:16.000 DP0 TP0] max_total_num_tokens=314304, chunked_prefill_size=16384, \
max_prefill_tokens=16384, max_running_requests=64, context_len=202752, available_gpu_mem=10.10 GB
[2026-05-01 10:04:17.000] INFO:     Uvicorn running on http://[::1]:30002 (Press CTRL+C to quit)
[2026-05-01 10:04:20.000] The server is fired up and ready to roll!
[2026-05-01 10:05:00.000 DP1 TP3] Prefill batch, #new-seq: 2, #new-token: 4096, #cached-token: 128, \
token usage: 0.10, #running-req: 62, #queue-req: 3, #pending-token: 0, cuda graph: True, \
input throughput (token/s): 9000.50
[2026-05-01 10:05:01.000 DP1 TP3] Decode batch [1200], #running-req: 64, #token: 80000, token usage: 0.25, \
accept len: 3.10, accept rate: 0.78, cuda graph: True, gen throughput (token/s): 1843.20, #queue-req: 3, \
est. decode TFLOPS/s: 12.3
[2026-05-01 10:05:02.000 DP1 TP3] KV cache pool is full. Retract requests. #retracted_reqs: 3, \
#new_tokens_gained: 1024
""".splitlines()


# --------------------------------------------------------------------------- single lines


def test_server_args_old_and_new_names() -> None:
    assert parse_line(STARTUP_059[0]) == ServerArgs(
        cuda_graph_bs=(1, 2, 4, 8, 16, 32),
        cuda_graph_max_bs=32,
        disable_cuda_graph=False,
        mem_fraction_static=0.85,
    )
    assert parse_line(STARTUP_0523[0]) == ServerArgs(
        cuda_graph_bs=None, cuda_graph_max_bs=256, disable_cuda_graph=False, mem_fraction_static=0.9
    )
    assert parse_line(
        "[2026-05-01 10:00:00] server_args=ServerArgs(model_path='m', disable_cuda_graph=True)"
    ) == (ServerArgs(disable_cuda_graph=True))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "[2026-05-01 10:00:00] Set NSA backends for fp8_e4m3 KV Cache: prefill=flashmla_auto, decode=flashmla_kv.",
            SparseBackends(prefill="flashmla_auto", decode="flashmla_kv", kv="fp8_e4m3 KV Cache"),
        ),
        (
            "[2026-05-01 10:00:00] Set DSA backends for GLM FP8 KV Cache on SM120/SM121: prefill=flashinfer_sparse_mla,"
            " decode=flashinfer_sparse_mla.",
            SparseBackends(
                prefill="flashinfer_sparse_mla",
                decode="flashinfer_sparse_mla",
                kv="GLM FP8 KV Cache on SM120/SM121",
            ),
        ),
        (
            "[2026-05-01 10:00:00] Setting NSA backend to flashmla_auto for prefill and flashmla_kv for decode for FP8"
            " KV Cache.",
            SparseBackends(prefill="flashmla_auto", decode="flashmla_kv", kv="FP8 KV Cache"),
        ),
    ],
)
def test_sparse_backend_lines(line: str, expected: SparseBackends) -> None:
    assert parse_line(line) == expected


def test_weight_kv_and_capture_lines_of_both_eras() -> None:
    assert parse_line(STARTUP_059[6]) == WeightLoadEnd(
        elapsed_s=120.31, avail_mem_gb=51.02, mem_usage_gb=88.18
    )
    old_end = parse_line("[2026-05-01 10:02:07 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
                         "avail mem=60.00 GB, mem usage=15.50 GB.")  # fmt: skip
    assert old_end == WeightLoadEnd(elapsed_s=None, avail_mem_gb=60.0, mem_usage_gb=15.5)
    assert parse_line(STARTUP_059[7]) == KvCacheAllocated(tokens=631104)
    assert parse_line(STARTUP_0523[6]) == KvCacheAllocated(tokens=314304, dtype="torch.float8_e4m3fn")
    assert parse_line(STARTUP_0523[7]) == KvCacheAllocated(tokens=9999, dtype="torch.bfloat16", label="Draft")
    post = "[2026-05-01 10:04:15 TP0] Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: " \
           "500000, KV size: 30.00 GB, avail mem=9.00 GB"  # fmt: skip
    assert parse_line(post) == KvCacheAllocated(tokens=500000, dtype="torch.bfloat16", post_capture=True)
    assert parse_line("[2026-05-01 10:04:15 TP0] KV Cache VA upper bound. #tokens: 900000") is None

    assert parse_line(STARTUP_059[9]) == CaptureBegin(graph="decode", avail_mem_gb=10.2)
    assert parse_line(STARTUP_059[10]) == CaptureEnd(
        graph="decode", elapsed_s=31.2, mem_usage_gb=1.6, avail_mem_gb=8.6
    )
    assert parse_line(STARTUP_0523[10]) == CaptureEnd(
        graph="decode", bs=(1, 2, 4, 8, 16, 24, 32), elapsed_s=45.1, mem_usage_gb=1.2, avail_mem_gb=10.6
    )
    assert parse_line(STARTUP_0523[11]) == CaptureBegin(graph="prefill", avail_mem_gb=10.6)
    mid = "[2026-05-01 10:03:09 TP0] Capture cuda graph begin. bs=[1, 2, 4], num_tokens_per_bs=1, avail mem=11.80 GB"
    assert parse_line(mid) == CaptureBegin(graph="decode", bs=(1, 2, 4), avail_mem_gb=11.8)
    draft = "[2026-05-01 10:03:09 TP0] Capture draft verify CUDA graph end. bs=[1, 2], elapsed=1.00 s, mem usage=0.1 GB"
    assert parse_line(draft) == CaptureEnd(
        graph="verify", draft=True, bs=(1, 2), elapsed_s=1.0, mem_usage_gb=0.1
    )
    piecewise = "[2026-05-01 10:03:09 TP0] Capture piecewise CUDA graph end. Time elapsed: 9.50 s. mem usage=0.30 " \
                "GB. avail mem=7.00 GB."  # fmt: skip
    assert parse_line(piecewise) == CaptureEnd(
        graph="prefill", elapsed_s=9.5, mem_usage_gb=0.3, avail_mem_gb=7.0
    )


def test_summary_http_ready_and_steady_state_lines() -> None:
    assert parse_line(STARTUP_0523[13]) == KvSummary(
        max_total_num_tokens=314304, chunked_prefill_size=16384, max_prefill_tokens=16384, max_running_requests=64,
        context_len=202752, available_gpu_mem_gb=10.1,
    )  # fmt: skip
    assert parse_line(STARTUP_059[12]) == HttpUp(host="127.0.0.1", port=30001)
    assert parse_line(STARTUP_0523[14]) == HttpUp(host="::1", port=30002)
    assert parse_line(STARTUP_0523[15]) == Ready()
    assert parse_line(STARTUP_059[14]) == PrefillBatch(
        new_seq=1, new_token=128, cached_token=0, token_usage=0.0, running_req=0, queue_req=0,
        input_throughput_tok_s=0.0, cuda_graph=False,
    )  # fmt: skip
    assert parse_line(STARTUP_0523[16]) == PrefillBatch(  # field order changed: read by key
        new_seq=2, new_token=4096, cached_token=128, token_usage=0.1, running_req=62, queue_req=3,
        input_throughput_tok_s=9000.5, cuda_graph=True,
    )  # fmt: skip
    assert parse_line(STARTUP_059[15]) == DecodeBatch(
        running_req=1, num_tokens=161, token_usage=0.0, cuda_graph=True, gen_throughput_tok_s=57.31, queue_req=0,
        rank="TP0",
    )  # fmt: skip
    assert parse_line(STARTUP_0523[17]) == DecodeBatch(
        running_req=64, num_tokens=80000, token_usage=0.25, cuda_graph=True, gen_throughput_tok_s=1843.2, queue_req=3,
        rank="DP1 TP3",
    )  # fmt: skip
    hybrid = (
        "[2026-05-01 10:05:01 TP0] Decode batch, #running-req: 8, #full token: 100, full token usage: 0.01, "
        "#swa token: 50, swa token usage: 0.02, cuda graph: False, gen throughput (token/s): 99.00, #queue-req: 0"
    )
    assert parse_line(hybrid) == DecodeBatch(
        running_req=8, cuda_graph=False, gen_throughput_tok_s=99.0, queue_req=0, rank="TP0"
    )  # fmt: skip
    assert parse_line(STARTUP_0523[18]) == KvRetraction(retracted_reqs=3, new_tokens_gained=1024)


def test_deprecation_warnings_lose_their_colour() -> None:
    assert parse_line(STARTUP_0523[1]) == Deprecation(
        message="attention-backend='nsa' is deprecated; use 'dsa' instead."
    )
    assert parse_line(f"{YELLOW}--disable-cuda-graph is deprecated{RESET}") == Deprecation(
        message="--disable-cuda-graph is deprecated"
    )


def test_unknown_and_empty_lines() -> None:
    assert parse_line("") is None
    assert parse_line("[2026-05-01 10:00:05 TP0] Init torch distributed begin.") is None
    assert parse_line("    return forward_call(*args, **kwargs)") is None


# --------------------------------------------------------------------------- state


def test_state_of_a_059_startup() -> None:
    state = LogState.from_lines(STARTUP_059)
    assert (state.kv_tokens_log, state.max_total_num_tokens, state.available_gpu_mem_gb) == (
        631104,
        631104,
        8.6,
    )
    assert state.captured_bs == (1, 2, 4, 8, 16, 32)  # ≤0.5.13 logs no bs: taken from server_args
    assert state.cuda_graph is True
    assert state.backends == ("flashmla_auto", "flashmla_kv")
    assert state.weights_gb == 88.18
    assert state.mem_fraction_static == 0.85
    assert (state.http_up, state.port, state.ready_seen, state.stage) == (True, 30001, True, "ready")
    assert state.last_decode is not None and state.last_decode.gen_throughput_tok_s == 57.31
    assert state.deprecations and state.deprecations[0].startswith("--enable-nan-detection is deprecated")
    assert state.nan_lines == () and state.first_fatal is None


def test_state_of_a_0523_startup() -> None:
    state = LogState.from_lines(STARTUP_0523)
    assert state.kv_tokens_log == 314304  # the draft pool does not overwrite the target pool
    assert state.captured_bs == (1, 2, 4, 8, 16, 24, 32)  # the decode graph, not the prefill token buckets
    assert state.backends == ("flashinfer_sparse_mla", "flashinfer_sparse_mla")
    assert (state.weights_gb, state.retractions, state.port) == (57.1, 1, 30002)


def test_state_stages_and_graphs_off() -> None:
    state = LogState()
    stages = []
    for line in STARTUP_0523[:17]:
        state = state.apply(parse_line(line))
        stages.append(state.stage)
    assert stages[4:14] == [
        "load",
        "kv",
        "kv",
        "kv",
        "kv",
        "capture",
        "warmup",
        "capture",
        "warmup",
        "warmup",
    ]
    off = LogState.from_lines(["[x] server_args=ServerArgs(disable_cuda_graph=True)".replace("[x]", "")])
    assert off.cuda_graph is False and off.captured_bs is None
    post = LogState.from_lines([STARTUP_0523[6], "[2026-05-01 10:00:00 TP0] Post-capture KV sizing: KV cache "
                                "allocated. dtype: torch.bfloat16, #tokens: 500000, KV size: 30.00 GB"])  # fmt: skip
    assert post.kv_tokens_log == 500000


# --------------------------------------------------------------------------- failures


def tb(*body: str, prefix: str = "[2026-05-01 10:02:09 TP0]", who: str = "Scheduler") -> list[str]:
    return [
        f"{prefix} {who} hit an exception: Traceback (most recent call last):",
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2890, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
        *body,
        "",
    ]


TEARDOWN_059 = [
    "[2026-05-01 10:02:10] Received sigquit from a child process. It usually means the child failed.",
    "[2026-05-01 10:02:10] Rank 0 scheduler is dead. Please check if there are relevant logs.",
    "[2026-05-01 10:02:10] Exit code: -9",
]
TEARDOWN_0523 = [
    "[2026-05-01 10:02:10] Subprocess scheduler_TP3 (pid=4242) crashed with exit code -9. Triggering SIGQUIT for "
    "cleanup...",
    "[2026-05-01 10:02:10] Rank 3 scheduler died during initialization (exit code: -9). If exit code is -9 "
    "(SIGKILL), a common cause is the OS OOM killer. ...",
    "[2026-05-01 10:02:11] Initialization failed. Please see the error messages above.",
]


def classify(
    lines: list[str], exit_code: int | None = -9, phase: Phase = Phase.LAUNCH
) -> tuple[Outcome, str, str]:
    verdict = classify_failure(lines, exit_code=exit_code, phase=phase)
    return verdict.outcome, verdict.message, verdict.excerpt


def test_bad_flag_from_argparse() -> None:
    for error in (
        "launch_server.py: error: unrecognized arguments: --nsa-decode-backend trtllm",
        "launch_server.py: error: ambiguous option: --cuda-graph-bs could match --cuda-graph-bs-decode, "
        "--cuda-graph-bs-prefill",
        "launch_server.py: error: argument --dsa-prefill-backend: invalid choice: 'fa4' (choose from 'fa3', 'trtllm')",
        "launch_server.py: error: argument --cuda-graph-bs: invalid int value: '1,2,4'",
    ):
        outcome, message, excerpt = classify(
            ["usage: launch_server.py [-h] --model-path MODEL_PATH", error], 2
        )
        assert outcome is Outcome.BAD_FLAG
        assert message == "SGLang rejected the arguments: " + error.split("error: ", 1)[1]
        assert error in excerpt
    assert classify(["x.py: error: unrecognized arguments: --foo"], exit_code=1)[0] is Outcome.CRASHED


def test_not_enough_memory_in_both_eras_beats_teardown() -> None:
    old = tb("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
             "self.server_args.mem_fraction_static=0.5")  # fmt: skip
    new = tb("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
             "mem_fraction_static=0.5", prefix="[2026-05-01 10:02:09 DP1 TP3]")  # fmt: skip
    for lines in (STARTUP_059[:7] + old + TEARDOWN_059, STARTUP_0523[:6] + new + TEARDOWN_0523):
        outcome, message, excerpt = classify(lines)
        assert outcome is Outcome.NOT_ENOUGH_MEMORY
        assert "mem_fraction_static=0.5" in message and "\n" not in message
        assert "hit an exception" in excerpt and "Not enough memory" in excerpt


def oom_line(torch_name: str = "torch.OutOfMemoryError") -> str:
    return (f"{torch_name}: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 94.97 GiB"
            " of which 1.02 GiB is free.")  # fmt: skip


def test_oom_at_capture_old_and_new() -> None:
    old = STARTUP_059[:10] + tb(oom_line("torch.cuda.OutOfMemoryError")) + TEARDOWN_059
    new = STARTUP_0523[:10] + tb(
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "Possible solutions:",
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
        "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)",
    ) + TEARDOWN_0523  # fmt: skip
    for lines in (old, new):
        outcome, message, _ = classify(lines)
        assert outcome is Outcome.OOM
        assert message.startswith("CUDA out of memory at capture: ")


def test_oom_at_load_and_under_load() -> None:
    at_load = STARTUP_059[:5] + tb(oom_line()) + TEARDOWN_059
    outcome, message, _ = classify(at_load)
    assert (outcome, message.split(":")[0]) == (Outcome.OOM, "CUDA out of memory at load")
    running = STARTUP_059 + tb("RuntimeError: Decode out of memory. Try to lower your batch size.") + [
        "[2026-05-01 10:09:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed."
    ]  # fmt: skip
    outcome, message, _ = classify(running, phase=Phase.BENCH)
    assert outcome is Outcome.OOM
    assert message.startswith("KV cache exhausted under load: Decode out of memory")
    retract = ["ValueError: Out of memory even after retracting all other requests in the decode batch."]
    assert classify(STARTUP_059 + tb(*retract))[1].startswith("KV cache exhausted under load")


@pytest.mark.parametrize(
    "failure",
    [
        "Exception: Capture cuda graph failed: CUDA error: invalid resource handle",
        "Exception: Capture prefill CUDA graph failed: Triton Error [CUDA]: misaligned address",
    ],
)
def test_capture_failed_without_oom(failure: str) -> None:
    lines = STARTUP_0523[:12] + tb("  File \"kvcache.cuh\", line 196", failure) + [
        "Fail when using backend: breakable for prefill runner."
    ] + TEARDOWN_0523  # fmt: skip
    outcome, message, excerpt = classify(lines)
    assert outcome is Outcome.CAPTURE_FAILED
    assert message == "CUDA-graph capture failed: " + failure.split(": ", 1)[1]
    assert failure in excerpt


@pytest.mark.parametrize(
    "failure",
    [
        "RuntimeError: Assertion error (/deps/DeepGEMM/csrc/apis/attention.hpp:204): Unsupported architecture",
        "RuntimeError: TllmGenFmhaRunner: Unsupported architecture (fmhaRunner.cuh:55)",
        "Exception: Capture cuda graph failed: Internal Triton PTX codegen error: ptxas fatal   : Value 'sm_120' is "
        "not defined for option 'gpu-name'",
        "ptxas /tmp/k.ptx, line 5; error   : Feature 'setmaxnreg' not supported on .target 'sm_120'",
    ],
)
def test_unsupported_architecture(failure: str) -> None:
    outcome, message, _ = classify(STARTUP_0523[:10] + tb(failure) + TEARDOWN_0523)
    assert outcome is Outcome.UNSUPPORTED
    assert message.startswith("kernel not built for this GPU at capture: ")
    assert is_fatal(failure)


NAN_LINES = [
    "[2026-05-01 10:06:00 TP0] Detected errors during sampling! NaN in the logits.",
    "[2026-05-01 10:06:00 TP0] NaN detected in sampler: next_token_logits; values were sanitized before sampling.",
    "[2026-05-01 10:06:00 TP0] NaN detected! logits after lm_head",
    "/pytorch/aten/src/ATen/native/cuda/MultinomialKernel.cu:112: Assertion `probability tensor contains either "
    "`inf`, `nan` or element < 0` failed.",
]


@pytest.mark.parametrize("line", NAN_LINES)
def test_nan_lines_of_every_version(line: str) -> None:
    lines = [*STARTUP_059, line, *TEARDOWN_059]
    assert nan_lines(lines) == [line]
    outcome, message, _ = classify(lines, phase=Phase.GATE)
    assert outcome is Outcome.NAN
    assert message.startswith("NaN in the model's output under load: ")


def test_nan_is_fatal_only_where_the_server_dies() -> None:
    assert [is_fatal(line) for line in NAN_LINES] == [False, False, True, True]
    state = LogState.from_lines(STARTUP_059 + NAN_LINES)
    assert state.nan_lines == tuple(line.split("] ", 1)[-1] for line in NAN_LINES)
    assert state.first_fatal == "NaN detected! logits after lm_head"


def test_watchdog_is_a_hang_and_soft_watchdog_is_not_fatal() -> None:
    hard = "[2026-05-01 10:09:00 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"
    soft = "[2026-05-01 10:08:00 TP0] Scheduler watchdog timeout (self.watchdog_timeout=60, self.soft=True)"
    assert is_fatal(hard) and not is_fatal(soft)
    outcome, message, _ = classify([*STARTUP_059, soft, hard, TEARDOWN_059[0]], phase=Phase.BENCH)
    assert outcome is Outcome.HANG
    assert "self.soft=False" in message
    health = "[2026-05-01 10:09:00] Health check failed. Server couldn't get a response from detokenizer for last 20 s."
    assert classify([*STARTUP_059, health], exit_code=None, phase=Phase.BENCH)[0] is Outcome.HANG


def test_foreign_process_imbalance_is_the_machines_fault() -> None:
    line = ("ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
            "min_per_gpu_memory=40.1, local_gpu_memory=94.9, local_gpu_memory * 0.9=85.4")  # fmt: skip
    outcome, message, _ = classify(STARTUP_059[:4] + tb(line) + TEARDOWN_059)
    assert outcome is Outcome.INFRA_ERROR and "another process holds GPU memory" in message


def test_generic_crash_reports_the_exception_line_and_exit_code() -> None:
    lines = STARTUP_059 + tb(
        '  File "/sgl/python/sglang/srt/layers/moe/fused_moe.py", line 10, in forward',
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
        "CUDA kernel errors might be asynchronously reported at some other API call.",
    ) + TEARDOWN_059  # fmt: skip
    outcome, message, excerpt = classify(lines, phase=Phase.BENCH)
    assert outcome is Outcome.CRASHED
    assert message.startswith("server exited with code -9 (SIGKILL")
    assert message.endswith(
        "under load: torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
    )
    assert "illegal memory access" in excerpt
    other = tb("KeyError: 'model.layers.0.mlp.experts.w13_weight'", who="DetokenizerManager")
    outcome, message, _ = classify(STARTUP_059[:6] + other + TEARDOWN_0523, exit_code=1)
    assert outcome is Outcome.CRASHED
    assert message == "server exited with code 1 at load: KeyError: 'model.layers.0.mlp.experts.w13_weight'"


def test_teardown_only_and_silent_death() -> None:
    outcome, message, excerpt = classify(STARTUP_059[:8] + TEARDOWN_0523, exit_code=None)
    assert outcome is Outcome.CRASHED and "Subprocess scheduler_TP3 (pid=4242) crashed" in message
    outcome, message, excerpt = classify(STARTUP_059[:8], exit_code=1)
    assert outcome is Outcome.CRASHED
    assert message.startswith("server exited with code 1") and "no recognised error" in message
    assert excerpt.splitlines() == [strip_ansi(line) for line in STARTUP_059[:8]]


@pytest.mark.parametrize("exit_code", [-9, -15, 137, 143])
def test_a_kill_from_outside_without_evidence_is_not_the_configurations_fault(exit_code: int) -> None:
    outcome, message, excerpt = classify(STARTUP_059[:8], exit_code=exit_code)
    assert outcome is Outcome.INFRA_ERROR and not outcome.blames_config
    assert "killed by SIG" in message and "from outside" in message
    outcome, message, _ = classify(STARTUP_059[:8] + TEARDOWN_0523, exit_code=exit_code)
    assert outcome is Outcome.INFRA_ERROR and "only teardown lines" in message


def test_a_kill_with_evidence_in_the_log_blames_the_evidence() -> None:
    lines = STARTUP_0523[:10] + tb(oom_line(), prefix="[2026-05-01 10:03:10 DP1 TP3]") + TEARDOWN_0523
    outcome, _, _ = classify(lines, exit_code=-9)
    assert outcome is Outcome.OOM


def test_first_root_cause_wins_across_ranks() -> None:
    lines = (
        STARTUP_0523[:10]
        + tb(oom_line(), prefix="[2026-05-01 10:03:10 DP1 TP3]")
        + tb("RuntimeError: NCCL error: unhandled system error", prefix="[2026-05-01 10:03:11 DP0 TP0]")
        + tb("Exception: Capture cuda graph failed: CUDA error: invalid resource handle")
        + TEARDOWN_0523
    )
    outcome, message, _ = classify(lines)
    assert (outcome, message.split(":")[0]) == (Outcome.OOM, "CUDA out of memory at capture")


def test_excerpt_is_bounded_and_holds_the_traceback() -> None:
    frames = [f'  File "/sgl/f{i}.py", line {i}, in f{i}' for i in range(100)]
    lines = ["[2026-05-01 10:00:00] noise"] * 50 + tb(*frames, oom_line()) + TEARDOWN_059
    _, _, excerpt = classify(lines)
    rows = excerpt.splitlines()
    assert len(rows) <= 40
    assert oom_line() in rows and TEARDOWN_059[0] in rows
    assert "lines left out" in excerpt


def test_is_fatal_marks_the_lines_after_which_the_server_dies() -> None:
    fatal = [TEARDOWN_059[0], TEARDOWN_059[1], *TEARDOWN_0523, oom_line(), tb("x")[0],
             "[2026-05-01 10:00:00] Initialization failed. warmup error: Traceback ...",
             "RuntimeError: Prefill out of memory. Try to lower your batch size."]  # fmt: skip
    harmless = [*STARTUP_059, *STARTUP_0523, NAN_LINES[0]]
    assert all(is_fatal(line) for line in fatal)
    assert not any(is_fatal(line) for line in harmless)


def test_failure_lines_carry_kind_and_detail() -> None:
    event = parse_line("[2026-05-01 10:02:10 DP1 TP3] " + oom_line())
    assert isinstance(event, FailureLine)
    assert (event.kind, event.fatal, event.oom) == (FailureKind.CUDA_OOM, True, True)
    assert event.detail.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")


# --------------------------------------------------------------------------- backend blame

DSA_FLASHMLA_DECODE = [
    "[2026-05-01 10:00:00] Set NSA backends for fp8_e4m3 KV Cache: prefill=flashmla_auto, decode=flashmla_kv.",
    "[2026-05-01 10:01:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl/python/sglang/srt/model_executor/cuda_graph_runner.py", line 380, in capture_one_batch_size',
    "    run_once()",
    '  File "/sgl/python/sglang/srt/layers/attention/nsa_backend.py", line 900, in forward_decode',
    "    return self._forward_flashmla_kv(",
    '  File "/usr/lib/python3/site-packages/flash_mla/flash_mla_interface.py", line 80, in flash_mla_with_kvcache',
    "RuntimeError: Unsupported architecture",
]


def test_blame_names_the_announced_backend_variant_and_its_role() -> None:
    verdict = classify_failure(DSA_FLASHMLA_DECODE, exit_code=-9, phase=Phase.LAUNCH)
    assert verdict.outcome is Outcome.UNSUPPORTED
    assert (verdict.backend, verdict.role) == ("flashmla_kv", "decode")
    assert "at capture" in verdict.message


def test_blame_role_from_the_announced_backends_when_no_frame_says() -> None:
    lines = [
        "[2026-05-01 10:00:00] Set DSA backends for bfloat16 KV Cache: prefill=flashmla_sparse, decode=trtllm.",
        "[2026-05-01 10:01:00 TP0] RuntimeError: Error in function 'TllmGenFmhaRunner': Unsupported architecture",
    ]
    verdict = classify_failure(lines, exit_code=-9, phase=Phase.LAUNCH)
    assert (verdict.backend, verdict.role) == ("trtllm", "decode")


def test_no_blame_without_an_attention_frame_or_kernel_message() -> None:
    lines = [
        "[2026-05-01 10:01:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1000, in event_loop_normal',
        "    result = self.run_batch(batch)",
        '  File "/usr/lib/python3/site-packages/flashinfer/sampling.py", line 400, in top_k_top_p_sampling',
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
        "[2026-05-01 10:01:00] Received sigquit from a child process. It usually means the child failed.",
    ]
    verdict = classify_failure(lines, exit_code=-9, phase=Phase.LAUNCH)
    assert verdict.outcome is Outcome.UNSUPPORTED and "under load" in verdict.message
    assert (verdict.backend, verdict.role) == (None, None)


def test_ray_and_container_prefixes_are_read_through() -> None:
    ray = (
        "(SGLangEngine pid=12589) [2026-05-01 10:00:00 TP0] Decode out of memory happened. #retracted_reqs: 2"
    )
    assert parse_line(ray) == KvRetraction(retracted_reqs=2)
    compose = "llm-1  | [2026-05-01 10:00:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1"
    assert LogState.from_lines([ray, compose]).retractions == 2


def test_the_last_generic_error_wins_over_an_earlier_one_and_over_teardown() -> None:
    lines = [
        "[2026-05-01 10:00:00] Received sigquit from a child process. It usually means the child failed.",
        "[2026-05-01 10:00:00 TP0] Traceback (most recent call last):",
        "KeyError: 'stale request id'",
        "[2026-05-01 10:05:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 900, in event_loop_overlap',
        "ValueError: pool memory leak detected!",
    ]
    verdict = classify_failure(lines, exit_code=-9, phase=Phase.LAUNCH)
    assert verdict.outcome is Outcome.CRASHED
    assert "under load: ValueError: pool memory leak detected!" in verdict.message


def test_a_port_taken_under_the_server_is_the_machines_fault() -> None:
    lines = STARTUP_0523[:10] + tb("OSError: [Errno 98] error while attempting to bind on address "
                                   "('127.0.0.1', 30000): address already in use")
    outcome, message, _ = classify(lines, exit_code=1)
    assert outcome is Outcome.ENVIRONMENT and not outcome.blames_config
    assert "port is held by another process" in message
