"""The benchmark stage: `benchmark()` / `run_benchmark()` in runner.py, result types in types.py.

Exports resolve lazily so that importing `tuner.bench.settings` (the space
parser does) does not pull in the HTTP stack.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "benchmark": "tuner.bench.runner",
    "run_benchmark": "tuner.bench.runner",
    "BenchResult": "tuner.bench.types",
    "BenchMetrics": "tuner.bench.types",
    "LoadPointResult": "tuner.bench.types",
    "RequestRecord": "tuner.bench.types",
    "ErrorClass": "tuner.bench.types",
    "HttpBackend": "tuner.bench.client",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'tuner.bench' has no attribute {name!r}")
