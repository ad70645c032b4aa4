"""What a running server says of itself on /server_info (or /get_server_info): KV tokens, CUDA-graph
batch sizes, its running-request cap, its version; read defensively, since the payload's shape moves
between SGLang releases (one reader of the first path that answers, shared by the launch and the probes).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import httpx

from tuner.sglang import logs
from tuner.sglang.auth import ServerAuth, httpx_auth
from tuner.sglang.http import SyncClient, json_object

log = logging.getLogger("tuner.sglang.server")


def _graphs(info: dict[str, Any] | None, state: logs.LogState) -> tuple[bool | None, tuple[int, ...] | None]:
    """Decode graphs as the server resolved them: /server_info first, the log where it says more."""
    graphs, sizes = decode_graphs(info) if info else (None, None)
    if graphs is None:
        return state.cuda_graph, state.captured_bs
    if graphs and state.captured_bs and sizes is not None and len(sizes) == 1 and len(state.captured_bs) > 1:
        return graphs, state.captured_bs  # the payload gave only the largest size; the log the list
    return graphs, sizes


def _kv_tokens(info: dict[str, Any]) -> int | None:
    """max_total_num_tokens from a /server_info payload of any version."""
    for holder in (info, info.get("scheduler_info") or {}):
        value = holder.get("max_total_num_tokens") if isinstance(holder, dict) else None
        if _plausible_count(value):
            return int(value)  # type: ignore[arg-type]
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        mem = states[0].get("memory_usage") or {}
        cap = mem.get("token_capacity") if isinstance(mem, dict) else None
        if _plausible_count(cap):
            return int(cap)  # type: ignore[arg-type]
    return None


MAX_KV_TOKENS = 1 << 40  # a server's KV pool in tokens: ~10^8 on the largest node; beyond is not real


def _version_text(value: object) -> str | None:
    """The server's own version string when it is a short printable one (a server's answer: bounded)."""
    if isinstance(value, str) and 0 < len(value) <= 64 and value.isprintable():
        return value
    return None


def _plausible_count(value: object) -> bool:
    """A token count a server can mean: a finite number 0..MAX_KV_TOKENS (not a bool, inf or NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return 0 <= value <= MAX_KV_TOKENS  # NaN compares false


def server_info(
    base_url: str, *, timeout_s: float = 10.0, auth: ServerAuth | None = None
) -> dict[str, Any] | None:
    """/server_info (or /get_server_info before 0.5.6) of a running server; None if neither answers."""
    client = SyncClient(base_url, timeout_s=timeout_s, auth=httpx_auth(auth))
    return _first_info(client, ("/server_info", "/get_server_info"))


def _first_info(client: SyncClient, paths: Sequence[str]) -> dict[str, Any] | None:
    """The first of `paths` that answers 200 with a JSON object; None if none does."""
    for path in paths:
        try:
            resp = client.get(path)
        except httpx.HTTPError:
            continue
        data = json_object(resp) if resp.status_code == 200 else None
        if data is not None:
            return data
    return None


def captured_sizes(base_url: str, auth: ServerAuth | None = None) -> tuple[int, ...] | None:
    """The decode CUDA-graph batch sizes of a running server (its resolved args); None if unknown."""
    enabled, sizes = decode_graphs(server_info(base_url, auth=auth) or {})
    return sizes if enabled is not False else None


def decode_graphs(info: dict[str, Any]) -> tuple[bool | None, tuple[int, ...] | None]:
    """(decode graphs on?, the resolved decode capture list) from a /server_info payload of any release.

    From 0.5.14 the resolved setting is `cuda_graph_config.decode` (`backend` "disabled" when SGLang
    turned graphs off, e.g. for torch_native attention, and `bs`, the list it captured); the flat
    `cuda_graph_max_bs_decode` is only what was asked. Before, the flat `disable_cuda_graph` and
    `cuda_graph_bs` / `cuda_graph_max_bs` are the resolved args. None where the payload does not say.
    """
    config = info.get("cuda_graph_config")
    decode = config.get("decode") if isinstance(config, dict) else None
    if isinstance(decode, dict):
        if str(decode.get("backend", "")).lower() == "disabled":
            return False, None
        sizes = _int_list(decode.get("bs"))
        if sizes:
            return True, sizes
        top = decode.get("max_bs")
        if _plausible_bs(top):
            assert isinstance(top, int)
            return True, (top,)
    if info.get("disable_cuda_graph") or info.get("disable_decode_cuda_graph"):
        return False, None
    for key in ("cuda_graph_bs_decode", "cuda_graph_bs"):
        sizes = _int_list(info.get(key))
        if sizes:
            return True, sizes
    for key in ("cuda_graph_max_bs_decode", "cuda_graph_max_bs"):
        top = info.get(key)
        if _plausible_bs(top):
            assert isinstance(top, int)
            return True, (top,)
    if any(info.get(k) is not None for k in ("cuda_graph_bs", "cuda_graph_max_bs")):
        log.warning("the server's CUDA-graph batch sizes are not plausible (1..%d); ignored", MAX_GRAPH_BS)
    return None, None


def _int_list(value: object) -> tuple[int, ...] | None:
    """A server's capture list, bounded: None unless every size is plausible (1..MAX_GRAPH_BS)."""
    if isinstance(value, list) and value and all(_plausible_bs(b) for b in value[:MAX_GRAPH_SIZES]):
        return tuple(sorted(set(value[:MAX_GRAPH_SIZES])))
    return None


MAX_GRAPH_BS = 16_384  # SGLang's largest default capture is 1,024 (0.5.23); a batch size beyond is not real
MAX_GRAPH_SIZES = 4_096


def max_running(info: dict[str, Any]) -> int | None:
    """The most requests the server's schedulers run at once, from /server_info: the scheduler's
    `effective_max_running_requests_per_dp` (0.5.x `internal_states`) times the DP size, else the
    `max_running_requests` argument when it was set; None when neither is said (or absurd)."""
    states = info.get("internal_states")
    first = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    per_dp = first.get("effective_max_running_requests_per_dp")
    dp = info.get("dp_size")
    if _plausible_slots(per_dp):
        assert isinstance(per_dp, int)
        return per_dp * (dp if _plausible_slots(dp) and isinstance(dp, int) else 1)
    asked = info.get("max_running_requests")
    return asked if _plausible_slots(asked) and isinstance(asked, int) else None


def _plausible_slots(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 10**7


def _plausible_bs(value: object) -> bool:
    """A batch size a server can have captured: an integer 1..MAX_GRAPH_BS (a server's answer, bounded)."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_GRAPH_BS
