"""Failure classes on every device runtime SGLang runs on, self-aborts, whole messages, and the environment.

The error lines are each runtime's own wording (torch's allocator messages per device, HIP's
error strings, the HSA runtime's status names and queue-abort callback, torch_npu/ACL, Unified
Runtime); the logs around them are SGLang's.
"""
# ruff: noqa: E501 - the lines are log lines, which run long

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.config import Outcome, Phase
from tuner.sglang.log_events import KvSummary
from tuner.sglang.log_parse import parse_line
from tuner.sglang.logs import classify_failure

HEAD = [
    "[2026-05-01 10:00:00] server_args=ServerArgs(model_path='m', mem_fraction_static=0.85, disable_cuda_graph=False)",
    "[2026-05-01 10:00:07 TP0] Load weight begin. avail mem=60.20 GB",
    "[2026-05-01 10:01:07 TP0] Load weight end. elapsed=60.0 s, type=LlamaForCausalLM, avail mem=40.00 GB, mem usage=20.20 GB.",
]
SERVING = [
    *HEAD,
    "[2026-05-01 10:01:08 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 300000, KV size: 30.00 GB",
    "[2026-05-01 10:01:20] The server is fired up and ready to roll!",
    "[2026-05-01 10:01:30 TP0] Decode batch, #running-req: 64, #token: 9000, token usage: 0.03, cuda graph: True, gen throughput (token/s): 3000.00, #queue-req: 0",
]
TEARDOWN = [
    "[2026-05-01 10:02:10] Received sigquit from a child process. It usually means the child failed.",
]


def tb(*body: str, frames: tuple[str, ...] = ()) -> list[str]:
    return [
        "[2026-05-01 10:02:09 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2890, in run_scheduler_process',
        *frames,
        *body,
        "",
    ]


def classify(
    lines: list[str], exit_code: int | None = -9, phase: Phase = Phase.LAUNCH
) -> tuple[Outcome, str, str | None]:
    v = classify_failure(lines, exit_code=exit_code, phase=phase)
    return v.outcome, v.message, v.stage


# torch's allocator on each device (c10's caching allocator, and the out-of-tree ones that copy it).
OOM_LINES = {
    "cuda": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.02 GiB is free.",
    "rocm": "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 191.98 GiB of which 780.24 MiB is free.",
    "ascend": "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.96 GiB total capacity; 58.13 GiB already allocated; 58.13 GiB current active; 97.16 MiB free; 58.42 GiB reserved in total by PyTorch)",
    "xpu": "torch.OutOfMemoryError: XPU out of memory. Tried to allocate 2.00 GiB (GPU 0; 63.98 GiB total capacity; 60.01 GiB already allocated; 61.00 GiB reserved in total by PyTorch)",
    "musa": "torch.OutOfMemoryError: MUSA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 47.98 GiB of which 10.00 MiB is free.",
    "hip-runtime": "RuntimeError: HIP error: out of memory",
    "ur": "RuntimeError: level_zero backend failed with error: 39 (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)",
}


@pytest.mark.parametrize("platform", sorted(OOM_LINES))
def test_an_allocator_out_of_memory_is_oom_in_every_runtimes_words(platform: str) -> None:
    frames = ('  File "/sgl/python/sglang/srt/models/llama.py", line 300, in forward',)
    outcome, message, stage = classify(SERVING + tb(OOM_LINES[platform], frames=frames) + TEARDOWN)
    assert outcome is Outcome.OOM, message
    assert stage == "serving"
    outcome, _, stage = classify(HEAD + tb(OOM_LINES[platform]) + TEARDOWN)
    assert outcome is Outcome.OOM and stage == "load"


UNSUPPORTED_LINES = (
    "RuntimeError: HIP error: invalid device function",
    "torch.AcceleratorError: HIP error: no kernel image is available for execution on the device",
    "RuntimeError: hipErrorNoBinaryForGpu: Unable to find code object for all current devices!",
    "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    "RuntimeError: Native API failed. Native API returns: 2147483646 (UR_RESULT_ERROR_INVALID_BINARY)",
)


@pytest.mark.parametrize("line", UNSUPPORTED_LINES)
def test_a_kernel_with_no_code_for_this_device_is_unsupported(line: str) -> None:
    outcome, message, _ = classify(HEAD + tb(line) + TEARDOWN)
    assert outcome is Outcome.UNSUPPORTED, message


