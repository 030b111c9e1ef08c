"""A SparkSession for mq's analytics, with the mq source registered.

``spark_session()`` is ``local[*]`` with the UI off, few shuffle partitions (the data of a
lag job is small) and Spark's own Python workers running this interpreter
(``PYSPARK_PYTHON``: else they may start a system python without mq and die with "worker
crashed"). ``master="spark://host:7077"`` joins a real cluster: its executors need mq and
pyarrow installed (``pip install 'mq[spark]'``) and must reach the brokers.

What is missing is said up front: PySpark (``MQ_ANALYTICS_NO_PYSPARK``) or Java
(``MQ_ANALYTICS_NO_JAVA``), each with how to get it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any

LOCAL_CONFIG = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}


class AnalyticsUnavailable(RuntimeError):
    """PySpark or Java is missing: ``code``, what is missing, and how to get it."""

    def __init__(self, code: str, what: str, todo: str) -> None:
        self.code = code
        self.what = what
        self.todo = todo
        super().__init__(f"[{code}] {what} — {todo}")


def check_requirements() -> None:
    """Raise AnalyticsUnavailable when PySpark, pyarrow or Java is missing."""
    missing = [name for name in ("pyspark", "pyarrow", "pandas") if importlib.util.find_spec(name) is None]
    if missing:
        raise AnalyticsUnavailable("MQ_ANALYTICS_NO_PYSPARK", f"{', '.join(missing)} not installed",
                                   "install the spark extra: pip install -e '.[spark]' (or pip install 'mq[spark]')")
    java_home = os.environ.get("JAVA_HOME")
    if not shutil.which("java") and not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))):
        raise AnalyticsUnavailable("MQ_ANALYTICS_NO_JAVA", "no Java runtime found (Spark runs on the JVM)",
                                   "install Java 17 or newer (Debian: apt-get install openjdk-17-jre-headless) "
                                   "or set JAVA_HOME")


def spark_session(master: str = "local[*]", *, app_name: str = "mq-analytics",
                  config: Mapping[str, str] | None = None) -> Any:
    """A SparkSession (``getOrCreate``: an existing one is reused) with ``format("mq")`` registered."""
    check_requirements()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from mq.analytics.source import register

    builder = SparkSession.builder.master(master).appName(app_name)
    settings = dict(LOCAL_CONFIG) if master.startswith("local") else {"spark.sql.session.timeZone": "UTC"}
    settings.update(config or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
