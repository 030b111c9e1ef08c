"""Fixtures shared by every tier. ``spark``: the ONE SparkSession of a test run (``local[2]``,
UI off, two shuffle partitions, format("mq") registered), started on first use only.

Without PySpark or Java the tests that need it are skipped with the reason printed; the CI
script installs both (`.ci/run`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from mq.analytics.session import AnalyticsUnavailable, check_requirements, spark_session

    try:
        check_requirements()
    except AnalyticsUnavailable as exc:
        pytest.skip(f"no Spark here: {exc}")
    session = spark_session("local[2]", app_name="mq-tests", config={"spark.sql.shuffle.partitions": "2",
                                                                       "spark.default.parallelism": "2"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
