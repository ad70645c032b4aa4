"""Structured knobs as objects: one module per knob, each implementing `protocol.Knob`.

A module here that defines `KNOB` is a knob: `registry.knobs()` finds it, the space loader
accepts its `kind:`, checks its choices against the release's options (file:line), samples it by
its shape, the candidates give it the features of that shape, and its flags reach the trial's
configuration (so the renderer spells them per release and the failure rules see them).
"""