FAULT_LINES = (
    ":0:rocdevice.cpp            :3586: 1183357978 us:  Callback: Queue 0x7f35e8100000 aborting with error : HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. code: 0x1016",
    "Memory access fault by GPU node-2 (Agent handle: 0x38b6960) on address 0x7fe55fb03000. Reason: Page not present or supervisor privilege.",
    "torch.AcceleratorError: HIP error: an illegal memory access was encountered",
    "RuntimeError: ACL stream synchronize failed, error code:507015",
    "RuntimeError: synchronize:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:361 NPU function error: c10_npu::acl::AclrtSynchronizeStreamWithTimeout(stream()), error code is 507011",
    "torch.AcceleratorError: CUDA error: device-side assert triggered",
    "[ASSERT] /usr/local/Ascend/opp/built-in/op_impl/ai_core/tbe/impl/dynamic/../ascendc/gather_v3/gather_v3_base.h:137: "
    "Assertion `(0 <= val && val < this->gxSize_)' Index 4455804570913351284 out of range[0 203136)!",
    "RuntimeError: Native API failed. Native API returns: -36 (UR_RESULT_ERROR_DEVICE_LOST)",
)


@pytest.mark.parametrize("line", FAULT_LINES)
def test_an_asynchronous_device_fault_is_a_serving_crash_wherever_it_surfaced(line: str) -> None:
    """Reported inside the KV allocator (the next synchronisation), it is still no OOM."""
    frames = (
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1105, in event_loop_overlap',
        '  File "/sgl/python/sglang/srt/mem_cache/allocator.py", line 120, in alloc',
    )
    outcome, message, stage = classify(SERVING + tb(line, frames=frames) + TEARDOWN, exit_code=-9)
    assert outcome is Outcome.CRASHED, message
    assert stage == "serving"


@pytest.mark.parametrize("exit_code", [-6, -11, 134, 139])
def test_a_self_inflicted_signal_is_a_crash_not_an_outside_kill(exit_code: int) -> None:
    outcome, message, _ = classify(SERVING, exit_code=exit_code)
    assert outcome is Outcome.CRASHED and outcome.blames_config, message
    assert "crashed itself" in message
    outcome, _, _ = classify(SERVING + TEARDOWN, exit_code=exit_code)
    assert outcome is Outcome.CRASHED


@pytest.mark.parametrize(
    "evidence",
    [
        "Fatal Python error: Aborted",
        "Fatal Python error: Segmentation fault",
        "terminate called after throwing an instance of 'c10::Error'",
        "[2026-05-01 10:02:10] Subprocess scheduler_TP3 (pid=4242) crashed with exit code -6. Triggering SIGQUIT for cleanup...",
    ],
)
def test_self_abort_evidence_under_a_sigkill_is_a_crash(evidence: str) -> None:
    """SGLang kills its own tree with SIGKILL after a child aborted: the abort is the cause."""
    outcome, message, stage = classify([*SERVING, evidence, *TEARDOWN], exit_code=-9)
    assert outcome is Outcome.CRASHED, message
    assert stage == "serving"
    outcome, message, _ = classify([*SERVING, *TEARDOWN], exit_code=-9)
    assert outcome is Outcome.INFRA_ERROR and "from outside" in message  # no evidence: the machine


def test_the_message_continues_on_the_next_lines() -> None:
    lines = HEAD + tb(
        "Exception: Capture cuda graph failed: Internal Triton PTX codegen error:",
        "ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'",
        "Possible solutions:",
    ) + TEARDOWN  # fmt: skip
    outcome, message, stage = classify(lines)
    assert outcome is Outcome.UNSUPPORTED and stage == "capture", message
    lines = HEAD + tb(
        "RuntimeError: Worker failed with error:",
        "  NPU out of memory. Tried to allocate 72.00 MiB (NPU 0; 61.27 GiB total capacity)",
    ) + TEARDOWN  # fmt: skip
    assert classify(lines)[0] is Outcome.OOM


def test_a_capture_failure_line_is_at_capture_without_a_capture_begin_line() -> None:
    lines = HEAD + tb("Exception: Capture cuda graph failed: list index out of range") + TEARDOWN
    outcome, _, stage = classify(lines)
    assert outcome is Outcome.CAPTURE_FAILED and stage == "capture"


