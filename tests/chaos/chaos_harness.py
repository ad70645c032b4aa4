"""Driving `python -m tuner run` through faults, and the invariants a study must keep through them.

Every wait is on a condition with a bound (an output line, a process exit, a file), never a
sleep that hopes; the randomness (which fault, which phase, how long after it) is seeded.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import optuna
import psutil
from optuna.trial import TrialState

from tuner.search.told import PENDING, VERDICT_STATES
from tuner.store.sql import SqlStore
from tuner.study import finalists
from tuner.study.learn import launched as was_launched

ROOT = Path(__file__).resolve().parents[2]
STUDY = "tiny-fast-sim-v1"
RETRYABLE = {"interrupted", "infra_error"}  # rows told FAIL without a verdict, and retried
MEASURED = {"ok", "slo_violation"}  # rows told COMPLETE; a failed launch is FAIL, a pruned ask PRUNED


def make_space(tmp: Path, *, extra: str = "", replace: dict[str, str] | None = None) -> Path:
    """The tiny simulated space with a short infrastructure backoff (the faults come fast)."""
    text = (ROOT / "search_spaces" / "tiny-fast-sim.yaml").read_text()
    text = text.replace(
        "  timeout: 2m\n", "  timeout: 10m\n  infra_backoff: 0.05s\n  infra_backoff_max: 0.2s\n"
    )
    for old, new in (replace or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp / "space.yaml"
    path.write_text(text + extra)
    return path


class Tuner:
    """One `python -m tuner run` process with its output collected line by line."""

    def __init__(
        self,
        tmp: Path,
        trials: int,
        *,
        space: Path | None = None,
        db: str = "exp.db",
        prefix: Sequence[str] = (),
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.tmp = tmp
        argv = ["-m", "tuner"] if not prefix else list(prefix)
        cmd = [
            sys.executable,
            *argv,
            "run",
            "--space",
            str(space or tmp / "space.yaml"),
            "--db",
            db,
            "--trials",
            str(trials),
            "--plain",
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra_env or {})}
        self.proc = subprocess.Popen(
            cmd,
            cwd=tmp,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def output(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def wait_line(self, pattern: str, *, after: int = 0, timeout_s: float = 60.0) -> int | None:
        """Index of the first line from `after` on matching `pattern`; None if the process ended first."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for i in range(after, len(self.lines)):
                    if regex.search(self.lines[i]):
                        return i
                after = max(after, len(self.lines))
                if self.proc.poll() is not None and not self._reader.is_alive():
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{pattern!r} never appeared:\n{self.output[-3000:]}")
                self._cond.wait(min(left, 0.2))

    def handlers_installed(self) -> bool:
        """The process handles SIGTERM (its stop handler is in place)."""
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return self.proc.poll() is not None
        caught = int(re.search(r"SigCgt:\s*([0-9a-f]+)", status).group(1), 16)  # type: ignore[union-attr]
        return bool(caught & (1 << (signal.SIGTERM - 1)))

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def wait(self, timeout_s: float = 60.0) -> int:
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(
                f"tuner still running after {timeout_s:.0f} s:\n{self.output[-3000:]}"
            ) from exc
        self._reader.join(10)
        return code


def sim_processes(tmp: Path) -> list[psutil.Process]:
    """Simulator servers (and their children) started for this test's run directory."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            ours = str(tmp) in proc.environ().get("TUNER_SIM_STATE_DIR", "")
            if ours and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def live_server_pids(tmp: Path) -> list[int]:
    """Server pids in the run directory's live records (servers running now)."""
    pids = []
    for path in (tmp / "runs").glob("*/live/*.json"):
        try:
            pid = json.loads(path.read_text()).get("server_pid")
        except (OSError, ValueError):
            continue
        if isinstance(pid, int) and psutil.pid_exists(pid):
            pids.append(pid)
    return pids


