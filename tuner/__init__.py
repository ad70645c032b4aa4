"""tuner: automated tuning experiments for the SGLang inference server."""

__version__ = "0.1.0"
