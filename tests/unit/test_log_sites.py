"""A failed server's log classified by where its traceback failed, whatever the message says.

The messages below are deliberately reworded (no signature knows them): the frames and the
exception type alone must decide class and stage.
"""

from __future__ import annotations

from tuner.config import Phase
from tuner.sglang.log_sites import Site, failure_site, sglang_frames
from tuner.sglang.logs import classify_failure

SRT = "/usr/local/lib/python3.12/dist-packages/sglang/srt"
HEAD = "[2026-07-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):"
SIGQUIT = "[2026-07-01 10:00:01] Received sigquit from a child process. It usually means the child failed."


def frame(path: str, func: str, line: int = 10) -> str:
    return f'  File "{SRT}/{path}", line {line}, in {func}'


def classify(lines: list[str], exit_code: int = -9, phase: Phase = Phase.LAUNCH) -> tuple[str, str | None]:
    verdict = classify_failure(lines, exit_code=exit_code, phase=phase)
    return verdict.outcome.value, verdict.stage


def test_memory_profiling_site_is_not_enough_memory_whatever_it_says() -> None:
    lines = [
        HEAD,
        frame("managers/scheduler.py", "run_scheduler_process"),
        frame("model_executor/model_runner.py", "initialize"),
        frame("mem_cache/kv_cache_configurator.py", "_profile_available_bytes"),
        "ValueError: the weights took everything, budget exhausted",
        SIGQUIT,
    ]
    assert classify(lines) == ("not_enough_memory", "load")


def test_kv_allocator_site_is_oom_under_load() -> None:
    lines = [
        HEAD,
        frame("managers/scheduler.py", "event_loop_overlap"),
        frame("managers/schedule_batch.py", "prepare_for_extend"),
        frame("mem_cache/common.py", "alloc_paged_token_slots_extend"),
        "    raise RuntimeError(",
        "RuntimeError: pool exhausted; retry with fewer running requests",
    ]
    assert classify(lines) == ("oom", "serving")


def test_headerless_capture_frames_are_a_capture_failure_even_when_killed() -> None:
    lines = [
        "[2026-06-23 11:00:00 PP1 TP3] Capture cuda graph begin. This can take up to several minutes.",
        frame("model_executor/cuda_graph_runner.py", "capture"),
        frame("model_executor/cuda_graph_runner.py", "capture_one_batch_size"),
        frame("model_executor/cuda_graph_runner.py", "run_once"),
        '  File "/usr/local/lib/python3.12/dist-packages/torch/nn/modules/module.py", line 1, in _call_impl',
    ]
    assert classify(lines, exit_code=-9)[0] == "capture_failed"


def test_a_device_side_assert_in_the_serving_loop_is_staged_serving() -> None:
    lines = [
        "[2026-04-23 10:00:00 TP0] Load weight end. elapsed=10.00 s, avail mem=40.00 GB, mem usage=30.00 GB.",
        HEAD,
        frame("managers/scheduler.py", "event_loop_normal_disagg_decode"),
        frame("managers/scheduler.py", "run_batch"),
        "torch.AcceleratorError: CUDA error: device-side assert triggered",
    ]
    outcome, stage = classify(lines)
    assert (outcome, stage) == ("crashed", "serving")


def test_the_old_watchdog_wording_is_a_hang() -> None:
    lines = [
        "[2025-06-22 16:13:55 TP0] Watchdog timeout (self.watchdog_timeout=300)",
        "[2025-06-22 16:13:55 TP0] Pyspy failed to dump PID 63217.   Error: /bin/sh: py-spy: not found",
        SIGQUIT,
    ]
    assert classify(lines)[0] == "hang"


def test_a_bad_flag_whose_choices_name_a_backend_blames_no_backend() -> None:
    line = (
        "launch_server.py: error: argument --attention-backend: invalid choice: 'fa4' (choose from "
        "'triton', 'torch_native', 'flashinfer', 'trtllm_mla', 'trtllm_mha', 'fa3')"
    )
    verdict = classify_failure([line], exit_code=2, phase=Phase.LAUNCH)
    assert verdict.outcome.value == "bad_flag" and verdict.backend is None


def test_an_oom_keeps_its_class_at_any_site() -> None:
    lines = [
        HEAD,
        frame("model_executor/cuda_graph_runner.py", "capture_one_batch_size"),
        frame("mem_cache/common.py", "alloc_token_slots"),
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    ]
    assert classify(lines)[0] == "oom"


def test_the_innermost_known_site_decides() -> None:
    lines = [
        frame("managers/scheduler.py", "event_loop_overlap"),
        frame("model_executor/cuda_graph_runner.py", "replay"),
        frame("mem_cache/allocator.py", "alloc_extend"),
        frame("layers/attention/flashinfer_backend.py", "forward_extend"),
    ]
    assert [f.func for f in sglang_frames(lines)][-1] == "forward_extend"
    assert failure_site(lines) is Site.KV_ALLOC


def test_a_traceback_cut_in_the_kv_allocator_without_header_or_error_is_oom_under_load() -> None:
    lines = [
        "[2026-05-01 09:00:00 TP0] Prefill batch. #new-seq: 9, #new-token: 8192, #cached-token: 0",
        frame("managers/scheduler.py", "get_new_batch_prefill"),
        frame("managers/schedule_batch.py", "prepare_for_extend"),
        frame("mem_cache/common.py", "alloc_paged_token_slots_extend"),
        "    raise RuntimeError(",
    ]
    assert classify(lines) == ("oom", "serving")
