"""Plausible landscapes nobody wrote by hand: a scenario and its search space drawn from a seed.

    python -m tuner.sim generate --seed N [--out DIR]     writes DIR/scenario.yaml and DIR/space.yaml

A seed's family (tuner.sim.generate_families: mixed, kv-bound, decode-bound, slo-bound) shapes the
draw: the workload, how memory-tight the GPU is, how many backends and pairs, which knobs, how much
graphs matter, whether SLOs bind. Then a draw picks a GPU (memory, compute capability, count = TP),
a sparse-attention model (weights, KV bytes per token, context), the memory and step-time models,
per-backend prefill and decode speed factors (decode factors depend on the batch), and what fails:

* backends not built for the GPU's architecture, sometimes in one role only (prefill or decode),
  and backends built for it whose kernels for one role, or on a later revision of the chip
  (sm_103 beside sm_100), are missing ("no kernel image");
* NaN/garbage that needs a second knob: backend x captured graph size, backend x running batch
  (small or large), backend x KV dtype, or a graph size or batch with one KV dtype; some tied to one
  role of the backend, so they show in the mixed pairs where it has that role;
* memory: graphs and activations grow with the model's share of each GPU, and the runtime outside
  the static pool needs more than the reserve inside it, so a fraction near 1 never fits. A tight
  draw (most draws; the family says how often) puts the top of the fraction range just past where
  a drawn share of the space's memory groups (graph setting x prefill chunk x running cap) run out
  (`memory_boundaries`: capture OOM growing with the graph sizes, OOM under load growing with the
  prefill chunk or the eager batch above the largest graph), so each group has its own boundary
  inside the range; a loose draw starts the range about where the KV pool gets too small.

The space always searches the memory fraction, CUDA graphs and backend pairs, and sometimes
chunked-prefill size, max running requests and KV dtype (a space over MAX_POINTS first coarsens
the fraction grid, then drops the knobs its family needs least); the benchmark sends one to three
prompts per client. The slo-bound family's TPOT limit and free-VRAM floor, and an infeasible
baseline where one is drawn, are placed by the check from the oracle's view of the space. A draw is
kept only when the scenario passes validation and the oracle finds a feasible best, with failures
and a best that is not everywhere (tuner.sim.generation_check); otherwise the next sub-seed is
drawn, so a seed always gives the same landscape. Failure causes (the rules a search must learn,
benchmarks/failure_causes.py) range from a few to about 30 per landscape, decode-bound the most.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tuner.errors import TunerError
from tuner.sim.generate_families import Shape, family_of, shape
from tuner.sim.memory import default_capture_bs, default_chunk_and_max_bs
from tuner.sim.resolve import within_request_pool

# (name, compute capability, nvidia-smi total MiB) of GPUs a deployment may run on
GPUS = (
    ("NVIDIA H100 80GB HBM3", "9.0", 81559),
    ("NVIDIA H200", "9.0", 143771),
    ("NVIDIA H20", "9.0", 97871),
    ("NVIDIA B200", "10.0", 183359),
    ("NVIDIA B300", "10.3", 275040),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", 97887),
    ("NVIDIA A100-SXM4-80GB", "8.0", 81920),
)
# sparse-attention backends SGLang accepts for both roles, and the sm majors each is built for
BACKENDS = {
    "flashmla_sparse": (9, 10),
    "flashmla_kv": (9, 10),
    "flashmla_auto": (9, 10),
    "flashinfer_sparse_mla": (9, 10, 12),
    "fa3": (8, 9),
    "tilelang": (8, 9, 10, 12),
    "trtllm": (10,),
    "triton": (8, 9, 10, 12),
}
SIM_VERSION = "0.5.23"
# The split, fixed: strategies are tuned on the training seeds and reported on the test seeds.
TRAIN_SEEDS = tuple(range(0, 50))
TEST_SEEDS = tuple(range(1000, 1030))
MAX_POINTS = 2400  # a larger draw drops an optional knob or coarsens the fraction grid


@dataclass(frozen=True, kw_only=True, slots=True)
class Draw:
    """One drawn landscape: the scenario and the space as YAML mappings, and how they were drawn."""

    seed: int
    attempt: int  # the sub-seed that passed the checks
    scenario: dict[str, Any]
    space: dict[str, Any]
    summary: str  # one line: GPU, model size, knobs, mechanisms
    family: str = "mixed"
    slo: bool = False  # the check places a TPOT limit and a free-VRAM floor that bind the best
    infeasible_baseline: bool = False  # the check makes the baseline a failing point


def draw(seed: int, attempt: int = 0) -> Draw:
    """The landscape of (seed, attempt), unchecked (tuner.sim.generation_check.generate checks it)."""
    rng = random.Random(f"tuner-landscape|{seed}|{attempt}")
    look = shape(family_of(seed), rng)
    gpu_name, cc, total = rng.choice(GPUS)
    sm = int(cc.split(".")[0])
    tp = rng.choice((1, 2, 4, 8) if total < 150_000 else (1, 2, 4, 8, 8))
    weights = total * rng.uniform(*look.weights_share)
    mechanisms: list[str] = []
    knobs: dict[str, list[Any]] = {}
    kv_knob = rng.random() < look.p_kv
    if kv_knob:
        knobs["kv-cache-dtype"] = ["fp8_e4m3", "bfloat16"]
    backends, pairs = _backends(rng, cc, kv_knob, mechanisms, look)
    conc, input_len, output_len = look.concurrency, look.input_len, look.output_len
    if rng.random() < look.p_chunk:
        # long prompts: the chunk sizes the prefill's activation peak, the kv-bound family scans more of it
        many = (3, 4) if look.family == "kv-bound" else (2, 3)
        knobs["chunked-prefill-size"] = sorted(rng.sample([2048, 4096, 8192, 16384], rng.choice(many)))
    if rng.random() < look.p_running:
        caps = {max(8, conc // 4), max(8, conc // 2), conc}
        if look.family == "decode-bound":  # the cap that keeps the running batch inside the graphs, or none
            caps = {rng.choice((max(8, conc // 4), max(8, conc // 2))), conc}
        if look.slo:  # the TPOT trade is near the top: half, three quarters, all of the clients
            caps = {max(8, conc // 2), max(8, 3 * conc // 4), conc}
        knobs["max-running-requests"] = sorted(caps)
    kv_bytes = int(rng.uniform(3000, 70000) / tp * 8 / 8) // 64 * 64 + 64
    if look.family == "kv-bound":
        kv_bytes = int(rng.uniform(20000, 90000) / tp) // 64 * 64 + 64
    scenario = {
        "name": f"generated-{seed}",
        "description": f"generated landscape, seed {seed} (attempt {attempt}), {look.family}: {look.kind}",
        "gpus": {"name": gpu_name, "compute_capability": cc, "total_mib": total, "count": tp},
        "model": {
            "name": f"Generated-{seed}",
            "architecture": "DeepseekV32ForCausalLM",
            "weights_mib_per_gpu": round(weights, 1),
            "reference_tp": tp,
            "kv_bytes_per_token": kv_bytes,
            "context_len": rng.choice((32768, 131072, 163840)),
            "load_s": 0.2,
            "sparse_attention": True,
            "default_kv_dtype": "bfloat16",
        },
        "memory": _memory(rng, total, weights),
        "perf": _perf(rng, sm, tp, look),
        "backends": backends,
    }
    space = _space(rng, seed, scenario, pairs, knobs, look)
    extra = ", ".join(f"{k} {len(v)}" for k, v in knobs.items())
    infeasible = rng.random() < look.p_infeasible_baseline
    summary = (
        f"{look.family}: {gpu_name} x{tp}, weights {weights / 1024:.0f} GiB/GPU, "
        f"{look.kind} c{conc} x{look.prompts_per_client} in{input_len} out{output_len}; "
        f"pairs {len(pairs)}{', ' + extra if extra else ''}; {'; '.join(mechanisms) or 'no NaN mechanism'}"
        f"{'; SLO-bound' if look.slo else ''}{'; infeasible baseline' if infeasible else ''}"
    )
    return Draw(
        seed=seed, attempt=attempt, scenario=scenario, space=space, summary=summary, family=look.family,
        slo=look.slo, infeasible_baseline=infeasible,
    )  # fmt: skip


def _memory(rng: random.Random, total: int, weights: float) -> dict[str, float]:
    """The memory model: reserves scale with the GPU, graphs and activations with the model's share of
    each GPU (wider or deeper layers per rank hold more per captured or running request)."""
    scale = total / 100_000
    width = min(3.0, max(0.6, weights / (40 * 1024)))
    reserve = rng.uniform(2000, 9000) * scale
    return {
        "static_reserve_mib": round(reserve),
        # outside the static pool: more than the reserve inside it (context, NCCL, workspaces)
        "runtime_overhead_mib": round(reserve + rng.uniform(1500, 5000) * scale),
        "graph_mib_per_graph": round(rng.uniform(40, 150) * width),
        "graph_mib_per_bs": round(rng.uniform(0.5, 4.0) * width, 2),
        "capture_workspace_mib": round(rng.uniform(500, 3000) * width),
        "capture_workspace_mib_per_bs": round(rng.uniform(4, 40) * width, 1),
        "eager_act_mib_per_req": round(rng.uniform(8, 90) * width, 1),
        "prefill_act_mib_per_token": round(rng.uniform(0.1, 0.8) * width, 3),
        "min_kv_mib": rng.choice((1024, 2048)),
    }


def _perf(rng: random.Random, sm: int, tp: int, look: Shape) -> dict[str, float]:
    pcie = sm == 12 or rng.random() < 0.15
    return {
        "prefill_tok_s": round(rng.uniform(8000, 90000) * (tp / 8) ** 0.5),
        "prefill_chunk_overhead_ms": round(rng.uniform(4, 30), 1),
        "launch_overhead_ms": round(rng.uniform(*look.launch_overhead_ms), 2),
        "base_step_ms": round(rng.uniform(3, 14), 2),
        "per_req_step_ms": round(rng.uniform(0.02, 0.3), 3),
        "graph_per_req_extra_ms": round(rng.uniform(0.01, 0.12), 3) if pcie else 0.0,
        "capture_s_per_graph": 0.005,
        "noise_pct": round(rng.uniform(1.0, 5.0), 1),
    }


def _backends(
    rng: random.Random, cc: str, kv_knob: bool, mechanisms: list[str], look: Shape
) -> tuple[dict[str, Any], list[str]]:
    """Backend rules (speed, support, NaN mechanisms) and the backend pairs the space searches."""
    names = rng.sample(sorted(BACKENDS), rng.choice(look.backends))
    sm, minor = (int(part) for part in cc.split("."))
    spread = 0.35 if look.family == "decode-bound" else 0.0  # the decode backend decides more
    rules: dict[str, Any] = {"default": "ok"}
    for name in names:
        rule: dict[str, Any] = {"behaviour": "ok", "prefill_factor": round(rng.uniform(0.7, 1.4), 2)}
        if rng.random() < 0.5:
            rule["decode_factor"] = round(rng.uniform(0.75 - spread, 1.4 + spread), 2)
        else:
            small, large = (
                rng.uniform(0.75 - spread, 1.35 + spread),
                rng.uniform(0.75 - spread, 1.35 + spread),
            )
            rule["decode_factor"] = {1: round(small, 2), rng.choice((16, 32, 64, 96)): round(large, 2)}
        if sm not in BACKENDS[name] and rng.random() < 0.8:
            role = rng.choice(("prefill", "decode")) if rng.random() < look.p_role else None
            kernels = f"{role} kernels" if role else "kernels"
            rule.update(
                behaviour="unsupported", error=f"RuntimeError: {name} {kernels}: Unsupported architecture"
            )
            if role:
                rule["behaviour_roles"] = [role]  # runs (at its speed) in the other role
            mechanisms.append(f"{name} unsupported{' as ' + role if role else ''}")
        elif rng.random() < look.p_gap * (2 if minor else 1):
            # built for the architecture, but one role's kernels are not; on a chip of a later minor
            # revision (sm_103), kernels built arch-specific for the first (sm_100a) do not load at all
            role = None if minor and rng.random() < 0.3 else rng.choice(("prefill", "decode"))
            kernels, chip = f"{role} kernels" if role else "kernels", f"sm_{cc.replace('.', '')}"
            rule.update(
                behaviour="unsupported",
                error=f"RuntimeError: {name} {kernels}: CUDA error: no kernel image is available for "
                f"execution on the device ({chip})",
            )
            if role:
                rule["behaviour_roles"] = [role]
            mechanisms.append(f"{name} not built for {chip}{' as ' + role if role else ''}")
        rules[name] = rule
    working = [n for n in names if rules[n]["behaviour"] == "ok"]
    if not working:  # at least one backend runs
        rules[names[0]] = {"behaviour": "ok", "prefill_factor": 1.0, "decode_factor": 1.0}
        mechanisms[:] = [m for m in mechanisms if not m.startswith(f"{names[0]} unsupported")]
        working = [names[0]]
    for victim in rng.sample(working, min(len(working), rng.choice(look.victims))):
        _break(rng, rules[victim], victim, kv_knob, mechanisms, look)
    pairs = [f"{p}/{d}" for p in names for d in names]
    same = [f"{n}/{n}" for n in names]
    mixed = [p for p in pairs if p not in same]
    chosen = same + rng.sample(mixed, min(len(mixed), rng.choice(look.mixed_pairs)))
    return rules, sorted(chosen, key=pairs.index)


def _break(
    rng: random.Random, rule: dict[str, Any], victim: str, kv_knob: bool, mechanisms: list[str], look: Shape
) -> None:
    """Give a working backend a NaN or garbage mechanism that needs a second knob: the captured graph
    sizes, the running batch (small or large), the KV dtype, or a graph size or batch with one KV dtype;
    sometimes only in one role."""
    mechanism = rng.choice(
        ("graph_bs", "batched", "large", "kv") if kv_knob else ("graph_bs", "batched", "large")
    )
    if mechanism == "graph_bs":
        rule.update(behaviour="nan", nan_min_batch=rng.choice((32, 48, 64, 96)), nan_graph_only=True)
        mechanisms.append(f"{victim} NaN in graphs of batch >= {rule['nan_min_batch']}")
    elif mechanism in ("batched", "large"):
        rule.update(
            behaviour="nan_batched",
            nan_min_batch=rng.choice((2, 8, 16) if mechanism == "batched" else (32, 64, 128)),
        )
        mechanisms.append(f"{victim} NaN at batch >= {rule['nan_min_batch']}")
    else:
        bad = rng.choice(("fp8_e4m3", "bfloat16"))
        rule.update(behaviour=rng.choice(("nan", "garbage")), behaviour_kv_dtypes=[bad])
        mechanisms.append(f"{victim} {rule['behaviour']} with KV {bad}")
    if kv_knob and mechanism != "kv" and rng.random() < 0.3:  # e.g. a bf16-only kernel path of the graphs
        bad = rng.choice(("fp8_e4m3", "bfloat16"))
        rule["behaviour_kv_dtypes"] = [bad]
        mechanisms[-1] += f" with KV {bad}"
    if rng.random() < look.p_role:  # only where it decodes (or prefills): shows in mixed pairs
        role = rng.choice(("decode", "decode", "prefill"))
        rule["behaviour_roles"] = [role]
        mechanisms[-1] += f" (as {role} only)"


def _space(
    rng: random.Random,
    seed: int,
    scenario: dict[str, Any],
    pairs: list[str],
    knobs: dict[str, list[Any]],
    look: Shape,
) -> dict[str, Any]:
    sizes = [16, 32, 64, 128, 256] if look.family != "decode-bound" else [8, 16, 32, 64, 128, 256, 384]
    graphs: list[Any] = [
        "off",
        *sorted(rng.sample(sizes, rng.choice((2, 3) if look.family != "decode-bound" else (3, 4)))),
    ]
    if rng.random() < 0.4:  # SGLang's own list, as the release picks it for this GPU
        graphs.append("on")
    span = rng.uniform(0.12, 0.24) if look.family != "decode-bound" else rng.uniform(0.1, 0.18)
    step = 0.02 if span < 0.18 else 0.03

    def size() -> int:
        return (
            (math.ceil(span / step - 1e-9) + 1)
            * len(graphs)
            * len(pairs)
            * math.prod(len(v) for v in knobs.values())
        )

    if size() > MAX_POINTS:  # a coarser fraction grid before a knob goes
        step = 0.03
    keep = ("max-running-requests", "chunked-prefill-size") if look.slo else ()
    order = ("max-running-requests", "chunked-prefill-size", "kv-cache-dtype")
    if look.family == "decode-bound":  # the running cap against the graph sizes is what it is about
        order = ("chunked-prefill-size", "max-running-requests", "kv-cache-dtype")
    for name in order:
        if name not in keep and name in knobs and size() > MAX_POINTS:
            knobs.pop(name)
    while size() > MAX_POINTS:  # what is kept by the family: a coarser grid
        step += 0.01
    low, high = _fraction_range(rng, scenario, graphs, knobs, look, span)
    steps = math.ceil((high - low) / step - 1e-9)  # the step divides the range; the top reaches as drawn
    high = round(low + step * (steps if low + step * steps <= 0.975 else steps - 1), 2)
    params: list[dict[str, Any]] = [
        {"name": "mem-fraction-static", "kind": "float", "low": low, "high": high, "step": step},
        {"name": "cuda_graph", "kind": "cuda_graph", "choices": graphs},
        {"name": "sparse_backends", "kind": "backend_pair", "choices": pairs},
    ]
    params += [{"name": name, "kind": "categorical", "choices": values} for name, values in knobs.items()]
    baseline: dict[str, Any] = {
        "mem-fraction-static": round(low + step * (round((high - low) / step) // 2), 2),
        "cuda_graph": "off",
        "sparse_backends": pairs[0],
    }
    baseline.update({name: values[0] for name, values in knobs.items()})
    return _space_document(rng, seed, scenario, params, baseline, knobs, look)


def _fraction_range(
    rng: random.Random, scenario: dict[str, Any], graphs: list[Any], knobs: dict[str, list[Any]], look: Shape,
    span: float,
) -> tuple[float, float]:  # fmt: skip
    """The searched memory fractions: from about where the KV pool gets too small, or (a tight draw) up to
    just past where the graphs and activations of a drawn share of the memory groups stop fitting."""
    total = scenario["gpus"]["total_mib"]
    mem = scenario["memory"]
    floor = (scenario["model"]["weights_mib_per_gpu"] + mem["static_reserve_mib"] + mem["min_kv_mib"]) / total
    edges = sorted(memory_boundaries(scenario, graphs, knobs, look))
    if edges and rng.random() < look.p_tight:
        reach = edges[min(len(edges) - 1, int(rng.uniform(*look.tight_reach) * len(edges)))]
        high = min(0.97, reach + rng.uniform(0.005, 0.03))
        low = max(high - span, floor + rng.uniform(-0.04, 0.02))
        low = min(low, high - 0.08)
    else:
        low = floor + rng.uniform(-0.04, 0.06)
        high = low + span
    low = round(min(0.9, max(0.4, low)), 2)
    return low, round(min(0.97 if edges else 0.96, max(low + 0.06, high)), 2)


def memory_boundaries(
    scenario: dict[str, Any], graphs: list[Any], knobs: dict[str, list[Any]], look: Shape
) -> list[float]:
    """Per memory group of the space (graph setting x prefill chunk x running cap), the fraction from
    which it runs out of memory: at capture (graphs and their workspace) or under load (the largest
    prefill chunk's or eager decode batch's activations), by the scenario's memory model."""
    total, tp = scenario["gpus"]["total_mib"], scenario["gpus"]["count"]
    mem = scenario["memory"]
    default_chunk, default_max_bs = default_chunk_and_max_bs(total, tp, version_new=True)
    out = []
    for graph in graphs:
        for chunk in knobs.get("chunked-prefill-size", [default_chunk]):
            for cap in knobs.get("max-running-requests", [None]):
                batch = min(look.concurrency, cap or look.concurrency)
                largest = 0 if graph == "off" else default_max_bs if graph == "on" else int(graph)
                if graph == "on" and cap:
                    largest = min(largest, cap)
                captured = default_capture_bs(largest) if largest else ()
                if largest and largest not in captured:
                    captured = (*captured, largest)
                if cap and captured:  # no graph past the request pool, whatever the list
                    captured = within_request_pool(captured, cap)
                    largest = max(captured)
                held = len(captured) * mem["graph_mib_per_graph"] + sum(captured) * mem["graph_mib_per_bs"]
                act = max(
                    batch * mem["eager_act_mib_per_req"] if batch > largest else 0.0,
                    min(chunk, batch * look.input_len) * mem["prefill_act_mib_per_token"],
                )
                if largest:
                    act = max(
                        act, mem["capture_workspace_mib"] + mem["capture_workspace_mib_per_bs"] * largest
                    )
                left = total + mem["static_reserve_mib"] - mem["runtime_overhead_mib"] - held - act
                out.append(left / total)
    return out


