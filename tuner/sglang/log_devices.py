"""What the device runtimes under SGLang say when they fail, in each one's own words.

SGLang runs on CUDA, ROCm/HIP, Ascend NPU (torch_npu over CANN/ACL), Intel XPU (SYCL, Level
Zero / Unified Runtime) and Moore Threads MUSA. torch reports an allocator failure as
`torch.OutOfMemoryError: <DEVICE> out of memory. Tried to allocate ...` on every one of them
(c10's caching allocators and the out-of-tree ones copy its wording), a runtime error as
`<DEVICE> error: <the runtime's own error string>`; below torch, the HIP runtime names its
errors `hipError...`, the HSA runtime `HSA_STATUS_ERROR_...` and its queue-abort callback
`Memory access fault by GPU node-N ...`, ACL `ACL stream synchronize failed, error code:...`,
Unified Runtime `UR_RESULT_ERROR_...`. The patterns here are built from those vocabularies
never from one log: an allocator out of memory, a kernel not built for this device, an
asynchronous device fault (reported at the next synchronisation, wherever that is), the process
aborting itself, and failures no launch flag can cause (the machine, its network, another process).

The HIP and HSA runtimes' errors are mined from their sources (scripts/mine_device_errors.py ->
device_errors.json: hipGetErrorString's strings, hsa_status_string's descriptions, ROCR's and CLR's
fault reports); CUDA's runtime returns the same strings for the errors HIP mirrors. The rest are
the allocators' messages (c10's, torch_npu's, XPU's and MUSA's copies of c10's), NVIDIA's ptxas and
no-kernel-image, ACL's and Unified Runtime's error names, written here from their sources' wording.
"""

from __future__ import annotations

import json
import re
import signal
from collections import defaultdict
from importlib import resources

# The device names torch and its out-of-tree backends print before "out of memory" / "error:".
_DEVICE = r"(?:CUDA|HIP|NPU|XPU|MUSA|MPS|MLU)"
_HOLES = re.compile(r"%(?:0?\d*[udxsp]|l?[udx])")


def _template(literal: str) -> str:
    """A printf template as a pattern (each hole any short run of text)."""
    return r".{0,120}?".join(re.escape(part) for part in _HOLES.split(literal))


def _mined() -> dict[str, tuple[str, ...]]:
    """class -> pattern alternatives, from the mined HIP/HSA errors (device_errors.json)."""
    text = resources.files("tuner.sglang").joinpath("device_errors.json").read_text(encoding="utf-8")
    out: dict[str, list[str]] = defaultdict(list)
    for runtime, name, message, cls in json.loads(text)["errors"]:
        if cls == "abort":  # a runtime's fault report: a fault, and the process aborts after it
            out["abort"].append(_template(message))
        elif runtime == "hsa":
            out[cls].append(rf"\b{name}\b")
        else:  # torch prints `HIP error: <string>` (CUDA's and MUSA's strings are HIP's)
            out[cls] += [
                rf"\b{name}\b",
                rf"\b(?:cuda|musa){name[3:]}\b",
                rf"\b{_DEVICE} error: {re.escape(message)}",
            ]
    return {cls: tuple(patterns) for cls, patterns in out.items()}


MINED = _mined()


def _any(*patterns: str) -> str:
    return "|".join(p for p in patterns if p)


