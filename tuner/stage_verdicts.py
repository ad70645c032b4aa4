"""A stage's result judged for the trial (pure): the gate's verdict and the benchmark's result, each to
the Failure that ends the trial (None: it passed), and the notes that mark a measurement noisy.

tuner/trial.py runs the stages and asks here what their results amount to; a death of the server
during a stage is classified from its log there (ServerProcess.classify), not here.
"""

from __future__ import annotations

from tuner.bench.settings import BenchSettings
from tuner.bench.types import BenchResult
from tuner.bench.verdict import failed_problem, hang_message
from tuner.config import Failure, Outcome, Phase
from tuner.gate.checks import GateResult, GateVerdict
from tuner.gate.garbage import nan_signature

_GATE_OUTCOME = {
    GateVerdict.NAN: Outcome.NAN,
    GateVerdict.WRONG_ANSWER: Outcome.WRONG_ANSWER,
    GateVerdict.GARBAGE: Outcome.GARBAGE,
    GateVerdict.ERROR: Outcome.GATE_ERROR,
    GateVerdict.INCONCLUSIVE: Outcome.INFRA_ERROR,  # the machine kept the burst from batching: retried
}


def nan_under_load(result: BenchResult) -> str | None:
    """One line when a sampled measured response carries NaN's signature; None when none does.

    The gate checks a burst; the benchmark decodes in its own batches and graphs, so a sample of what
    it measured (every SAMPLE_EVERY-th request) is checked too. Only NaN's own signatures count
    (NaN/inf words, a run of token id 0): the benchmark's prompts are random and ignore EOS, so
    loops and odd words are what an honest model writes there.
    """
    checked, found = 0, []
    for point in result.points:
        for record in point.records:
            if record.text_sample is None:
                continue
            checked += 1
            why = nan_signature(record.text_sample)
            if why is not None:
                found.append(f"{point.point.label} request #{record.index}: {why}")
    if not found:
        return None
    more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
    return f"NaN under the benchmark's load ({len(found)} of {checked} sampled responses): {found[0]}{more}"


def gate_failure(result: GateResult) -> Failure | None:
    """The failure of a gate that did not pass (its verdict's outcome, with its reason)."""
    if result.passed:
        return None
    outcome = _GATE_OUTCOME[result.verdict]
    return Failure(outcome=outcome, phase=Phase.GATE, message=result.reason or outcome.value)


def bench_failure(result: BenchResult, settings: BenchSettings) -> Failure | None:
    """The failure of a benchmark the server survived: hung, nothing completed, NaN under load, too
    many failed requests, or a client that may have been the bottleneck (not trusted: retried)."""
    if result.hung:
        message = hang_message(settings.timeouts.first_byte_s, settings.timeouts.idle_read_s)
        return Failure(outcome=Outcome.HANG, phase=Phase.BENCH, message=message)
    metrics = result.objective_metrics
    if metrics is None or not metrics.completed:
        why = failed_problem(result, 0.0)
        message = "no benchmark request completed" + (f": {why}" if why else "")
        return Failure(outcome=Outcome.BENCH_FAILED, phase=Phase.BENCH, message=message)
    nan = nan_under_load(result)
    if nan is not None:
        return Failure(outcome=Outcome.NAN, phase=Phase.BENCH, message=nan)
    failed = failed_problem(result, settings.max_failed_fraction)
    if failed is not None:
        return Failure(outcome=Outcome.BENCH_ERRORS, phase=Phase.BENCH, message=failed)
    if result.client_bound:
        lag = "-" if result.loop_lag_p99_ms is None else f"{result.loop_lag_p99_ms:.1f} ms"
        return Failure(
            outcome=Outcome.INFRA_ERROR,
            phase=Phase.BENCH,
            message=(
                "the benchmark client, not the server, may have been the bottleneck (client CPU "
                f"{100 * result.client_cpu_share:.0f}%, event-loop lag p99 {lag}): not trusted"
            ),
        )
    return None


def starved_note(result: BenchResult) -> str | None:
    """The note of a benchmark whose client other processes kept off the CPU (measured, but noisy)."""
    if not result.starved:
        return None
    lag = "-" if result.loop_lag_p99_ms is None else f"{result.loop_lag_p99_ms:.1f} ms"
    share = result.run_queue_wait_share
    wait = "-" if share is None else f"{100 * share:.0f}%"
    cpu = f"{100 * result.client_cpu_share:.0f}%"
    return (
        f"noisy: other processes kept the benchmark client off the CPU (event-loop lag p99 {lag}, "
        f"run-queue wait {wait} of its runnable time, client CPU {cpu})"
    )
