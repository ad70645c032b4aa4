"""The tuner's exception family.

    TunerError                       anything a user can cause; the CLI prints one line, exits non-zero
    ├── ConfigError                  bad space file, unknown flag, bad CLI value (exit 2)
    │   ├── FlagError                an argv the target SGLang would reject
    │   └── ProfileError             the trial asked for cannot be exported or confirmed
    ├── LaunchError                  the server could not be started or stopped cleanly
    │   ├── PortInUseError           the chosen port is held by another process
    │   ├── GpuBusyError             the GPUs hold memory of processes that are not ours
    │   └── ReleaseTimeoutError      a stopped server's processes or memory did not go away
    ├── BenchmarkError               the benchmark stage could not run (not a slow server)
    ├── InfrastructureError          infrastructure faults in a row: the run stops (exit 3), resumable
    ├── StoreError                   the experiments database cannot be opened or written
    │   └── StoreLostError           the database vanished, was replaced or stopped taking writes mid-run
    ├── ReportError                  a study cannot be summarised (unknown, empty, contradictory)
    └── GpuError                     NVML is missing or failed

A failing *trial* (crash, OOM, NaN) is not an exception: it is data, a
TrialResult with an Outcome. Every exit status of `python -m tuner` is an `ExitCode`.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The exit statuses of `python -m tuner`, in one table."""

    OK = 0
    ERROR = 1  # a TunerError without a code of its own (launch, store, report, GPU, ...)
    USAGE = 2  # a usage mistake: bad space file, flag or command-line value
    INFRASTRUCTURE = 3  # infrastructure faults in a row stopped the run (resumable)
    INTERRUPTED = 130  # stopped by SIGINT/SIGTERM (128 + SIGINT, as shells report it)


class TunerError(Exception):
    """Root of every error a user can cause or fix."""

    exit_code: ExitCode = ExitCode.ERROR


class ConfigError(TunerError):
    """A space file, flag or command-line value is wrong."""

    exit_code = ExitCode.USAGE


class FlagError(ConfigError):
    """An argv the target SGLang version's parser would reject."""


class ProfileError(ConfigError):
    """The trial asked for cannot be exported or confirmed (unknown, failed, infeasible, none left)."""


class LaunchError(TunerError):
    """The server could not be started or stopped cleanly."""


class PortInUseError(LaunchError):
    """The port chosen for the server is held by another process."""


class GpuBusyError(LaunchError):
    """The GPUs a trial needs hold memory of processes that are not ours."""


class ReleaseTimeoutError(LaunchError):
    """A stopped server's processes, port or GPU memory did not go away in time."""


class BenchmarkError(TunerError):
    """The benchmark stage could not run at all."""


class InfrastructureError(TunerError):
    """Trials keep failing for reasons outside the configuration: the run stops instead of spinning."""

    exit_code = ExitCode.INFRASTRUCTURE


class StoreError(TunerError):
    """The experiments database cannot be opened or written."""


class StoreLostError(StoreError):
    """The database the study writes to vanished, was replaced or stopped taking writes."""


class ReportError(TunerError):
    """A study cannot be summarised: unknown, empty, or its records contradict each other."""


class GpuError(TunerError):
    """NVML is missing or failed."""
