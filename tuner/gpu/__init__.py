"""GPU memory: the probe protocol (probe), NVML (nvml), simulator state files (files), sampling (sampler)."""
