"""Mine the device runtimes' own error strings, as mine_failure_sites.py mines SGLang's messages.

Writes tuner/sglang/device_errors.json: each error the HIP runtime (ROCm/clr,
`hipamd/src/hip_error.cpp`: the name and the string `hipGetErrorString` returns, which torch
prints as `HIP error: <string>`; CUDA's runtime returns the same strings for the errors HIP
mirrors) and the HSA runtime (ROCm/ROCR-Runtime, `hsa_status_string` in
`runtime/hsa-runtime/core/runtime/hsa.cpp`: `HSA_STATUS_ERROR_<X>: <description>`, as the queue
abort callback prints it) can report, with the failure class it means for a launch. The class
is this project's judgement, made per error name below; the names and strings are the
runtimes' own (no code is copied, only message literals). The fault reports the runtimes print
before they abort the process (ROCR's `Memory access fault by GPU node-...`, `HW Exception by GPU
node-...`, CLR's queue-abort callback) are kept as templates (`%u`, `%p`, `%s` holes), class `abort`.

    python scripts/mine_device_errors.py --clr /path/to/ROCm/clr --rocr /path/to/ROCm/ROCR-Runtime
    python scripts/mine_device_errors.py --clr GITDIR --rocr GITDIR --rev HEAD   # a bare mirror

A source is a work tree or a git directory (read at --rev with `git show`).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tuner" / "sglang" / "device_errors.json"
FIELDS = ["runtime", "name", "text", "class"]
HIP_FILE = "hipamd/src/hip_error.cpp"
HSA_FILE = "runtime/hsa-runtime/core/runtime/hsa.cpp"
# The runtimes' own fault reports, printed to stderr before they abort the process: (source, path,
# the start of the message literal, class). `abort` is a fault after which the runtime aborts.
TEMPLATES = (
    ("rocr", "runtime/hsa-runtime/core/runtime/runtime.cpp", "Memory access fault by GPU node-", "abort"),
    ("rocr", "runtime/hsa-runtime/core/runtime/runtime.cpp", "HW Exception by GPU node-", "abort"),
    ("clr", "rocclr/device/rocm/rocdevice.cpp", "Callback: Queue %p aborting with error", "abort"),
)

# What each error means for a launch (the rest mean nothing the classifier can act on):
# oom: the device allocator could not get memory; unsupported: no code for this device (a kernel
# built for another architecture); fault: an asynchronous device fault, reported wherever the device
# next synchronised; environment: the machine (no device, a driver too old, a hardware fault).
HIP_CLASSES = {
    "hipErrorOutOfMemory": "oom",
    "hipErrorInvalidDeviceFunction": "unsupported",
    "hipErrorNoBinaryForGpu": "unsupported",
    "hipErrorInvalidKernelFile": "unsupported",
    "hipErrorIllegalAddress": "fault",
    "hipErrorLaunchFailure": "fault",
    "hipErrorPriorLaunchFailure": "fault",
    "hipErrorAssert": "fault",
    "hipErrorLaunchTimeOut": "fault",
    "hipErrorNoDevice": "environment",
    "hipErrorInsufficientDriver": "environment",
    "hipErrorECCNotCorrectable": "environment",
}
HSA_CLASSES = {
    "HSA_STATUS_ERROR_EXCEPTION": "fault",
    "HSA_STATUS_ERROR_MEMORY_FAULT": "fault",
    "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION": "fault",
    "HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION": "fault",
    "HSA_STATUS_ERROR_FATAL": "fault",
    "HSA_STATUS_ERROR_INVALID_ISA": "unsupported",
    "HSA_STATUS_ERROR_INVALID_ISA_NAME": "unsupported",
    "HSA_STATUS_ERROR_INVALID_CODE_OBJECT": "unsupported",
    "HSA_STATUS_ERROR_OUT_OF_REGISTERS": "unsupported",
}

# `case hipErrorX: return "text";` inside ihipGetErrorString (names may share one return).
_HIP_STRINGS = re.compile(r"ihipGetErrorString\s*\([^)]*\)\s*\{(?P<body>.*?)\n\}", re.S)
_HIP_CASE = re.compile(r"((?:\s*case\s+hipError\w+\s*:)+)\s*return\s+\"((?:[^\"\\]|\\.)*)\"\s*;")
# `case HSA_STATUS_ERROR_X: *status_string = "..." "...";` inside hsa_status_string.
_HSA_BODY = re.compile(r"hsa_status_string\s*\((?P<body>.*?)\n\}", re.S)
_HSA_CASE = re.compile(r"case\s+(HSA_\w+)\s*:\s*\*status_string\s*=\s*((?:\s*\"(?:[^\"\\]|\\.)*\")+)\s*;")
_LITERAL = re.compile(r"\"((?:[^\"\\]|\\.)*)\"")


def commit_of(source: Path, rev: str) -> str:
    """The commit a source was read at ("work tree" when it is not a git directory)."""
    out = subprocess.run(["git", f"--git-dir={source}", "rev-parse", rev], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else "work tree"


def read(source: Path, path: str, rev: str) -> str:
    """A file of a work tree, or of a git directory at `rev`."""
    if (source / path).is_file():
        return (source / path).read_text(encoding="utf-8")
    out = subprocess.run(
        ["git", f"--git-dir={source}", "show", f"{rev}:{path}"], capture_output=True, text=True, check=True
    )
    return out.stdout


def hip_errors(text: str) -> list[list[str]]:
    """(runtime, name, string, class) for every classed HIP error of hipGetErrorString."""
    body = _HIP_STRINGS.search(text)
    if body is None:
        raise SystemExit(f"no ihipGetErrorString in {HIP_FILE}")
    rows = []
    for cases, string in _HIP_CASE.findall(body["body"]):
        for name in re.findall(r"hipError\w+", cases):
            if name in HIP_CLASSES:
                rows.append(["hip", name, string, HIP_CLASSES[name]])
    return rows


def hsa_errors(text: str) -> list[list[str]]:
    """(runtime, name, description, class) for every classed status of hsa_status_string."""
    body = _HSA_BODY.search(text)
    if body is None:
        raise SystemExit(f"no hsa_status_string in {HSA_FILE}")
    rows = []
    for name, literals in _HSA_CASE.findall(body["body"]):
        if name in HSA_CLASSES:
            description = "".join(_LITERAL.findall(literals)).split(": ", 1)[-1]
            rows.append(["hsa", name, description, HSA_CLASSES[name]])
    return rows


def templates(sources: dict[str, Path], rev: str) -> list[list[str]]:
    """(runtime, source path, message literal, class) for each fault report of TEMPLATES."""
    rows = []
    for source, path, start, cls in TEMPLATES:
        text = read(sources[source], path, rev)
        literal = next((lit for lit in _LITERAL.findall(text) if lit.startswith(start)), None)
        if literal is None:
            raise SystemExit(f"no message starting {start!r} in {path}")
        rows.append(["hsa" if source == "rocr" else "hip", path, literal.replace("\\n", ""), cls])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--clr", type=Path, required=True, help="ROCm/clr: a work tree or git directory")
    parser.add_argument("--rocr", type=Path, required=True, help="ROCm/ROCR-Runtime: a work tree or git dir")
    parser.add_argument("--rev", default="HEAD", help="the revision of a git directory (default HEAD)")
    args = parser.parse_args()
    rows = hip_errors(read(args.clr, HIP_FILE, args.rev)) + hsa_errors(read(args.rocr, HSA_FILE, args.rev))
    rows += templates({"clr": args.clr, "rocr": args.rocr}, args.rev)
    missing = (set(HIP_CLASSES) | set(HSA_CLASSES)) - {r[1] for r in rows if r[3] != "abort"}
    if missing:
        print(f"not found in the sources: {sorted(missing)}", file=sys.stderr)
    sources = {
        "hip": f"ROCm/clr {HIP_FILE} @ {commit_of(args.clr, args.rev)}",
        "hsa": f"ROCm/ROCR-Runtime {HSA_FILE} @ {commit_of(args.rocr, args.rev)}",
    }
    lines = ",\n".join("  " + json.dumps(row) for row in sorted(rows))
    head = json.dumps({"format": 1, "sources": sources, "fields": FIELDS}, indent=1)[:-2]
    OUT.write_text(f'{head},\n "errors": [\n{lines}\n ]\n}}\n', encoding="utf-8")
    print(f"{len(rows)} errors -> {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