def _space_document(
    rng: random.Random, seed: int, scenario: dict[str, Any], params: list[dict[str, Any]],
    baseline: dict[str, Any], knobs: dict[str, list[Any]], look: Shape,
) -> dict[str, Any]:  # fmt: skip
    """The space file around its params: fixed flags, gate, benchmark, objectives, budget, constraints."""
    conc, input_len, output_len = look.concurrency, look.input_len, look.output_len
    fixed: dict[str, Any] = {
        "model-path": f"/models/generated-{seed}",
        "tp-size": scenario["gpus"]["count"],
        "trust-remote-code": True,
    }
    if "kv-cache-dtype" not in knobs:
        fixed["kv-cache-dtype"] = "fp8_e4m3"
    space: dict[str, Any] = {
        "name": f"generated-{seed}-sim",
        "version": 1,
        "description": scenario["description"],
        "engine": {"kind": "sim", "scenario": "scenario.yaml", "sim_sglang_version": SIM_VERSION},
        "fixed_flags": fixed,
        "gpu_busy_policy": "ignore",
        "params": params,
        "baselines": [baseline],
        "gate": {"prompts": [{"name": "capital", "max_tokens": 16}, {"name": "list", "max_tokens": 24}],
                 "timeout": "30s"},
        "bench": {
            "workload": {"kind": "random", "input_len": input_len, "output_len": output_len},
            "load_points": [{"concurrency": conc, "num_prompts": conc * look.prompts_per_client}],
            "warmup_requests": 4,
            "timeouts": {"connect": "5s", "first_byte": "60s", "idle_read": "30s", "stage_deadline": "120s"},
        },
        "objectives": ["output_throughput", "kv_tokens"],
        "budget": {"n_trials": 16, "timeout": "20m"},
        "timeouts": {"startup": "60s", "idle_log": "30s", "ready_poll": "0.1s", "sigint_grace": "5s",
                     "sigterm_grace": "5s", "release": "20s"},
    }  # fmt: skip
    if look.slo:
        space["constraints"] = []  # placed by the check where they bind (generation_check.place_slos)
    elif rng.random() < 0.7:
        space["constraints"] = [f"min_free_vram_mib >= {rng.choice((1024, 2048))}"]
    return space


def write(found: Draw, out: Path) -> tuple[Path, Path]:
    """Write scenario.yaml and space.yaml (the space names the scenario beside it) into `out`."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        scenario, space = out / "scenario.yaml", out / "space.yaml"
        head = f"# {found.summary}\n# python -m tuner.sim generate --seed {found.seed}\n"
        scenario.write_text(head + yaml.safe_dump(found.scenario, sort_keys=False))
        space.write_text(head + yaml.safe_dump(found.space, sort_keys=False))
    except OSError as exc:
        raise TunerError(f"generate: cannot write into {out}: {exc.strerror or exc}") from exc
    return scenario, space
