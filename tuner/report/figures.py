"""A trial's displayed figures (the median of its measurements, with n and range): defined in
tuner.store.figures, below the study, so the study's Optuna side (the dashboard's values and user
attributes of a re-measured trial) reads the same function as every view."""

from tuner.store.figures import MEASURED, TrialFigures, figures_over, launch_gpu_count, measurements

__all__ = ["MEASURED", "TrialFigures", "figures_over", "launch_gpu_count", "measurements"]
