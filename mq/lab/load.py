"""Lab 07's moving parts: the lag exporter, a locust run and a consumer group that does work.

``LagExporterProcess`` runs ``python -m mq.deploy.lag_exporter`` against a bootstrap (the
same process ``mq up`` starts), with its status file and ``/metrics`` in a temporary
directory. ``LoadRun`` runs ``mq load run SCENARIO`` in the background (locust in its own
process: it monkey-patches whatever imports it) and reads locust's request-rate history
back. ``WorkGroup`` is a consumer group whose members spend ``per_record_ms`` on every
record, so its capacity is known (members x 1000 / per_record_ms records/s) and a load
above it builds lag; ``add_member`` is how the lab scales it out. ``run_lag_job`` runs
``mq analytics lag`` (Spark) as a user would and returns where it wrote.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from mq.lab.process import ChildProcess, free_port, wait_until


class LagExporterProcess:
    """``mq lag export`` for one cluster, as a child process (see the module docstring)."""

    def __init__(self, bootstrap: str, *, region: str = "lab", interval: str = "500ms",
                 directory: str | Path | None = None) -> None:
        self._owned = directory is None  # a temporary directory of ours: removed by stop()
        self.directory = Path(directory or tempfile.mkdtemp(prefix="mq-lag-"))
        self.status_path = self.directory / "status.json"
        self.port = free_port()
        argv = [sys.executable, "-m", "mq.deploy.lag_exporter", "--bootstrap", bootstrap, "--region", region,
                "--interval", interval, "--metrics-listen", f"127.0.0.1:{self.port}",
                "--status-file", str(self.status_path)]
        self.child = ChildProcess("lag exporter", argv, host="127.0.0.1", port=self.port,
                                  log_path=self.directory / "lag-exporter.log")

    def start(self, *, timeout_s: float = 30.0) -> LagExporterProcess:
        self.child.start(ready_timeout_s=timeout_s, ready=lambda: self.status() is not None)
        return self

    def status(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.status_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def metrics(self, prefix: str = "mq_consumergroup_lag") -> list[str]:
        """The /metrics lines starting with ``prefix`` (no comments)."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as answer:
            text = answer.read().decode()
        return [line for line in text.splitlines() if line.startswith(prefix)]

    def stop(self) -> None:
        self.child.stop(timeout_s=10)
        if self._owned:
            shutil.rmtree(self.directory, ignore_errors=True)


class LoadRun:
    """``mq load run`` in the background; ``wait()`` for it, then ``history()``."""

    def __init__(self, bootstrap: str, scenario: str, *, users: int, duration_s: float, out_dir: str | Path,
                 topic: str = "load", **options: Any) -> None:
        self.out_dir = Path(out_dir)
        self.argv = [sys.executable, "-m", "mq.cli.main", "load", "run", scenario, "--bootstrap", bootstrap,
                     "--users", str(users), "--duration", f"{duration_s:g}s", "--topic", topic,
                     "--out", str(self.out_dir)]
        for name, value in options.items():
            self.argv += [f"--{name.replace('_', '-')}", str(value)]
        self.process: subprocess.Popen[str] | None = None
        self.started_s: float | None = None
        self.output = ""

    def start(self) -> LoadRun:
        self.started_s = time.monotonic()
        self.process = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return self

    def wait(self, timeout_s: float = 180.0) -> str:
        """Wait for the run; its printed summary. RuntimeError when it failed."""
        assert self.process is not None, "start() first"
        self.output, _ = self.process.communicate(timeout=timeout_s)
        if self.process.returncode != 0:
            raise RuntimeError(f"mq load run exited with {self.process.returncode}:\n{self.output}")
        return self.output

    def history(self) -> list[dict[str, float]]:
        """locust's aggregated history: one row per second (time ms, users, requests/s, p50, p99)."""
        with open(self.out_dir / "locust_stats_history.csv", newline="", encoding="utf-8") as f:
            rows = [r for r in csv.DictReader(f) if r["Name"] == "Aggregated"]

        def number(value: str) -> float:
            try:
                return float(value)
            except ValueError:
                return float("nan")

        return [{"ts_ms": int(r["Timestamp"]) * 1000, "users": number(r["User Count"]),
                 "requests_per_s": number(r["Requests/s"]), "p50_ms": number(r["50%"]), "p99_ms": number(r["99%"])}
                for r in rows]


class WorkGroup:
    """A consumer group whose members work ``per_record_ms`` per record (module docstring)."""

    def __init__(self, bootstrap: str, topic: str, group_id: str, *, per_record_ms: float) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.group_id = group_id
        self.per_record_ms = per_record_ms
        self.consumed = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    @property
    def members(self) -> int:
        return sum(t.is_alive() for t in self._threads)

    @property
    def capacity_per_s(self) -> float:
        return self.members * 1000 / self.per_record_ms

    def add_member(self) -> WorkGroup:
        thread = threading.Thread(target=self._member, name=f"{self.group_id}-{len(self._threads)}", daemon=True)
        self._threads.append(thread)
        thread.start()
        return self

    def _member(self) -> None:
        from mq.client.blocking import Consumer

        try:
            with Consumer(self.bootstrap, group_id=self.group_id, auto_offset_reset="earliest",
                          auto_commit_interval_ms=250, max_poll_records=20) as consumer:
                consumer.subscribe([self.topic])
                while not self._stop.is_set():
                    records = consumer.poll(timeout_ms=100)
                    if records:
                        time.sleep(len(records) * self.per_record_ms / 1000)  # the work
                        with self._lock:
                            self.consumed += len(records)
        except Exception as error:  # noqa: BLE001 - shown by the lab, never hangs it
            self.errors.append(f"{type(error).__name__}: {error}")

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)


def run_lag_job(bootstrap: str, out_dir: str | Path, *, since: str, threshold: str, longer_than: str,
                load_dirs: tuple[str | Path, ...] = (), master: str = "local[2]",
                timeout_s: float = 300.0) -> tuple[str, float]:
    """``mq analytics lag`` (Spark) as a user runs it; its output and how long it took."""
    argv = [sys.executable, "-m", "mq.cli.main", "analytics", "lag", "--bootstrap", bootstrap, "--since", since,
            "--threshold", threshold, "--longer-than", longer_than, "--out", str(out_dir), "--master", master]
    for directory in load_dirs:
        argv += ["--load", str(directory)]
    started = time.monotonic()
    env = dict(os.environ, COLUMNS="160")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"mq analytics lag exited with {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}")
    return done.stdout, time.monotonic() - started


__all__ = ["LagExporterProcess", "LoadRun", "WorkGroup", "run_lag_job", "wait_until"]
