"""SGLang's log lines, per pretended release (pure string builders; reference §4)."""

from __future__ import annotations

import math
import time
from typing import Any

from tuner.sim.resolve import Launch, at_least


def stamp(prefix: str = "", now_s: float | None = None) -> str:
    """`[YYYY-mm-dd HH:MM:SS TP0] ` for scheduler lines, `[YYYY-mm-dd HH:MM:SS] ` for the main process."""
    t = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() if now_s is None else now_s))
    return f"[{t}{' ' + prefix if prefix else ''}] "


def gb(mib: float) -> str:
    return f"{mib / 1024:.2f}"


def server_args_line(args: dict[str, Any]) -> str:
    inner = ", ".join(f"{k}={v!r}" for k, v in sorted(args.items()))
    return f"server_args=ServerArgs({inner})"


def backends_line(launch: Launch) -> str:
    word = "DSA" if at_least(launch.version, "0.5.13") else "NSA"
    return (
        f"Set {word} backends for {launch.kv_cache_dtype} KV Cache: "
        f"prefill={launch.prefill_backend}, decode={launch.decode_backend}."
    )


def load_begin(avail_mib: float) -> str:
    return f"Load weight begin. avail mem={gb(avail_mib)} GB"


def load_end(elapsed_s: float, architecture: str, dtype: str, avail_mib: float, usage_mib: float) -> str:
    return (
        f"Load weight end. elapsed={elapsed_s:.2f} s, type={architecture}, dtype={dtype}, "
        f"avail mem={gb(avail_mib)} GB, mem usage={gb(usage_mib)} GB."
    )


def kv_allocated(launch: Launch, tokens: int, kv_mib: float, torch_dtype: str) -> str:
    dtype = f"dtype: {torch_dtype}, " if at_least(launch.version, "0.5.13") else ""
    return f"KV Cache is allocated. {dtype}#tokens: {tokens}, KV size: {gb(kv_mib)} GB"


def pool_end(avail_mib: float) -> str:
    return f"Memory pool end. avail mem={gb(avail_mib)} GB"


def prefill_capture(launch: Launch, avail_mib: float) -> tuple[str, ...]:
    """0.5.17 (an H200) captures breakable prefill graphs before the decode ones (its default); the
    simulator holds no memory for them, so they take none here."""
    config = launch.args.get("cuda_graph_config")
    prefill = config.get("prefill") if isinstance(config, dict) else None
    if not at_least(launch.version, "0.5.17") or not isinstance(prefill, dict):
        return ()
    if prefill.get("backend") != "breakable":
        return ()
    top = int(prefill.get("max_bs") or 0)
    sizes = [n for n in (4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192) if n < top] + [top]
    return (
        f"Capture target prefill CUDA graph begin. backend=breakable, num_tokens={sizes}, "
        f"avail mem={gb(avail_mib)} GB",
        "Capture target prefill CUDA graph end. elapsed=0.00 s, mem usage=0.00 GB, "
        f"avail mem={gb(avail_mib)} GB.",
    )


def capture_begin(launch: Launch, avail_mib: float) -> str:
    bs = list(launch.captured_bs)
    if at_least(launch.version, "0.5.22"):
        return (
            "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
            f"avail mem={gb(avail_mib)} GB"
        )
    if at_least(launch.version, "0.5.17"):  # as 0.5.17 prints it on an H200
        return (
            f"Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs={bs}, "
            f"avail mem={gb(avail_mib)} GB"
        )
    if at_least(launch.version, "0.5.14"):
        key = "num_tokens_per_req" if at_least(launch.version, "0.5.16") else "num_tokens_per_bs"
        return (
            f"Capture target decode CUDA graph begin. backend=full, bs={bs}, {key}=1, "
            f"avail mem={gb(avail_mib)} GB"
        )
    return f"Capture cuda graph begin. This can take up to several minutes. avail mem={gb(avail_mib)} GB"


def capture_end(launch: Launch, elapsed_s: float, usage_mib: float, avail_mib: float) -> str:
    if at_least(launch.version, "0.5.22"):
        return (
            f"Capture target decode CUDA graph end. bs={list(launch.captured_bs)}, "
            f"elapsed={elapsed_s:.2f} s, "
            f"mem usage={gb(usage_mib)} GB, avail mem={gb(avail_mib)} GB."
        )
    if at_least(launch.version, "0.5.14"):
        return (
            f"Capture target decode CUDA graph end. elapsed={elapsed_s:.2f} s, "
            f"mem usage={gb(usage_mib)} GB, avail mem={gb(avail_mib)} GB."
        )
    return (
        f"Capture cuda graph end. Time elapsed: {elapsed_s:.2f} s. mem usage={gb(usage_mib)} GB. "
        f"avail mem={gb(avail_mib)} GB."
    )


