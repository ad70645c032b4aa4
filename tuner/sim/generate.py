"""Plausible landscapes nobody wrote by hand: a scenario and its search space drawn from a seed.

    python -m tuner.sim generate --seed N [--out DIR]     writes DIR/scenario.yaml and DIR/space.yaml

A seed's family (tuner.sim.generate_families: mixed, kv-bound, decode-bound, slo-bound) shapes the
draw: the workload, how memory-tight the GPU is, how many backends and pairs, which knobs, how much
graphs matter, whether SLOs bind. Then a draw picks a GPU (memory, compute capability, count = TP),
a sparse-attention model (weights, KV bytes per token, context), the memory and step-time models,
per-backend prefill and decode speed factors (decode factors depend on the batch), which backends
are unsupported, and NaN/garbage mechanisms that need two knobs (backend x graph batch size,
backend x KV dtype, backend x batch), some tied to one role of the backend (prefill or decode). The
space always searches the memory fraction, CUDA graphs and backend pairs, and sometimes
chunked-prefill size, max running requests and KV dtype; the benchmark sends one to three prompts
per client. Memory boundaries (not enough memory, capture OOM moving with graph size, OOM under
load moving with chunk size or eager batch) fall where the drawn sizes put them. The slo-bound
family's TPOT limit and free-VRAM floor, and an infeasible baseline where one is drawn, are placed
by the check from the oracle's view of the space. A draw is kept only when the scenario passes
validation and the oracle finds a feasible best, with failures and a best that is not everywhere
(tuner.sim.generation_check); otherwise the
next sub-seed is drawn, so a seed always gives the same landscape.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tuner.errors import TunerError
from tuner.sim.generate_families import Shape, family_of, shape

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
MAX_POINTS = 1200  # a larger draw drops an optional knob or coarsens the fraction grid


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
    backends, pairs = _backends(rng, sm, kv_knob, mechanisms, look)
    conc, input_len, output_len = look.concurrency, look.input_len, look.output_len
    if rng.random() < look.p_chunk:
        knobs["chunked-prefill-size"] = sorted(rng.sample([2048, 4096, 8192, 16384], rng.choice((2, 3))))
    if rng.random() < look.p_running:
        caps = {max(8, conc // 4), max(8, conc // 2), conc}
        if look.slo:
            caps.add(max(8, 3 * conc // 4))
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
        "memory": _memory(rng, total),
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


def _memory(rng: random.Random, total: int) -> dict[str, float]:
    scale = total / 100_000
    return {
        "static_reserve_mib": round(rng.uniform(2000, 9000) * scale),
        "runtime_overhead_mib": round(rng.uniform(2500, 10000) * scale),
        "graph_mib_per_graph": round(rng.uniform(40, 150)),
        "graph_mib_per_bs": round(rng.uniform(0.5, 4.0), 2),
        "capture_workspace_mib": round(rng.uniform(500, 3000)),
        "capture_workspace_mib_per_bs": round(rng.uniform(4, 40), 1),
        "eager_act_mib_per_req": round(rng.uniform(8, 90), 1),
        "prefill_act_mib_per_token": round(rng.uniform(0.05, 0.6), 3),
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
    rng: random.Random, sm: int, kv_knob: bool, mechanisms: list[str], look: Shape
) -> tuple[dict[str, Any], list[str]]:
    """Backend rules (speed, support, NaN mechanisms) and the backend pairs the space searches."""
    names = rng.sample(sorted(BACKENDS), rng.choice(look.backends))
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
        rules[name] = rule
    working = [n for n in names if rules[n]["behaviour"] == "ok"]
    if not working:  # at least one backend runs
        rules[names[0]] = {"behaviour": "ok", "prefill_factor": 1.0, "decode_factor": 1.0}
        mechanisms[:] = [m for m in mechanisms if not m.startswith(f"{names[0]} unsupported")]
        working = [names[0]]
    for victim in rng.sample(working, min(len(working), rng.choice(look.victims))):
        mechanism = rng.choice(("graph_bs", "batched", "kv") if kv_knob else ("graph_bs", "batched"))
        rule = rules[victim]
        tag = ""
        if rng.random() < look.p_role:  # only where it decodes (or prefills): shows in mixed pairs
            role = rng.choice(("decode", "decode", "prefill"))
            rule["behaviour_roles"] = [role]
            tag = f" (as {role} only)"
        if mechanism == "graph_bs":
            rule.update(behaviour="nan", nan_min_batch=rng.choice((32, 48, 64, 96)), nan_graph_only=True)
            mechanisms.append(f"{victim} NaN in graphs of batch >= {rule['nan_min_batch']}")
        elif mechanism == "batched":
            rule.update(behaviour="nan_batched", nan_min_batch=rng.choice((2, 8, 16)))
            mechanisms.append(f"{victim} NaN at batch >= {rule['nan_min_batch']}")
        else:
            bad = rng.choice(("fp8_e4m3", "bfloat16"))
            rule.update(behaviour=rng.choice(("nan", "garbage")), behaviour_kv_dtypes=[bad])
            mechanisms.append(f"{victim} {rule['behaviour']} with KV {bad}")
        mechanisms[-1] += tag
    pairs = [f"{p}/{d}" for p in names for d in names]
    same = [f"{n}/{n}" for n in names]
    mixed = [p for p in pairs if p not in same]
    chosen = same + rng.sample(mixed, min(len(mixed), rng.choice(look.mixed_pairs)))
    return rules, sorted(chosen, key=pairs.index)


def _space(
    rng: random.Random,
    seed: int,
    scenario: dict[str, Any],
    pairs: list[str],
    knobs: dict[str, list[Any]],
    look: Shape,
) -> dict[str, Any]:
    total = scenario["gpus"]["total_mib"]
    mem = scenario["memory"]
    floor = (scenario["model"]["weights_mib_per_gpu"] + mem["static_reserve_mib"] + mem["min_kv_mib"]) / total
    low = round(min(0.9, max(0.4, floor + rng.uniform(-0.04, 0.06))), 2)
    high = round(min(0.96, low + rng.uniform(0.12, 0.24)), 2)
    step = 0.01 if high - low < 0.16 else 0.02
    sizes = [16, 32, 64, 128, 256] if look.family != "decode-bound" else [8, 16, 32, 64, 128, 256, 384]
    graphs: list[Any] = [
        "off",
        *sorted(rng.sample(sizes, rng.choice((2, 3) if look.family != "decode-bound" else (3, 4)))),
    ]
    if rng.random() < 0.3:
        graphs.append("on")
    grid = round((high - low) / step) + 1
    size = grid * len(graphs) * len(pairs)
    for values in knobs.values():
        size *= len(values)
    keep = ("max-running-requests", "chunked-prefill-size") if look.slo else ()
    for name in ("max-running-requests", "chunked-prefill-size", "kv-cache-dtype"):
        if name in keep:
            continue
        if size > MAX_POINTS and name in knobs:
            size //= len(knobs.pop(name))
    if size > MAX_POINTS:
        step = 0.02 if step == 0.01 else 0.03
    high = round(low + step * int((high - low) / step + 1e-9), 2)  # the step divides the range
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
