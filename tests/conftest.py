"""Fixtures shared by every tier. ``spark``: the ONE SparkSession of a test run (``local[2]``,
UI off, two shuffle partitions, format("mq") registered), started on first use only.

Under pytest-xdist (``-n 2 --dist loadgroup``, the default in pyproject.toml) every test is put in
a group that one worker runs whole: its file, or ``spark`` for every test that takes the session
fixture (so there is one SparkSession per run), or ``docker`` for the Docker tier (its images and
published ports are shared).

Without PySpark or Java the tests that need it are skipped with the reason printed; the CI
script installs both (`.ci/run`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        path = item.path.relative_to(config.rootpath).as_posix()
        if "spark" in getattr(item, "fixturenames", ()):
            group = "spark"
        elif path.startswith("tests/docker/"):
            group = "docker"
        else:
            group = path
        item.add_marker(pytest.mark.xdist_group(group))


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
