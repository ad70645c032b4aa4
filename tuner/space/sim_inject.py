"""The simulator's `--sim-inject` faults, checked when a space file is read.

A typo would otherwise end the first trial as a "crash" (the simulator refuses its flags). tuner.sim
may not be imported outside itself; tests/unit/test_space_sim_inject.py holds this table equal to
the simulator's own.
"""

from __future__ import annotations

import re

_NUMBER = re.compile(r"^(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")
SIM_INJECT: dict[str, tuple[str, ...] | str] = {
    "crash_after_ready_s": "number",
    "crash_after_requests": "count",
    "hang_at": ("load", "capture"),
    "ignore_sigterm": ("0", "1"),
    "orphan_child": ("0", "1"),
    "startup_delay_s": "number",
    "drift_at": "count",
    "kv_canary_violation": ("0", "1"),
    "http_error_rate": "share",
    "bad_usage": ("negative", "huge", "text"),
    "freeze_at": ("bench",),
    "warmup_status": "count",  # the HTTP status a proxy in front answers the warmup with (e.g. 502)
}
MAX_INJECT_NUMBER = 86_400.0


def sim_inject_problem(item: str) -> str | None:
    """Why `KEY=VALUE` is not a fault the simulator knows, or None."""
    key, _, value = item.partition("=")
    rule = SIM_INJECT.get(key)
    if rule is None:
        return f"unknown sim_inject key {key!r}; expected one of {', '.join(SIM_INJECT)}"
    if isinstance(rule, tuple):
        return None if value in rule else f"sim_inject {key} must be one of {', '.join(rule)} (got {value!r})"
    if rule == "count":
        ok = value.isdigit() and int(value) <= 10**9
        return None if ok else f"sim_inject {key} must be a whole number 0..1000000000 (got {value!r})"
    number = float(value) if _NUMBER.match(value) else None
    high = 1.0 if rule == "share" else MAX_INJECT_NUMBER
    if number is None or not 0.0 <= number <= high:
        return f"sim_inject {key} must be a number 0..{high:g} (got {value!r})"
    return None
