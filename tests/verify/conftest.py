"""One SparkSession for every verification test (SPEC 8), built with the MACHINE-NOTES settings.

The data here is tiny, so the session is tuned for many small queries: one shuffle partition,
no whole-stage code generation (compiling it costs more than running the plan) and no adaptive
re-planning. The job itself runs with Spark's defaults (:func:`verify.session.build_session`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from verify.session import build_session

SMALL_DATA_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.adaptive.enabled": "false",
}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = build_session(
        "local[2]",
        "floodmark-verify-tests",
        shuffle_partitions=1,
        driver_memory="2g",
        fast_start=True,
        extra_conf=SMALL_DATA_CONF,
    )
    yield session
    session.stop()
