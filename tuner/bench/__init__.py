"""The benchmark stage: `benchmark()` / `run_benchmark()` in runner.py, result types in types.py.

The package imports nothing itself, so the space parser can read `tuner.bench.settings`
without pulling in the HTTP stack.
"""