# A CUDA/HIP kernel's assert() (`...: block: [0,0,0], thread: [4,0,0] Assertion `...` failed.`) and CANN's
# report of a vector / cube core kernel's error: device faults, and error lines of their own
_KERNEL_ASSERT = r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion `"
_AI_CORE_KERNEL = r"AI[CV] Kernel happen error"

# An allocator that could not get device memory: the size of something the configuration chose.
# torch's `<DEVICE> out of memory. Tried to allocate ...` (c10, torch_npu, XPU, MUSA), NVIDIA's and
# Unified Runtime's allocation errors, ACL's; HIP's from the mined table.
OOM = re.compile(
    _any(
        rf"\b{_DEVICE} out of memory|OutOfMemoryError|\b{_DEVICE} error: out of memory",
        r"\b(?:cudaErrorMemoryAllocation|UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY|PI_ERROR_OUT_OF_RESOURCES"
        r"|ACL_ERROR_RT_MEMORY_ALLOCATION)\b",
        *MINED.get("oom", ()),
    ),
    re.I,
)

# A kernel with no code for this device: NVIDIA's no-kernel-image and PTX targets, SYCL's missing
# binary; HIP's missing code object and HSA's invalid ISA from the mined table.
UNSUPPORTED = re.compile(
    _any(
        r"Unsupported architecture|not supported on \.target '?sm_\d+",
        r"ptxas fatal\s*: Value '?sm_\d+\w*'? is not defined",
        r"no kernel image is available for execution|cudaErrorNoKernelImageForDevice",
        r"\b(?:UR_RESULT_ERROR_INVALID_BINARY|PI_ERROR_INVALID_BINARY)\b|No kernel named \S+ was found",
        # a kernel library's own table of the GPUs it builds for (aiter's chip_info: `gfx...`)
        r"Unknown GPU architecture: gfx\w+",
        # a kernel's own check of the compute capability (FA4: `Only SM 10.x and 11.x are supported`)
        r"\bOnly SM ?\d+(?:\.\w+)?(?:(?:,| and| or) (?:SM ?)?\d+(?:\.\w+)?)* (?:is|are) supported",
        # a Triton kernel whose tiles need more shared memory (LDS) than this GPU has
        r"out of resource: shared memory, Required: \d+, Hardware limit: \d+",
        # ... and triton-ascend's (BiSheng): a tile past the NPU core's unified buffer
        r"ub overflow, requires \d+ bits while \d+ bits available",
        *MINED.get("unsupported", ()),
    )
)

# A fault the device reports asynchronously: it surfaces at the next synchronisation point, so the
# frame or allocator it is reported in says nothing of where it happened. NVIDIA's (the strings HIP
# mirrors are mined), ACL's and AscendC's, Unified Runtime's, cuBLAS's; HIP's, HSA's and the ROCm
# runtimes' fault reports from the mined table.
DEVICE_FAULT = re.compile(
    _any(
        r"Device-side assertion [`'\"]|illegal memory access|misaligned address",
        r"an illegal instruction was encountered|\bcudaErrorMisalignedAddress\b|GPU Hang\b",
        r"Memory access fault by GPU node",  # ROCR's report, also when a post elides its fields
        r"ACL stream synchronize failed|AclrtSynchronizeStream",
        r"AICore execution error|aicore (?:exception|error)",
        r"\bUR_RESULT_ERROR_DEVICE_LOST\b|\bPI_ERROR_DEVICE_LOST\b|CUBLAS_STATUS_EXECUTION_FAILED",
        r"^\[ASSERT\] \S+:\d+: Assertion",  # an AscendC kernel's assertion, printed by the device
        _KERNEL_ASSERT,
        # CANN's report of a vector / cube core exception (an address the kernel may not touch, ...)
        r"there is an? (?:exception of )?(?:aivec|aicore|aicpu|aic|aiv)\w* error",
        _AI_CORE_KERNEL,
        *MINED.get("fault", ()),
        *MINED.get("abort", ()),
    ),
    re.I | re.M,
)

# The runtime refusing an operation because a CUDA/HIP graph capture is under way (cudaErrorStreamCapture*,
# cudaErrorCapturedEvent and HIP's twins, by their strings or names): proof of the capture stage.
CAPTURE_PROTOCOL = re.compile(
    r"operation not permitted when stream is capturing"
    r"|operation failed due to a previous error during capture"
    r"|operation not permitted on an event last recorded in a capturing stream"
    r"|operation would make the legacy stream depend on a capturing blocking stream"
    r"|during CUDA graph capture\. If you need this call to be captured|cudaStreamCaptureStatusActive"
    r"|\b(?:cuda|hip)Error(?:StreamCapture\w+|CapturedEvent)\b"
)

# A line that is a device runtime's error (no class of its own unless one of the above says more).
DEVICE_ERROR_LINE = (
    rf"(?:[\w.]+(?:Error|Exception): )?{_DEVICE} error: .*",
    r"^CUDA Error: .*",  # FlashInfer's FLASHINFER_CUDA_CALL: `CUDA Error: <string> (<code>) <file>: line N`
    r".*device-side assert triggered.*",
    r".*\bNPU function error: .*",
    r".*ACL stream synchronize failed.*",
    r".*\bHSA_STATUS_ERROR_\w+.*",
    *(f".*(?:{p}).*" for p in MINED.get("abort", ())),
    r".*\bhipError(?!Success)\w+.*",
    r".*---> \[HIP error\]\(.*",  # aiter's HIP_CALL: `fail to call hipX(...) ---> [HIP error](...)`
    rf".*\b{_AI_CORE_KERNEL}.*",
    r".*\bUR_RESULT_ERROR_\w+.*",
    r"^\[ASSERT\] \S+:\d+: Assertion .*",
    rf".*{_KERNEL_ASSERT}.*",
)

