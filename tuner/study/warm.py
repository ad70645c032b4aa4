"""Warm start: a new study begins with what an earlier one learned (e.g. after an SGLang upgrade).

The earlier study's feasible configurations are enqueued first, each re-rendered and validated
for the new study's release (one that the release no longer accepts is skipped, with the reason
logged), and the evidence of its launches feeds the failure rules and the memory model from the
first ask on.
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
from tuner.search.evidence import Evidence
from tuner.session import render_launch
from tuner.space.loader import SearchSpace, config_from_params
from tuner.space.sampling import joined_params
from tuner.store.connect import mask_url, optuna_storage_kwargs
from tuner.study.learn import study_evidence, told_without_launch

log = logging.getLogger(__name__)


@dataclass(kw_only=True, slots=True)
class WarmStart:
    """An earlier study to learn from: its database URL and name."""

    url: str
    study: str
    _trials: list[FrozenTrial] | None = field(default=None, repr=False)

    @property
    def shown(self) -> str:
        return mask_url(self.url)

    def trials(self) -> list[FrozenTrial]:
        """The earlier study's trials (read once)."""
        if self._trials is None:
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
        return self._trials

    def evidence(self, space: SearchSpace) -> list[Evidence]:
        """What the earlier study's launches proved, read with this space's parameters."""
        return study_evidence(space, self.trials())

    def launchable(self, space: SearchSpace, engine: Engine) -> list[dict[str, object]]:
        """The earlier study's feasible configurations that this study's release accepts."""
        out: list[dict[str, object]] = []
        for t in self.trials():
            attrs = t.user_attrs
            if t.state is not TrialState.COMPLETE or not attrs.get("feasible"):
                continue
            if told_without_launch(attrs):
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
