"""What real SGLang 0.5.17 reported on an H200, read as the tuner reads it (payloads: tests/fixtures)."""

from __future__ import annotations

import json
from pathlib import Path

from tuner.config import CudaGraph, ServerFacts, TrialConfig
from tuner.session import effective_config, effective_note
from tuner.sglang.server import decode_graphs

INFO = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "real_sglang" / "server_info_0.5.17.json").read_text()
)


def test_the_resolved_decode_capture_list_is_read_not_the_asked_maximum() -> None:
    """0.5.17: `cuda_graph_max_bs_decode` is what was asked; `cuda_graph_config.decode.bs` what ran."""
    assert decode_graphs(INFO["graphs_8"]) == (True, (1, 2, 4, 8))
    assert decode_graphs(INFO["graphs_off"]) == (
        False,
        None,
    )  # the list is there, but the backend is disabled
    assert decode_graphs(INFO["torch_native_8"]) == (False, None)  # SGLang turned them off on its own
    flat = {"disable_cuda_graph": False, "cuda_graph_bs": [16, 1, 8, 2, 4]}  # releases before 0.5.14
    assert decode_graphs(flat) == (True, (1, 2, 4, 8, 16)) and decode_graphs({}) == (None, None)


def facts(graphs: bool | None, sizes: tuple[int, ...] | None) -> ServerFacts:
    return ServerFacts(base_url="http://x", startup_s=1.0, kv_tokens=1, captured_bs=sizes, cuda_graph=graphs)


def test_the_effective_launch_is_what_sglang_ran() -> None:
    asked = TrialConfig(
        mem_fraction_static=0.685,
        cuda_graph=CudaGraph(max_bs=8),
        flags=(("attention-backend", "torch_native"),),
    )
    off = effective_config(asked, facts(*decode_graphs(INFO["torch_native_8"])))
    assert off.cuda_graph == CudaGraph(enabled=False) and off.flags == asked.flags
    note = effective_note(asked, off)
    assert note is not None and "asked max:8, SGLang ran off" in note
    same = effective_config(asked, facts(*decode_graphs(INFO["graphs_8"])))
    assert same == asked and effective_note(asked, same) is None
    capped = effective_config(TrialConfig(cuda_graph=CudaGraph(max_bs=64)), facts(True, (1, 2, 4, 8, 16, 24)))
    assert capped.cuda_graph == CudaGraph(max_bs=24)
    unknown = effective_config(asked, facts(None, None))
    assert unknown == asked  # a server that says nothing is taken at its word


def test_the_simulator_resolves_graphs_as_0_5_17_did() -> None:
    """The simulator's resolved args (its ServerArgs dump and /server_info) have 0.5.17's shape."""
    from tuner.sglang.options import builtin_table
    from tuner.sim import args as simargs
    from tuner.sim.resolve import resolve_launch
    from tuner.sim.scenario import load_scenario

    scenario = load_scenario("tiny-fast")

    def args(*flags: str) -> dict[str, object]:
        given = simargs.parse_sglang_argv(builtin_table("0.5.17"), ["--model-path", "/m", *flags])
        return resolve_launch(scenario, "0.5.17", given, None).args

    real = INFO["graphs_8"]
    on = args("--cuda-graph-max-bs-decode", "8", "--attention-backend", "triton")
    assert set(on["cuda_graph_config"]) == set(real["cuda_graph_config"]) == {"decode", "prefill"}
    assert decode_graphs(on) == decode_graphs(real) == (True, (1, 2, 4, 8))
    native = args("--cuda-graph-max-bs-decode", "8", "--attention-backend", "torch_native")
    assert decode_graphs(native) == decode_graphs(INFO["torch_native_8"]) == (False, None)
    assert native["disable_cuda_graph"] is False and native["cuda_graph_max_bs_decode"] == 8  # as asked


def test_the_simulator_s_capture_lines_read_as_real_0_5_17_s() -> None:
    """Prefill graphs first, then the decode list, in 0.5.17's order; the log state reads both alike."""
    from tuner.sglang.logs import LogState

    real = [
        "[2026-12-01 21:47:43] Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[4, 8, "
        "8192], avail mem=21.59 GB",
        "[2026-12-01 21:47:45] Capture target prefill CUDA graph end. elapsed=2.00 s, mem usage=0.14 GB, "
        "avail mem=21.45 GB.",
        "[2026-12-01 21:47:45] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
        "bs=[1, 2, 4, 8], avail mem=21.45 GB",
        "[2026-12-01 21:47:46] Capture target decode CUDA graph end. elapsed=0.94 s, mem usage=0.03 GB, "
        "avail mem=21.42 GB.",
    ]
    from tuner.sglang.options import builtin_table
    from tuner.sim import args as simargs
    from tuner.sim import logfmt
    from tuner.sim.resolve import resolve_launch
    from tuner.sim.scenario import load_scenario

    given = simargs.parse_sglang_argv(
        builtin_table("0.5.17"), ["--model-path", "/m", "--cuda-graph-max-bs-decode", "8"]
    )
    launch = resolve_launch(load_scenario("tiny-fast"), "0.5.17", given, None)
    sim = [*logfmt.prefill_capture(launch, 21_000.0), logfmt.capture_begin(launch, 21_000.0),
           logfmt.capture_end(launch, 0.9, 30.0, 20_900.0)]  # fmt: skip
    assert [line.split(". ")[0] for line in sim] == [line[22:].split(". ")[0] for line in real]
    assert sim[2].startswith(
        "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs="
    )
    for lines in (real, sim):
        state = LogState.from_lines(lines)
        assert state.cuda_graph is True and state.captured_bs == (1, 2, 4, 8)
