"""Infrastructure faults never spin: a growing pause after each, and a cap on how many in a row.

A port held by another process, GPUs held by a foreign process or a server killed from
outside fail trials in milliseconds; asking again at once burns the budget's FAIL trials
(hundreds a minute) and tells nothing. `InfraBackoff` hears every trial's outcome: after
an infrastructure fault the next trial waits (exponential: base, 2 x base, ... up to a cap),
and after `max_failures` in a row it raises InfrastructureError, which stops the run with a
clear message and exit 3. The study stays as it was: run the same command once the cause is fixed.

A failure the log proves is the environment's (Outcome.ENVIRONMENT: a proxy, an offline host, host
RAM, a port another process holds) is paced the same way, and when the same such error comes
back on a second, different configuration it is the machine for certain: the run stops at once
with one line naming it, rather than spending trials (or the rules) on it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from tuner.config import Outcome
from tuner.errors import InfrastructureError
from tuner.space.sections import Budget


@dataclass(kw_only=True, slots=True)
class InfraBackoff:
    """Counts infrastructure faults in a row; says how long to wait, or stops the run."""

    max_failures: int
    base_s: float
    max_s: float
    sleep: Callable[[float], object]  # an interruptible wait (INTERRUPTS.nap in the study)
    failures: int = 0
    last_message: str = ""
    waits_s: list[float] = field(default_factory=list)
    environment: dict[str, set[str]] = field(default_factory=dict)  # error signature -> configurations

    @classmethod
    def from_budget(cls, budget: Budget, sleep: Callable[[float], object]) -> InfraBackoff:
        return cls(
            max_failures=budget.max_infra_failures,
            base_s=budget.infra_backoff_s,
            max_s=budget.infra_backoff_max_s,
            sleep=sleep,
        )

    def delay_s(self) -> float:
        """The pause before the next trial: 0 after a trial that was not an infrastructure fault."""
        if self.failures == 0:
            return 0.0
        return float(min(self.max_s, self.base_s * 2 ** (self.failures - 1)))

    def after(self, outcome: Outcome, message: str = "", config: str = "") -> None:
        """Hear one trial's outcome (and its configuration's key); raise InfrastructureError at the
        cap or at an environment error seen on two configurations, else wait as needed."""
        if outcome.kind.environment:
            self._environment(message, config)
        elif not outcome.kind.infra:
            self.failures = 0
            return
        self.failures += 1
        self.last_message = message
        if self.failures >= self.max_failures:
            raise InfrastructureError(
                f"stopped after {self.failures} infrastructure failures in a row (last: "
                f"{_one_line(message)}); the study is unchanged: fix the cause and run the same "
                f"command to resume (budget.max_infra_failures sets the limit)"
            )
        wait = self.delay_s()
        self.waits_s.append(wait)
        self.sleep(wait)

    def _environment(self, message: str, config: str) -> None:
        """Stop when the same environment error has now failed two different configurations."""
        seen = self.environment.setdefault(_signature(message), set())
        seen.add(config)
        if len(seen) >= 2:
            raise InfrastructureError(
                f"stopped: the same environment error on {len(seen)} different configurations "
                f"({_one_line(message)}); no launch flag causes it: fix the machine and run the same "
                f"command to resume (the study is unchanged)"
            )


_VARIABLE = re.compile(r"0x[0-9a-fA-F]+|\d+(?:\.\d+)?|\b(?:at load|at capture|at warmup|under load)\b")


def _signature(message: str) -> str:
    """An error message without what varies between occurrences (numbers, addresses, the stage)."""
    return " ".join(_VARIABLE.sub("#", message).split())


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split()) or "no message"
    return text if len(text) <= limit else text[: limit - 3] + "..."
