"""One SparkSession for every verification test (SPEC 8), built with the MACHINE-NOTES settings.

The data here is tiny, so the session is what the job itself picks for a small input: the
fast-start JVM, no whole-stage code generation (compiling it costs more than running the plan)
and no adaptive re-planning; and one shuffle partition.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from verify.session import SMALL_INPUT_CONF, build_session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = build_session(
        "local[2]",
        "floodmark-verify-tests",
        shuffle_partitions=1,
        driver_memory="2g",
        fast_start=True,
        extra_conf=SMALL_INPUT_CONF,
    )
    yield session
    session.stop()
