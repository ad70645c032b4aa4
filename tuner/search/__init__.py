"""What the study learns from its trials: failure rules, a memory model, the decision to launch.

Pure functions over values: `evidence` (what one finished trial proves), `rules` (a failure
becomes a rule with a scope over the knobs), `memory` (KV tokens and free VRAM against the
memory fraction, fitted from successful launches), `policy` (launch or prune a suggestion).
"""