# The server crashing itself: Python's fault handler, the C runtime's abort, the HSA queue callback.
SELF_ABORT = re.compile(
    r"Fatal Python error: (?:Aborted|Segmentation fault|Bus error|Floating point exception"
    r"|Illegal instruction)|(?:Aborted|Segmentation fault|Bus error|Illegal instruction) \(core dumped\)"
    r"|^(?:Aborted|Segmentation fault)\s*$"
    r"|terminate called after throwing an instance of|\*\*\* (?:SIGSEGV|SIGABRT|SIGBUS|SIGFPE|SIGILL)\b"
    r"|Signal: (?:Segmentation fault|Aborted)"
    r"|crashed with exit code -(?:4|6|7|8|11)\b|exit code: -(?:4|6|7|8|11)\b|"
    + _any(*MINED.get("abort", ())),  # the ROCm runtimes abort the process after their fault reports
    re.M,
)
# Signals a process sends itself when it crashes (abort, faults); the others come from outside.
SELF_SIGNALS = frozenset({signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE})

# Failures no launch flag can cause: (pattern, what it is). Localhost never counts as the network.
_ENVIRONMENT = (
    (r"[Aa]ddress already in use|\[Errno 98\]", "a port is held by another process"),
    (r"res=<Response \[(?:502|503|504|407)\]>|\bProxyError\b|Cannot connect to proxy"
     r"|Tunnel connection failed", "a proxy answered instead of the server (set no_proxy for 127.0.0.1)"),
    (r"Temporary failure in name resolution|Name or service not known|Network is unreachable|\[Errno 101\]"
     r"|Failed to resolve '|We couldn't connect to 'https?://|LocalEntryNotFoundError|OfflineModeIsEnabled"
     r"|HTTPSConnectionPool\(host='(?!localhost|127\.|0\.0\.0\.0)",
     "a download failed (the host is offline or the network is down)"),
    (r"\[Errno 12\] Cannot allocate memory", "the host is out of memory"),
    (r"\[Errno 28\] No space left on device|No space left on device", "a disk or /dev/shm is full"),
    (r"\[Errno 24\] Too many open files", "the open-file limit is too low"),
    (r"Extension for PyTorch\* needs to work with PyTorch \S+, but PyTorch \S+ is found",
     "the installed packages do not match (a library built for another torch)"),
    (r"but Transformers does not recognize this architecture",
     "the installed transformers does not know this model (out of date, or the checkpoint is wrong)"),
    (r"uncorrectable ECC error|cudaErrorECCUncorrectable|\bXid \d+\b", "the GPU reported a hardware fault"),
    (r"no CUDA-capable device is detected|No CUDA GPUs are available"
     r"|CUDA-capable device\(s\) (?:is|are) busy or unavailable|cudaErrorDevicesUnavailable",
     "no usable device (held, hidden or absent)"),
    (_any(*MINED.get("environment", ())), "the device or its driver (absent, too old, or a hardware fault)"),
)  # fmt: skip
_ENVIRONMENT_RE = tuple((re.compile(p, re.I), what) for p, what in _ENVIRONMENT)
ENVIRONMENT_LINE = tuple(p for p, _ in _ENVIRONMENT)
HOST_RAM = "the host is out of memory"


def environment_cause(text: str) -> str | None:
    """What of the machine a failure's text blames (None: nothing a launch flag cannot cause)."""
    return next((what for pattern, what in _ENVIRONMENT_RE if pattern.search(text)), None)


def device_name(text: str) -> str:
    """The device a failure's text names (CUDA unless another runtime's words say otherwise)."""
    m = re.search(rf"\b({_DEVICE})\b(?= out of memory| error)|\b(hip|HSA_|musa|torch_npu|ACL|UR_)", text)
    if m is None:
        return "CUDA"
    word = m.group(1) or m.group(2)
    names = {"hip": "HIP", "HSA_": "HIP", "musa": "MUSA", "torch_npu": "NPU", "ACL": "NPU", "UR_": "XPU"}
    return names.get(word, word.upper())
