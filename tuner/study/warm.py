"""Warm start: a new study begins with what an earlier one learned (e.g. after an SGLang upgrade).

The earlier study's feasible configurations are enqueued first, each re-rendered and validated
for the new study's release (one that the release no longer accepts is skipped, with the reason
logged), and the evidence of its launches feeds the failure rules and the memory model from the
first ask on. They are enqueued best first by the new study's own objectives and directions (which
may differ from the earlier study's: each value is read from the earlier study's objective of that
name, or from the metric its trial recorded), so a budget smaller than the earlier study's
feasible set re-measures what the new study ranks best.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.engine import Engine
from tuner.errors import ConfigError, FlagError
from tuner.front import ranked
from tuner.search.evidence import Evidence
from tuner.session import render_launch
from tuner.space.loader import SearchSpace, config_from_params
from tuner.space.sampling import joined_params
from tuner.store.connect import mask_url, optuna_storage_kwargs
from tuner.store.preflight import check_database
from tuner.study.learn import launched, study_evidence

log = logging.getLogger(__name__)


@dataclass(kw_only=True, slots=True)
class WarmStart:
    """An earlier study to learn from: its database URL and name."""

    url: str
    study: str
    _trials: list[FrozenTrial] | None = field(default=None, repr=False)
    _names: list[str] = field(default_factory=list, repr=False)  # the earlier study's objective names

    @property
    def shown(self) -> str:
        return mask_url(self.url)

    def trials(self) -> list[FrozenTrial]:
        """The earlier study's trials (read once)."""
        if self._trials is None:
            check_database(self.url, create=False)  # an absent file is refused, never created
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    storage = optuna.storages.RDBStorage(
                        self.url, engine_kwargs=optuna_storage_kwargs(self.url)
                    )
                    loaded = optuna.load_study(study_name=self.study, storage=storage)
            except KeyError as exc:
                raise ConfigError(f"--warm-start: no study {self.study!r} in {self.shown}") from exc
            self._trials = list(loaded.get_trials(deepcopy=False))
            self._names = list(loaded.metric_names or [])
        return self._trials

    def evidence(self, space: SearchSpace) -> list[Evidence]:
        """What the earlier study's launches proved, read with this space's parameters."""
        return study_evidence(space, self.trials())

    def launchable(self, space: SearchSpace, engine: Engine) -> list[dict[str, object]]:
        """The earlier study's feasible configurations that this study's release accepts, best first by
        this study's objectives."""
        out: list[dict[str, object]] = []
        for t in ordered(self.trials(), self._names, space):
            attrs = t.user_attrs
            if t.state is not TrialState.COMPLETE or not attrs.get("feasible"):
                continue
            if not launched(attrs):
                continue
            try:
                config = config_from_params(space, t.params)
                render_launch(config, space, engine, port=0, log_path=Path("unused.log"))
            except (ConfigError, FlagError) as exc:
                log.warning(
                    "warm start: trial %d of %s is not launchable here: %s", t.number, self.study, exc
                )
                continue
            params = joined_params(space, t.params)
            if params not in out:
                out.append(params)
        return out


def ordered(trials: list[FrozenTrial], names: list[str], space: SearchSpace) -> list[FrozenTrial]:
    """The trials, best first by `space`'s objectives and directions (the Pareto front first, then by
    distance to the utopia point); trials missing a value of those objectives keep their order, last."""
    metrics = [o.metric for o in space.objectives]
    points: dict[int, list[float]] = {}
    for i, t in enumerate(trials):
        values = [_value(t, names, m) for m in metrics]
        if all(v is not None for v in values):
            points[i] = [float(v) for v in values if v is not None]
    first = ranked(points, space.directions) if points else []
    rest = [i for i in range(len(trials)) if i not in points]
    return [trials[i] for i in [*first, *rest]]


def _value(t: FrozenTrial, names: list[str], metric: str) -> float | None:
    """A trial's value of `metric`: its objective of that name, else the metric it recorded."""
    if metric in names and t.values is not None and len(t.values) > names.index(metric):
        return float(t.values[names.index(metric)])
    got = t.user_attrs.get(metric)
    return float(got) if isinstance(got, (int, float)) and not isinstance(got, bool) else None
