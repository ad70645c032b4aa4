"""The benchmark stage when the server is already gone: nothing it was handed is left unawaited."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings

import pytest

from tuner.bench.settings import RequestTimeouts
from tuner.bench.stage import Aborted, Stage


async def _after_the_server_died() -> tuple[Stage, list[str]]:
    died = threading.Event()
    died.set()
    stage = Stage(RequestTimeouts(), died)
    raised = []
    for step in (lambda: stage.sleep(0.5), lambda: stage.race(asyncio.sleep(0.5))):
        with pytest.raises(Aborted):
            await step()
        raised.append(stage.reason.value if stage.reason else "")
    return stage, raised


def test_a_stage_aborted_before_a_sleep_leaves_no_coroutine_unawaited() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, raised = asyncio.run(_after_the_server_died())
        gc.collect()
    assert raised == ["server_died", "server_died"]
    assert not [w for w in caught if "never awaited" in str(w.message)]


@pytest.mark.filterwarnings("error")
def test_with_warnings_as_errors_the_abort_is_clean() -> None:
    asyncio.run(_after_the_server_died())
    gc.collect()
