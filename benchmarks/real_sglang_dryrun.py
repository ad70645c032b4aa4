"""A dry run of benchmarks/gpu_real_sglang.py on a machine without a GPU or SGLang: the same commands,
with the simulator behind a stand-in `sglang` package and a stand-in NVML (real_sglang_standins/pynvml.py).

    python benchmarks/real_sglang_dryrun.py --out DIR [--tests EXPR] [--no-bench]

It checks the plumbing of the real-GPU check (launches through `python -m sglang.launch_server`, the
tuner's trial/run/resume, kill -9, the orphan sweep, the report), not SGLang: the simulator's outcomes
are its scenario's (fa3 runs there), and its `bench_serving` stand-in writes fixed figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAUNCH = """import runpy, sys
sys.argv = ["tuner.sim", "--sim-scenario", "tiny-fast", "--sim-sglang-version", "0.5.17", *sys.argv[1:]]
runpy.run_module("tuner.sim", run_name="__main__")
"""
BENCH_SERVING = """import json, sys
if __name__ == "__main__":
    out = sys.argv[sys.argv.index("--output-file") + 1]
    row = {"output_throughput": 1.0, "median_ttft_ms": 1.0, "median_tpot_ms": 1.0, "duration": 1,
           "completed": 1}
    open(out, "a").write(json.dumps(row) + "\\n")
"""


def fake_site(root: Path) -> Path:
    """A folder to put first on PYTHONPATH: `sglang` 0.5.17 (the simulator) and NVML."""
    pkg = root / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "0.5.17"\n')
    (pkg / "launch_server.py").write_text(LAUNCH)
    (pkg / "bench_serving.py").write_text(BENCH_SERVING)
    meta = root / "sglang-0.5.17.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.17\n")
    shutil.copyfile(Path(__file__).with_name("real_sglang_standins") / "pynvml.py", root / "pynvml.py")
    tok = root / "tok"
    tok.mkdir()
    vocab = {f"t{i}": i for i in range(32000)}
    (tok / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}, "added_tokens": []}))
    return root


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tests", default=None)
    ap.add_argument("--no-bench", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="real-sglang-dryrun-") as scratch:
        site = fake_site(Path(scratch))
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")])
        )
        cmd = [
            sys.executable,
            str(REPO / "benchmarks" / "gpu_real_sglang.py"),
            "all",
            "--tokenizer",
            str(site / "tok"),
            "--out",
            str(args.out),
            "--rounds",
            "1",
        ]
        if args.tests is not None:
            cmd += ["--tests", args.tests]
        if args.no_bench:
            cmd.append("--no-bench")
        return subprocess.run(cmd, env=env, cwd=REPO, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