@pytest.mark.parametrize("cut", [False, True])
def test_batch_scheduling_frames_are_serving(cut: bool) -> None:
    """Building and admitting batches only happens while serving, even when the post cut the loop off."""
    frames = (
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1105, in event_loop_normal',
        '  File "/sgl/python/sglang/srt/managers/schedule_policy.py", line 500, in add_one_req',
        '  File "/sgl/python/sglang/srt/managers/schedule_batch.py", line 1400, in prepare_for_extend',
    )[1 if cut else 0 :]
    outcome, message, stage = classify(
        HEAD + tb("IndexError: list index out of range", frames=frames) + TEARDOWN
    )
    assert outcome is Outcome.CRASHED and stage == "serving", message


def test_a_traceback_cut_where_the_scheduler_enters_its_event_loop_is_serving() -> None:
    lines = [
        "[2026-03-07 03:03:55 TP9 EP9] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 3253, in run_scheduler_process',
        "    scheduler.run_event_loop()",
        '  File "/sgl/python/sglang/srt/managers/sche',
    ]
    outcome, _, stage = classify(lines)
    assert outcome is Outcome.CRASHED and stage == "serving"


@pytest.mark.parametrize("cut", [False, True])
def test_argparse_banner_and_exit_2_is_a_bad_flag(cut: bool) -> None:
    lines = [
        "usage: launch_server.py [-h] --model-path MODEL_PATH [--tokenizer-path TOKENIZER_PATH]",
        "                        [--host HOST] [--port PORT]",
    ]
    if not cut:
        lines.append("launch_server.py: error: argument --kv-cache-dtype: invalid choice: 'fp4'")
    outcome, message, _ = classify(lines, exit_code=2)
    assert outcome is Outcome.BAD_FLAG, message
    assert classify(lines, exit_code=1)[0] is not Outcome.BAD_FLAG  # no exit 2: not argparse's verdict


ENVIRONMENT = {
    "proxy": tb(
        '  File "/sgl/python/sglang/srt/entrypoints/http_server.py", line 1434, in _execute_server_warmup',
        "AssertionError: res=<Response [502]>, res.text=''",
    ),
    "offline": tb(
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='openaipublic.blob.core.windows.net', port=443): "
        "Max retries exceeded with url: /encodings/o200k_base.tiktoken (Caused by NameResolutionError(\"Failed to resolve 'openaipublic.blob.core.windows.net' ([Errno -3] Temporary failure in name resolution)\"))"
    ),
    "port": tb("zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:5757')"),
    "disk": tb("RuntimeError: unable to write to file </torch_123_456_0>: No space left on device (28)"),
}


@pytest.mark.parametrize("what", sorted(ENVIRONMENT))
def test_failures_no_flag_can_cause_are_the_environment(what: str) -> None:
    outcome, message, _ = classify(HEAD + ENVIRONMENT[what] + TEARDOWN)
    assert outcome is Outcome.ENVIRONMENT, message
    assert not outcome.blames_config


def test_host_ram_is_the_environment_only_before_model_code_ran() -> None:
    errno12 = [
        "Process Process-6:",
        "Traceback (most recent call last):",
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1984, in run_scheduler_process',
        "    faulthandler.enable()",
        "OSError: [Errno 12] Cannot allocate memory",
    ]
    assert classify(errno12)[0] is Outcome.ENVIRONMENT
    assert classify(HEAD + errno12)[0] is Outcome.CRASHED  # weights were loading: the configuration may


def test_a_warmup_that_cannot_reach_its_own_server_is_not_the_network() -> None:
    lines = HEAD + tb(
        "requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=30000): Max retries exceeded "
        "with url: /generate (Caused by NewConnectionError('Failed to establish a new connection: [Errno 111] Connection refused'))"
    ) + TEARDOWN  # fmt: skip
    assert classify(lines)[0] is not Outcome.ENVIRONMENT


REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real_sglang"


def test_a_kernel_library_that_cannot_be_imported_makes_its_backend_unsupported() -> None:
    """Real SGLang 0.5.17: `--attention-backend fa3` on an install without FA3 (issue 26)."""
    lines = (REAL / "fa3_import_0_5_17.log").read_text(encoding="utf-8").splitlines()
    verdict = classify_failure(lines, exit_code=-9, phase=Phase.LAUNCH)
    assert verdict.outcome is Outcome.UNSUPPORTED, verdict.message
    assert verdict.backend == "fa3"
    assert "Can not import FA3" in verdict.message


