"""`python -m tuner.sim <SGLang launch flags> [--sim-* flags]`, or `... landscape|generate ...`."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["generate"]:
        from tuner.sim.generation_check import main as generate_main

        sys.exit(generate_main(sys.argv[2:]))
    if sys.argv[1:2] == ["landscape"]:
        from tuner.sim.landscape import main as landscape_main

        sys.exit(landscape_main(sys.argv[2:]))
    from tuner.sim.launcher import main

    sys.exit(main())
