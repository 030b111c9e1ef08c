"""Changes to ``<data_dir>/cluster.json`` made by fail-back, the way ``mq`` makes them.

``mq up`` records every process it starts in cluster.json (``processes``, keyed
``mirror/<flow>``), and ``mq down`` stops the mirrors of the flows listed there. Fail-back
starts two mirror processes of its own: the reverse flow, and the original flow again.
So that ``mq status`` shows them and ``mq down`` stops them, it records them the same
way: the reverse flow as a flow entry (removed again when fail-back is done) and each
process under its key. Like ``mq.deploy.state`` (which ``mirror`` may not import), every
change happens under the data directory's exclusive lock (``.cluster.lock``) and by
atomic rename, so no reader sees half a file and no writer loses another's change.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

LOCK_FILE = ".cluster.lock"


def update_cluster(path: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    data_dir = os.path.dirname(os.path.abspath(path))
    with open(os.path.join(data_dir, LOCK_FILE), "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            with open(path, encoding="utf-8") as f:
                doc = change(json.load(f))
            tmp = f"{path}.tmp.{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=2, sort_keys=True)
                f.write("\n")
            os.replace(tmp, path)
            return doc
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def record_process(path: str, flow: str, pid: int, command: Sequence[str], log: str) -> None:
    entry = {"pid": pid, "started_at_ms": time.time_ns() // 1_000_000, "command": list(command), "log": log}
    update_cluster(path, lambda doc: {**doc, "processes": {**doc.get("processes", {}), f"mirror/{flow}": entry}})


def add_flow(path: str, flow: dict[str, Any]) -> None:
    def change(doc: dict[str, Any]) -> dict[str, Any]:
        flows = [f for f in doc.get("flows", []) if f.get("name") != flow["name"]]
        return {**doc, "flows": [*flows, flow]}

    update_cluster(path, change)


def remove_flow(path: str, name: str) -> None:
    def change(doc: dict[str, Any]) -> dict[str, Any]:
        processes = {k: v for k, v in doc.get("processes", {}).items() if k != f"mirror/{name}"}
        return {**doc, "flows": [f for f in doc.get("flows", []) if f.get("name") != name],
                "processes": processes}

    update_cluster(path, change)