def test_an_import_failure_outside_attention_backends_is_a_crash() -> None:
    frames = ('  File "/sgl/python/sglang/srt/layers/moe/fused_moe_triton/layer.py", line 40, in __init__',)
    lines = (
        HEAD + tb("ImportError: cannot import name 'moe_align' from 'sgl_kernel'", frames=frames) + TEARDOWN
    )
    assert classify(lines)[0] is Outcome.CRASHED


def test_a_summary_field_behind_other_text_never_raises() -> None:
    """A collector's prefix or a wrapper before `max_total_num_tokens=` left the old parser with a KeyError."""
    event = parse_line("ERROR 2026-05-01T10:00:00Z [severity: ERROR] foo max_total_num_tokens=314304, x=1")
    assert isinstance(event, KvSummary) and event.max_total_num_tokens == 314304


def test_only_an_error_raised_at_the_site_itself_is_classed_by_the_site() -> None:
    """Raised by the KV allocator: out of KV. Raised in torch, reported through it: a crash."""
    site = (
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1105, in event_loop_overlap',
        '  File "/sgl/python/sglang/srt/mem_cache/allocator.py", line 120, in alloc',
        "    raise RuntimeError(msg)",
    )
    deeper = (
        *site[:2],
        "    out = torch.ops.sgl_kernel.alloc_extend(a, b)",
        '  File "/usr/lib/python3.12/site-packages/torch/_ops.py", line 1209, in __call__',
        "    return self._op(*args, **kwargs)",
    )
    error = "RuntimeError: expected a non-empty free list"
    outcome, _, stage = classify(SERVING + tb(error, frames=site) + TEARDOWN)
    assert outcome is Outcome.OOM and stage == "serving"
    outcome, message, stage = classify(SERVING + tb(error, frames=deeper) + TEARDOWN)
    assert outcome is Outcome.CRASHED and stage == "serving", message


def test_a_post_that_starts_inside_a_traceback_opens_it_at_its_first_frame() -> None:
    """Code lines first (the post cut the header off), then frames: still a traceback, under each prefix."""
    from tuner.sglang.log_prefix import FORMATS, apply_prefix

    lines = [
        "    result = self.run_batch(self.cur_batch, pp_proxy_tensors)",
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 3234, in run_batch',
        "    batch_result = self.model_worker.forward_batch_generation(",
        '  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 2922, in forward',
    ]
    for prefix in (None, *FORMATS):
        wrapped = lines if prefix is None else [apply_prefix(prefix, line, n) for n, line in enumerate(lines)]
        outcome, message, stage = classify(wrapped)
        assert outcome is Outcome.CRASHED and stage == "serving", (prefix, message)


# ProcessGroupNCCL's watchdog (torch_npu's ProcessGroupHCCL prints the same words).
COLLECTIVE_TIMEOUT = (
    "[rank0]:[E207 10:12:09.321131395 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600022 milliseconds before timing out."
)


@pytest.mark.parametrize(
    ("lines", "phase", "stage"),
    [
        ([*HEAD, COLLECTIVE_TIMEOUT], Phase.LAUNCH, "load"),  # a rank that never joined the first collective
        ([*SERVING, COLLECTIVE_TIMEOUT], Phase.BENCH, "serving"),
    ],
)
def test_a_collective_that_timed_out_is_a_hang_in_the_stage_the_log_shows(
    lines: list[str], phase: Phase, stage: str
) -> None:
    outcome, message, got = classify(lines, phase=phase)
    assert outcome is Outcome.HANG
    assert got == stage
    assert "a collective never completed" in message


def test_the_runtime_refusing_an_operation_during_a_capture_proves_the_capture_stage() -> None:
    line = "torch.AcceleratorError: HIP error: operation not permitted when stream is capturing"
    outcome, _, stage = classify([*HEAD, *tb(line), *TEARDOWN])
    assert (outcome, stage) == (Outcome.CAPTURE_FAILED, "capture")
    # While serving the same words prove nothing of a capture: the stage stays the log's.
    outcome, _, stage = classify([*SERVING, *tb(line), *TEARDOWN], phase=Phase.BENCH)
    assert (outcome, stage) == (Outcome.CRASHED, "serving")


def test_a_failed_warmup_request_is_the_warmup_stage() -> None:
    lines = [
        *HEAD,
        "[2026-05-01 10:01:08 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 300000, KV size: 30.00 GB",
        "[2026-05-01 10:01:30] Initialization failed. warmup error: Traceback (most recent call last):",
        '  File "/sgl/python/sglang/srt/entrypoints/http_server.py", line 1566, in _execute_server_warmup',
        "AssertionError: Internal server error",
    ]
    outcome, _, stage = classify(lines)
    assert (outcome, stage) == (Outcome.CRASHED, "warmup")


