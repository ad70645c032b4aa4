"""The test house: a test's folder says what it needs, shared fixtures come from tests/support.

    unit/         the pure core and the store on SQLite files: no server, seconds (`make unit`)
    integration/  the simulator (or a FakeServer, PostgreSQL) as real processes over real HTTP
    chaos/        fault injection against whole studies (`make chaos`)
    gpu/          NVML on a real NVIDIA GPU
    real_sglang/  an installed SGLang
    support/      builders, the simulator fixture, the shared study, the CLI runner, PostgreSQL, fakes

Every test is marked by its folder, so `-m "not integration"` and the like select by folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.register_assert_rewrite("support")

from support.profile_study import profile_study  # noqa: E402, F401  (fixture, every test may ask)
from support.sim import sim_factory  # noqa: E402, F401  (fixture, every test may ask)

FOLDER_MARKS = {
    "integration": "integration",
    "chaos": "chaos",
    "gpu": "gpu",
    "real_sglang": "real_sglang",
}
_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the folder it lives in (unit tests carry no mark)."""
    for item in items:
        try:
            folder = Path(str(item.path)).resolve().relative_to(_TESTS).parts[0]
        except ValueError:
            continue
        mark = FOLDER_MARKS.get(folder)
        if mark is not None and mark not in {m.name for m in item.iter_markers()}:
            item.add_marker(mark)