def kv_summary(launch: Launch, tokens: int, max_running: int, context_len: int, avail_mib: float) -> str:
    chunk = launch.chunked_prefill_size
    max_prefill = 16384 if chunk < 0 else max(chunk, 16384)
    return (
        f"max_total_num_tokens={tokens}, chunked_prefill_size={chunk}, max_prefill_tokens={max_prefill}, "
        f"max_running_requests={max_running}, context_len={context_len}, available_gpu_mem={gb(avail_mib)} GB"
    )


def uvicorn_running(host: str, port: int) -> str:
    return f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)"


READY = "The server is fired up and ready to roll!"


def decode_batch(
    running: int, used_tokens: int, usage: float, graph: bool, gen_tok_s: float, queued: int
) -> str:
    return (
        f"Decode batch, #running-req: {running}, #token: {used_tokens}, token usage: {usage:.2f}, "
        f"cuda graph: {graph}, gen throughput (token/s): {gen_tok_s:.2f}, #queue-req: {queued}"
    )


def prefill_batch(
    version: str, new_seq: int, new_tokens: int, usage: float, running: int, queued: int, in_tok_s: float
) -> str:
    head = (
        f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_tokens}, #cached-token: 0, "
        f"token usage: {usage:.2f}, "
    )
    if at_least(version, "0.5.20"):
        return (
            head + f"#running-req: {running}, #queue-req: {queued}, #pending-token: 0, cuda graph: False, "
            f"input throughput (token/s): {in_tok_s:.2f}"
        )
    return (
        head + f"#running-req: {running}, #queue-req: {queued}, "
        f"input throughput (token/s): {in_tok_s:.2f}, cuda graph: False"
    )


NAN = "Detected errors during sampling! NaN in the logits."


def retract(n_reqs: int, tokens_gained: int) -> str:
    return (
        f"KV cache pool is full. Retract requests. #retracted_reqs: {n_reqs}, "
        f"#new_tokens_gained: {tokens_gained}"
    )


DECODE_OOM = "Decode out of memory. Try to lower your batch size."
SIGQUIT_LAUNCH = "Received sigquit from a child process. It usually means the child failed."


def sigquit_running() -> str:
    return "SIGQUIT received. signum=3, frame=None. It usually means one child failed."


def sigterm_received() -> str:
    return "SIGTERM received. signum=15 frame=None. Draining requests and shutting down..."


def gracefully_exiting(remaining: int) -> str:
    return f"Gracefully exiting... Remaining number of requests {remaining}. Waiting for them to finish."


def sigint_shutdown(pid: int, child_pid: int) -> tuple[str, ...]:
    """What SGLang 0.5.17 prints when SIGINT stops a healthy server (real H200 logs): the children's
    KeyboardInterrupt, uvicorn's shutdown, then a child reported "crashed" by the tree kill. Noise:
    nothing in it is a failure of the configuration."""
    return (
        "Traceback (most recent call last):",
        '  File "zmq/backend/cython/_zmq.py", line 179, in zmq.backend.cython._zmq._check_rc',
        "    PyErr_CheckSignals()",
        "KeyboardInterrupt",
        "INFO:     Shutting down",
        "INFO:     Waiting for application shutdown.",
        "INFO:     Application shutdown complete.",
        f"INFO:     Finished server process [{pid}]",
        f"kill_process_tree called: parent_pid={pid}, include_parent=False, pid={pid}",
        subprocess_crashed("detokenizer", child_pid + 1, -9),
    )


def subprocess_crashed(name: str, pid: int, code: int) -> str:
    return f"Subprocess {name} (pid={pid}) crashed with exit code {code}. Triggering SIGQUIT for cleanup..."


def rank_dead(version: str, code: int) -> str:
    if at_least(version, "0.5.20"):
        return (
            f"Rank 0 scheduler died during initialization (exit code: {code}). If exit code is -9 (SIGKILL), "
            "a common cause is the OS OOM killer. Check `dmesg` for details."
        )
    return f"Rank 0 scheduler is dead. Please check if there are relevant logs.\nExit code: {code}"


