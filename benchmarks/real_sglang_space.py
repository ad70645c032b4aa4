"""The space and the helpers of the real-SGLang GPU checks (tests/gpu/test_real_sglang.py and
benchmarks/gpu_real_sglang.py): an 8B-class Llama with `--load-format dummy` on one GPU.

`write_model` writes the model folder: an 8B-class Llama config (Llama-3-8B's shape, ~15 GiB of
bf16 weights that SGLang initialises itself) beside a tokenizer taken from another folder (any
Llama-style `tokenizer.json`, e.g. the recipe's `make_tiny.py` output); the vocabulary is the
tokenizer's, so every id the model can produce decodes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import yaml

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model")
LLAMA_8B = {  # Llama-3-8B's shape; bf16 weights ~15 GiB with a 32k vocabulary
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
}
GIB = 1 << 30


def write_model(tokenizer_dir: Path, out: Path) -> Path:
    """The 8B-class model folder (config + tokenizer, no weights: launch it with --load-format dummy)."""
    out.mkdir(parents=True, exist_ok=True)
    copied = [f for f in TOKENIZER_FILES if (tokenizer_dir / f).exists()]
    if "tokenizer.json" not in copied and "tokenizer.model" not in copied:
        raise SystemExit(f"{tokenizer_dir}: no tokenizer.json or tokenizer.model to take the tokenizer from")
    for name in copied:
        shutil.copyfile(tokenizer_dir / name, out / name)
    vocab = _vocab(tokenizer_dir)
    special = _special_ids(tokenizer_dir)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **LLAMA_8B,
        "vocab_size": vocab,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        **special,
    }
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    (out / "generation_config.json").write_text(json.dumps({k: v for k, v in special.items()}) + "\n")
    return out


def _vocab(tokenizer_dir: Path) -> int:
    config = tokenizer_dir / "config.json"
    if config.exists():
        value = json.loads(config.read_text()).get("vocab_size")
        if isinstance(value, int):
            return value
    data = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    ids = list(data["model"]["vocab"].values()) + [t["id"] for t in data.get("added_tokens", [])]
    return max(ids) + 1


def _special_ids(tokenizer_dir: Path) -> dict[str, int]:
    config = tokenizer_dir / "config.json"
    if not config.exists():
        return {}
    data = json.loads(config.read_text())
    return {
        k: data[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if isinstance(data.get(k), int)
    }


ATTENTION = "attention_backends"  # the backend knob's param (baselines name it)


def space(model: Path, run_dir: Path, *, name: str, baselines: list[dict[str, Any]], trials: int = 1) -> Path:
    """A space file for the model on GPU 0 (triton/torch_native/fa3, graphs, fraction), under run_dir."""
    doc: dict[str, Any] = {
        "name": name,
        "version": 1,
        "engine": {"kind": "sglang"},
        "sglang_version": sglang_version(),
        "host": "127.0.0.1",
        "fixed_flags": {
            "model-path": str(model),
            "load-format": "dummy",
            "tp-size": 1,
            "dtype": "bfloat16",
            "sampling-backend": "pytorch",
            "grammar-backend": "none",
            "log-level": "info",
        },
        "gpus": [0],
        "gpu_busy_policy": "wait",  # a server just stopped (or an orphan just stopped) may still hold memory
        "params": [
            {"name": "mem-fraction-static", "kind": "float", "low": 0.01, "high": 1.0, "step": 0.005},
            {"name": "cuda_graph", "kind": "cuda_graph", "choices": ["off", 8, 16, 512]},
            {  # one name: that backend for prefill and decode (--attention-backend)
                "name": ATTENTION,
                "kind": "attention_backends",
                "choices": ["triton", "torch_native", "fa3"],
            },
        ],
        "baselines": baselines,
        "gate": {  # random weights: no known answers, so greedy agreement within the study
            "prompts": [],
            "reference": {
                "enabled": True,
                "source": "first",
                "tokens": 16,
                "prompts": ["def fibonacci(n):", "Once upon a time, in a small village by the sea,"],
            },
            "timeout": "120s",
        },
        "bench": {
            "workload": {
                "kind": "random",
                "input_len": 256,
                "output_len": 64,
                "api": "completions",
                "seed": 1,
            },
            "load_points": [{"concurrency": 16, "num_prompts": 96}],
        },
        "objectives": ["output_throughput", "kv_tokens"],
        "constraints": ["min_free_vram_mib >= 1024"],
        "budget": {"n_trials": trials, "timeout": "20m"},
        "search": {"finalists": {"count": 0}},
        "timeouts": {
            "startup": "300s",
            "idle_log": "180s",
            "sigint_grace": "10s",
            "sigterm_grace": "10s",
            "release": "90s",
        },
        "sampler": {"kind": "structured", "seed": 1},
        "log_dir": str(run_dir),
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir.parent / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def sglang_version() -> str:
    from importlib.metadata import version

    return re.sub(r"^(\d+\.\d+\.\d+(?:\.post\d+)?).*$", r"\1", version("sglang"))


def gpu_used_mib(index: int = 0) -> tuple[int, int]:
    """(used, total) MiB of one GPU, read with pynvml (independently of the tuner)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        mem = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index))
        return int(mem.used) >> 20, int(mem.total) >> 20
    finally:
        pynvml.nvmlShutdown()


def sglang_pids() -> list[int]:
    """PIDs whose command line is an SGLang server process (read from /proc; nothing is signalled)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = (
                (Path("/proc") / entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            )
        except OSError:
            continue
        if (
            "sglang.launch_server" in cmd
            or cmd.startswith("sglang::")
            or " serve " in cmd
            and "sglang" in cmd
        ):
            found.append(int(entry))
    return found