@dataclass
class StudyFacts:
    """What the database says after the faults: Optuna's trials and the tuner's rows."""

    states: dict[int, TrialState]
    attrs: dict[int, dict[str, object]]
    rows: list[tuple[int, str, str, float, float]]  # trial number, outcome, config hash, start, finish
    launches: list[int] = field(default_factory=list)
    finalist_repeats: int = 0

    @property
    def complete(self) -> int:
        """Launches the budget counts: launched COMPLETE trials (not pruned, forbidden or reused) and the
        finalists' repeats."""
        launched = sum(
            1
            for n, s in self.states.items()
            if s in VERDICT_STATES and was_launched(self.attrs[n]) and self.concluded(n)
        )
        return launched + self.finalist_repeats

    def concluded(self, number: int) -> bool:
        pending = self.attrs[number].get(PENDING)
        state = self.states[number]
        return state is TrialState.COMPLETE or (
            isinstance(pending, dict) and bool(pending.get("verdict")) and pending.get("state") == state.name
        )

    def count(self, state: TrialState) -> int:
        return sum(1 for s in self.states.values() if s is state)


def study_facts(tmp: Path, db: str = "exp.db") -> StudyFacts:
    url = f"sqlite:///{tmp / db}"
    try:
        study = optuna.load_study(study_name=STUDY, storage=url)
    except KeyError:  # a run stopped before it created its study: nothing was asked yet
        return StudyFacts(states={}, attrs={}, rows=[], finalist_repeats=0)
    states = {t.number: t.state for t in study.trials}
    attrs = {t.number: dict(t.user_attrs) for t in study.trials}
    with SqlStore(url, create=False) as store:
        stored = store.trials(STUDY)
    rows = [
        (r.trial_number, r.outcome.value, r.config_hash, r.started_at.timestamp(), r.finished_at.timestamp())
        for r in stored
        if r.trial_number is not None
    ]
    repeats = finalists.claimed(study.user_attrs.get(finalists.STATE_ATTR) or {})
    return StudyFacts(states=states, attrs=attrs, rows=rows, finalist_repeats=repeats)


def check_invariants(tmp: Path, *, complete: int, db: str = "exp.db") -> StudyFacts:
    """Exact trial count, rows consistent with Optuna, nothing running, nothing left behind."""
    facts = study_facts(tmp, db)
    assert facts.complete == complete, f"{facts.complete} COMPLETE trials, expected exactly {complete}"
    assert facts.count(TrialState.RUNNING) == 0, "a trial was left RUNNING"
    numbers = [r[0] for r in facts.rows]
    assert len(numbers) == len(set(numbers)), f"a trial has two rows: {sorted(numbers)}"
    for number, outcome, *_ in facts.rows:
        state = facts.states[number]
        expected = (
            TrialState.COMPLETE
            if outcome in MEASURED
            else TrialState.PRUNED
            if outcome == "pruned"
            else TrialState.FAIL
        )
        assert state is expected, f"trial {number}: row says {outcome}, Optuna says {state.name}"
        if outcome not in MEASURED:
            assert facts.concluded(number) is (outcome not in RETRYABLE), f"trial {number}: {outcome}"
    recorded = set(numbers)
    for number in facts.states:
        if facts.concluded(number) and "dedup_of" not in facts.attrs[number]:
            assert number in recorded, f"trial {number} was told its verdict in Optuna but has no row (lost)"
    by_key: dict[str, list[tuple[float, float, int]]] = {}
    for number, _, key, start, finish in facts.rows:
        by_key.setdefault(key, []).append((start, finish, number))
    for spans in by_key.values():
        spans.sort()
        for (_, end_a, a), (start_b, _, b) in zip(spans, spans[1:], strict=False):
            assert start_b >= end_a, f"trials {a} and {b} ran the same launch at once"
    left = sim_processes(tmp)
    assert not left, f"servers left running: {[p.pid for p in left]}"
    assert not list((tmp / "runs").glob("*/live/*.json")), "a live-server record was left"
    return facts


def finish(tmp: Path, trials: int, *, db: str = "exp.db", timeout_s: float = 120.0) -> Tuner:
    """Run the same command again until the study's budget is met; it must end with exit 0."""
    tuner = Tuner(tmp, trials, db=db)
    code = tuner.wait(timeout_s)
    assert code == 0, tuner.output[-3000:]
    return tuner