@pytest.mark.parametrize(
    "line",
    [
        "KeyError: \"Unknown GPU architecture: gfx1101. Supported architectures: ['native', 'gfx90a', 'gfx942']\"",
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 196608, Hardware limit: 65536. Reducing block sizes or `num_stages` may help.",
        'loc("/tmp/k/kernel.ttadapter.mlir":2:3): error: ub overflow, requires 2097152 bits while 1572864 bits available!',
    ],
)
def test_a_kernel_that_cannot_run_on_this_device_is_unsupported(line: str) -> None:
    outcome, _, _ = classify([*HEAD, *tb(line), *TEARDOWN])
    assert outcome is Outcome.UNSUPPORTED


def test_flashinfers_own_cuda_error_line_names_the_failure_and_its_backend() -> None:
    line = (
        "CUDA Error: an illegal memory access was encountered (700) "
        "/usr/lib/python3/site-packages/flashinfer/data/include/flashinfer/attention/prefill.cuh: line 2313 at function cudaLaunchKernel"
    )
    v = classify_failure([*SERVING, line, *TEARDOWN], exit_code=-9, phase=Phase.BENCH)
    assert v.outcome is Outcome.CRASHED
    assert "illegal memory access" in v.message
    assert v.backend == "flashinfer"


def test_the_graph_runners_progress_bar_proves_a_capture_is_under_way() -> None:
    lines = [
        *HEAD,
        "Capturing batches (bs=32 avail_mem=10.30 GB):   0%|          | 0/8 [00:00<?, ?it/s]",
        *tb("RuntimeError: CUDA error: an unspecified launch failure"),
    ]
    assert classify(lines)[2] == "capture"


def test_a_request_answered_proves_the_server_is_past_load() -> None:
    lines = [
        *HEAD,
        '[2026-05-01 10:01:40] INFO:     127.0.0.1:47660 - "GET /model_info HTTP/1.1" 200 OK',
        *tb("RuntimeError: something broke"),
    ]
    assert classify(lines)[2] == "warmup"


@pytest.mark.parametrize(
    ("line", "outcome"),
    [
        # 0.4's profiler found a negative KV budget: `Not enough memory` follows
        (
            "[2025-07-02 07:41:59 TP0] max_total_tokens=131072 is larger than the profiled value -561981. Use the profiled value instead.",
            Outcome.NOT_ENOUGH_MEMORY,
        ),
        # the scheduler watchdog's py-spy dump, before its timeout line (cut here)
        ("[2025-11-05 10:18:51] Pyspy dump for PID 499:", Outcome.HANG),
        # aiter's HIP_CALL and CANN's vector-core exception: device errors
        (
            "fail to call hipModuleLaunchKernel( kernel_func, gdx, gdy, gdz, bdx, 1, 1, 0, stream, nullptr, (void**)&config) ---> [HIP error](invalid argument)",
            Outcome.CRASHED,
        ),
        ("       AIV Kernel happen error, retCode=0x31.[FUNC:GetError][FILE:stream.cc]", Outcome.CRASHED),
        # a kernel library's JIT build failing: the kernel cannot be built on this install
        ("RuntimeError: Ninja build failed", Outcome.UNSUPPORTED),
    ],
)
def test_more_runtime_and_library_lines(line: str, outcome: Outcome) -> None:
    assert classify([*SERVING, line, *TEARDOWN], phase=Phase.BENCH)[0] is outcome


def test_a_crash_in_the_detokenizers_loop_is_under_load() -> None:
    lines = [
        *HEAD,
        "[2026-05-01 10:02:09] DetokenizerManager hit an exception: Traceback (most recent call last):",
        '  File "/sgl/python/sglang/srt/managers/detokenizer_manager.py", line 275, in run_detokenizer_process',
        "    manager.event_loop()",
        '  File "/sgl/python/sglang/srt/managers/detokenizer_manager.py", line 110, in event_loop',
        "    output = self._request_dispatcher(recv_obj)",
        "IndexError: list index out of range",
    ]
    assert classify(lines)[2] == "serving"


def test_an_exception_line_with_a_full_width_colon_is_an_error_line() -> None:
    outcome, message, _ = classify([*SERVING, "RuntimeError：E19999: Inner Error!", *TEARDOWN], phase=Phase.BENCH)
    assert outcome is Outcome.CRASHED
    assert "E19999" in message


