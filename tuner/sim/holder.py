"""A stray process that keeps simulated GPU memory: `python -m tuner.sim.holder --mib M --gpus 0,1`.

Models a grandchild (JIT/compile helper) that left the server's session and
outlives it until someone kills it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from tuner.sim import statefiles


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tuner.sim.holder")
    parser.add_argument("--mib", type=float, required=True)
    parser.add_argument("--gpus", required=True)
    args = parser.parse_args(argv)
    directory = statefiles.state_dir()
    gpus = tuple(int(g) for g in args.gpus.split(",") if g)

    def _exit(signum: int, frame: object) -> None:
        if directory:
            statefiles.remove_proc(directory)
        sys.exit(0)

    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # it left the terminal's session anyway
    if directory:
        statefiles.write_proc(directory, gpus, args.mib)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
