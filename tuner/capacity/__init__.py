"""Capacity under an SLO: the highest load a configuration sustains within its latency bounds."""