def test_a_kernels_assert_is_a_device_fault_named_in_the_message() -> None:
    line = (
        '../aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [4,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.'
    )
    outcome, message, _ = classify([*SERVING, line, *TEARDOWN], phase=Phase.BENCH)
    assert outcome is Outcome.CRASHED
    assert "index out of bounds" in message


def test_nvshmems_transport_errors_are_errors_of_the_server() -> None:
    line = "/sgl-workspace/nvshmem/src/host/init/init.cu:1007: non-zero status: 7 nvshmem setup connections failed"
    outcome, message, _ = classify([*HEAD, line, *TEARDOWN])
    assert outcome is Outcome.CRASHED
    assert "nvshmem setup connections failed" in message


def test_a_library_built_for_another_torch_is_the_environment() -> None:
    line = "ERROR! Intel® Extension for PyTorch* needs to work with PyTorch 2.6.*, but PyTorch 2.7.0+cu126 is found. Please switch to the matching version and run again."
    assert classify([*HEAD, line], exit_code=1)[0] is Outcome.ENVIRONMENT


def test_a_kernels_own_compute_capability_check_is_unsupported() -> None:
    line = "AssertionError: Only SM 10.x and 11.x are supported"
    assert classify([*HEAD, *tb(line), *TEARDOWN])[0] is Outcome.UNSUPPORTED


def test_the_bare_unrecognized_arguments_of_a_system_exit_is_a_bad_flag_only_in_that_form() -> None:
    # SGLang's diffusion ServerArgs: SystemExit("error: unrecognized arguments: ..."), status 1
    assert classify(["error: unrecognized arguments: --served-model-name m"], exit_code=1)[0] is Outcome.BAD_FLAG
    # another program's argparse line with status 1 is not SGLang rejecting its flags
    assert classify(["x.py: error: unrecognized arguments: --foo"], exit_code=1)[0] is Outcome.CRASHED


@pytest.mark.parametrize(("lines", "phase", "outcome"), [
    (HEAD, Phase.LAUNCH, Outcome.CAPTURE_FAILED),  # the piecewise graphs are captured at start-up
    (SERVING, Phase.BENCH, Outcome.CRASHED),  # ... and the same words around a replay under load
])  # fmt: skip
def test_the_piecewise_runners_failure_is_a_capture_only_before_serving(
    lines: list[str], phase: Phase, outcome: Outcome
) -> None:
    line = "[2026-05-01 10:02:08] Piecewise CUDA Graph failed with error: CUDA error: an illegal memory access was encountered"
    assert classify([*lines, line, *TEARDOWN], phase=phase)[0] is outcome


def test_torchs_refusal_during_a_graph_capture_proves_the_capture_stage() -> None:
    line = (
        "RuntimeError: Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture. If you need this call "
        "to be captured, please file an issue. Current cudaStreamCaptureStatus: cudaStreamCaptureStatusActive"
    )
    assert classify([*HEAD, *tb(line), *TEARDOWN])[2] == "capture"


def test_a_failed_ninja_run_of_torchs_cpp_extension_is_a_failed_jit_build() -> None:
    line = "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1."
    assert classify([*HEAD, *tb(line), *TEARDOWN])[0] is Outcome.UNSUPPORTED


def test_a_model_the_installed_transformers_does_not_know_is_the_environment() -> None:
    line = (
        "ValueError: The checkpoint you are trying to load has model type `glm_moe_dsa` but Transformers does not "
        "recognize this architecture. This could be because of an issue with the checkpoint, or because your "
        "version of Transformers is out of date."
    )
    assert classify([*tb(line)], exit_code=1)[0] is Outcome.ENVIRONMENT


def test_an_uncaught_cpp_exceptions_what_line_is_the_message() -> None:
    lines = [
        *SERVING,
        "terminate called after throwing an instance of 'gloo::EnforceNotMet'",
        " what():  [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. 4 vs 3",
        "Fatal Python error: Aborted",
        "",
        "Thread 0x0000fff873f6f120 (most recent call first):",
        ' File "/usr/lib/python3/site-packages/sglang/srt/disaggregation/mooncake/conn.py", line 1499 in heartbeat_checker',
    ]
    outcome, message, stage = classify(lines, exit_code=-6, phase=Phase.BENCH)
    assert (outcome, stage) == (Outcome.CRASHED, "serving")
    assert "op.preamble.length <= op.nbytes" in message