def not_enough_memory(version: str, fraction: float) -> str:
    """The pool-size guard's error, in each release's words (mined: tuner/sglang/failure_sites.json)."""
    head = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    if version == "0.5.2":
        return head
    what = "mem_fraction_static" if at_least(version, "0.5.10") else "self.server_args.mem_fraction_static"
    return f"{head} Current value: {what}={fraction}"


def no_room_for_kv(version: str, fraction: float, avail_mib: float, pre_load_mib: float) -> str:
    """0.5.14+: the weights left nothing under the static budget (the KV-budget guard's ValueError)."""
    minimum = 1 - avail_mib / pre_load_mib if pre_load_mib > 0 else 1.0
    suggested = math.ceil(minimum * 1000) / 1000
    return (
        "ValueError: Loaded weights leave no GPU memory for the KV cache under "
        f"--mem-fraction-static={fraction}. Raise --mem-fraction-static above {suggested:.3f} "
        f"(minimum viable = 1 - available/pre = {minimum:.4f}). If using speculative decoding, "
        "draft weights are now counted."
    )


def kv_frames(version: str, budget: bool) -> str:
    """Where a release raises its KV sizing errors (the `where` of scheduler_exception)."""
    if budget:
        return "kv_budget" if at_least(version, "0.5.16") else "kv_budget_mixin"
    if at_least(version, "0.5.11"):
        return "kv_pool"
    return "kv_mixin" if at_least(version, "0.5.7") else "kv"


def cuda_oom(tried_mib: float, total_mib: float, free_mib: float, platform: str = "cuda") -> str:
    """torch's allocator out of memory, in the words of the platform's allocator.

    c10's caching allocator (CUDA; HIP prints its device as HIP), torch_npu's (its own layout:
    totals in parentheses) and the XPU/MUSA ones, which copy c10's.
    """
    tried, total, free = tried_mib / 1024, total_mib / 1024, max(free_mib, 0)
    if platform == "ascend":
        used = max(total - free / 1024 - tried, 0)
        return (
            f"torch.OutOfMemoryError: NPU out of memory. Tried to allocate {tried:.2f} GiB (NPU 0; "
            f"{total:.2f} GiB total capacity; {used:.2f} GiB already allocated; "
            f"{used:.2f} GiB current active; {free:.2f} MiB free; {used:.2f} GiB reserved in total by "
            "PyTorch) If reserved memory is >> "
            "allocated memory try setting max_split_size_mb to avoid fragmentation."
        )
    device = {"rocm": "HIP", "xpu": "XPU", "musa": "MUSA"}.get(platform, "CUDA")
    return (
        f"torch.OutOfMemoryError: {device} out of memory. Tried to allocate {tried:.2f} GiB. "
        f"GPU 0 has a total capacity of {total:.2f} GiB "
        f"of which {free:.2f} MiB is free. "
        "Of the allocated memory all but a little is allocated by PyTorch."
    )


def device_fault(platform: str = "cuda") -> str:
    """An asynchronous device fault as the platform's runtime reports it at the next synchronisation."""
    return {
        "rocm": "torch.AcceleratorError: HIP error: an illegal memory access was encountered\n"
        "HIP kernel errors might be asynchronously reported at some other API call, so the stacktrace "
        "below might be incorrect.\nFor debugging consider passing AMD_SERIALIZE_KERNEL=3",
        "ascend": "RuntimeError: ACL stream synchronize failed, error code:507015",
        "xpu": "RuntimeError: Native API failed. Native API returns: -36 (UR_RESULT_ERROR_DEVICE_LOST)",
        "musa": "RuntimeError: MUSA error: an illegal memory access was encountered",
    }.get(platform, "RuntimeError: CUDA error: an illegal memory access was encountered")


def no_kernel_for_device(platform: str = "cuda") -> str:
    """A kernel with no code for the device, as the platform's runtime says it."""
    return {
        "rocm": "RuntimeError: HIP error: invalid device function\n"
        "HIP kernel errors might be asynchronously reported at some other API call, so the stacktrace "
        "below might be incorrect.",
        "musa": "RuntimeError: MUSA error: no kernel image is available for execution on the device",
    }.get(platform, "RuntimeError: Unsupported architecture")


