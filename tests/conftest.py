"""Fixtures shared by every tier. ``spark``: the ONE SparkSession of a test run (``local[2]``,
UI off, two shuffle partitions, format("mq") registered), started on first use only.

Under pytest-xdist (``-n 2 --dist loadscope``, the default in pyproject.toml) every test is in a
group that one worker runs whole (``xdist_group``): its file, so module fixtures start once;
``spark`` for the files whose tests take the session fixture, so there is one SparkSession per
run; ``docker`` for the Docker tier, whose images and published ports its files share.

Without PySpark or Java the tests that need it are skipped with the reason printed; the CI
script installs both (`.ci/run`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

# The files whose tests take the ``spark`` fixture: one group, so one worker and one SparkSession.
SPARK_FILES = frozenset({
    "tests/integration/analytics/test_spark_source.py",
    "tests/integration/analytics/test_lag_job.py",
    "tests/loadtests/test_bench_lag.py",
})


def xdist_group(nodeid: str) -> str:
    """The group of a test: ``docker``, ``spark``, or its file."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/docker/"):
        return "docker"
    return "spark" if path in SPARK_FILES else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadscope`` with ``xdist_group`` above as the scope. (xdist's own ``loadgroup``
    appends the group to ``item._nodeid``, which pytest 9.2 no longer reads.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    strays = sorted({item.nodeid.split("::", 1)[0] for item in items
                     if "spark" in getattr(item, "fixturenames", ()) and xdist_group(item.nodeid) != "spark"})
    if strays:
        raise pytest.UsageError(f"{', '.join(strays)}: tests that take the spark fixture must be in one xdist "
                                f"group; add the file to SPARK_FILES in tests/conftest.py")


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

