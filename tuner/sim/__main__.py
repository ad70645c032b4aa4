"""`python -m tuner.sim <SGLang launch flags> [--sim-* flags]`."""

from __future__ import annotations

import sys

from tuner.sim.launcher import main

if __name__ == "__main__":
    sys.exit(main())
