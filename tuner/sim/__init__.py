"""A simulated SGLang server: same flags, log lines, endpoints, pace and failures, no GPU.

Run it like `python -m sglang.launch_server`: `python -m tuner.sim <flags> [--sim-* flags]`.
See tuner/sim/README.md for what is modelled and what is not.
"""