def capture_failed(version: str, cause: str) -> str:
    if at_least(version, "0.5.20"):
        max_flag, off = "--cuda-graph-max-bs-decode", "--cuda-graph-backend-decode=disabled"
    else:
        max_flag, off = "--cuda-graph-max-bs", "--disable-cuda-graph"
    return (
        f"Exception: Capture cuda graph failed: {cause}\n"
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
        f"2. set {max_flag} to a smaller value (e.g., 16)\n"
        "3. disable torch compile by not using --enable-torch-compile\n"
        f"4. disable CUDA graph by {off}. (Not recommended. Huge performance loss)\n"
        "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose "
    )


_FRAMES = {
    "load": [("model_executor/model_runner.py", 312, "load_model")],
    "kv": [("model_executor/model_runner.py", 455, "init_memory_pool")],
    "kv_mixin": [
        ("model_executor/model_runner.py", 455, "init_memory_pool"),
        ("model_executor/model_runner_kv_cache_mixin.py", 310, "init_memory_pool"),
    ],
    "kv_pool": [
        ("model_executor/model_runner_kv_cache_mixin.py", 214, "init_memory_pool"),
        ("model_executor/pool_configurator.py", 95, "__post_init__"),
    ],
    "kv_budget_mixin": [
        ("model_executor/model_runner_kv_cache_mixin.py", 160, "profile_max_num_token"),
        ("model_executor/model_runner_kv_cache_mixin.py", 131, "_profile_available_bytes"),
    ],
    "kv_budget": [
        ("mem_cache/kv_cache_configurator.py", 2090, "profile_max_num_token"),
        ("mem_cache/kv_cache_configurator.py", 2191, "_profile_available_bytes"),
    ],
    "capture": [
        ("model_executor/model_runner.py", 521, "init_device_graphs"),
        ("model_executor/cuda_graph_runner.py", 402, "__init__"),
    ],
    "forward": [
        ("managers/scheduler.py", 1105, "event_loop_overlap"),
        ("managers/tp_worker.py", 288, "forward_batch_generation"),
        ("model_executor/model_runner.py", 1890, "forward"),
    ],
    "device": [("managers/scheduler.py", 301, "__init__")],
}


def warmup_failed(version: str, status: int) -> str:
    """SGLang's warmup request answered by something else (a proxy: no body), as the server logs it."""
    where = "entrypoints/http_server.py" if at_least(version, "0.4.4") else "server.py"
    func = "_execute_server_warmup" if at_least(version, "0.4.4") else "_wait_and_warmup"
    return (
        "Initialization failed. warmup error: Traceback (most recent call last):\n"
        f'  File "/sgl-workspace/sglang/python/sglang/srt/{where}", line 1434, in {func}\n'
        '    assert res.status_code == 200, f"{res=}, {res.text=}"\n'
        f"AssertionError: res=<Response [{status}]>, res.text=''"
    )


# SGLang's attention files whose name is not the backend's
_ATTENTION_FILES = {"fa3": "flashattention_backend", "fa4": "flashattention_backend"}


def attention_frames(
    backend: str | None, role: str | None, *, sparse: bool, capture: bool
) -> tuple[tuple[str, int, str], ...]:
    """The innermost frames of a kernel failing inside an attention backend (none when it is SGLang's
    unnamed automatic choice): a sparse model's backends are methods of nsa_backend.py
    (`_forward_<backend>`), a dense model's their own file, entered through the role's forward or,
    while decode graphs are captured, their capture set-up."""
    if backend is None or role is None:
        return ()
    entry = "forward_extend" if role == "prefill" else "forward_decode"
    if capture and role == "decode":
        entry = "init_forward_metadata_capture_cuda_graph"
    if sparse:
        return (
            ("layers/attention/nsa_backend.py", 1120, entry),
            ("layers/attention/nsa_backend.py", 1388, f"_forward_{backend}"),
        )
    return ((f"layers/attention/{_ATTENTION_FILES.get(backend, backend + '_backend')}.py", 640, entry),)


def scheduler_exception(where: str, error: str, inner: tuple[tuple[str, int, str], ...] = ()) -> str:
    """`Scheduler hit an exception: Traceback ...` ending in `error` (may span lines); `inner`: the
    frames below the stage's own (path under sglang/srt, line, function)."""
    lines = ["Scheduler hit an exception: Traceback (most recent call last):"]
    lines.append(
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2870, '
        "in run_scheduler_process"
    )
    for path, line, func in (*_FRAMES.get(where, _FRAMES["forward"]), *inner):
        lines.append(f'  File "/sgl-workspace/sglang/python/sglang/srt/{path}", line {line}, in {func}')
    lines.append(error)
    return "\n".join(lines)
