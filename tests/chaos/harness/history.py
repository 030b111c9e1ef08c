"""The history of a chaos run: one JSON object per line, appended as things happen.

Each client operation is an ``invoke`` followed by its completion from the same
``process`` (one logical client doing one thing at a time, as in Jepsen):

``{"type": "invoke|ok|fail|info", "op": "send|read|nemesis", "value": ..., "partition":
..., "offset": ..., "time_ms": ..., "process": ...}``

- ``send``: ``invoke`` carries the value; ``ok`` the partition and offset of the ack;
  ``fail`` means the write certainly did not happen; ``info`` means the outcome is
  unknown (timeout, connection lost, retries exhausted): it may or may not be in the
  log, and the checker treats it as either.
- ``read``: only ``ok`` lines, one per record a reader saw, in the order it saw them
  (``process`` names the reader; a reader that seeks or restarts uses a new name).
- ``nemesis``: ``invoke`` when a fault starts, ``ok`` when it is healed, ``value``
  says what (``"kill n1"``). The checker uses these windows to explain duplicates.

``time_ms`` is milliseconds since the history was opened (monotonic clock). Lines are
flushed one by one, so a history survives the test process dying mid-run.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Self

TYPES = ("invoke", "ok", "fail", "info")
OPS = ("send", "read", "nemesis")


@dataclass(frozen=True, slots=True)
class Op:
    type: str
    op: str
    value: str | None = None
    partition: int | None = None
    offset: int | None = None
    time_ms: int = 0
    process: int | str = 0

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"op type must be one of {TYPES}, not {self.type!r}")
        if self.op not in OPS:
            raise ValueError(f"op must be one of {OPS}, not {self.op!r}")

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None},
                          separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Op:
        return cls(type=d["type"], op=d["op"], value=d.get("value"), partition=d.get("partition"),
                   offset=d.get("offset"), time_ms=int(d.get("time_ms", 0)),
                   process=d.get("process", 0))


class History:
    """A thread-safe JSON-lines writer that also keeps the ops in memory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self.ops: list[Op] = []

    def now_ms(self) -> int:
        return int((time.monotonic() - self._t0) * 1000)

    def record(self, type: str, op: str, value: str | None = None, *, partition: int | None = None,
               offset: int | None = None, process: int | str = 0) -> Op:
        entry = Op(type, op, value, partition, offset, self.now_ms(), process)
        with self._lock:
            self.ops.append(entry)
            if not self._file.closed:
                self._file.write(entry.to_json() + "\n")
                self._file.flush()
        return entry

    def extend(self, entries: Iterable[Op]) -> None:
        with self._lock:
            for entry in entries:
                self.ops.append(entry)
                self._file.write(entry.to_json() + "\n")
            self._file.flush()

    def nemesis_start(self, what: str) -> None:
        self.record("invoke", "nemesis", what, process="nemesis")

    def nemesis_end(self, what: str) -> None:
        self.record("ok", "nemesis", what, process="nemesis")

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_history(path: str | Path) -> list[Op]:
    """Every op of a history file; a torn last line (writer killed) is ignored."""
    return list(iter_history(path))


def iter_history(path: str | Path) -> Iterator[Op]:
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield Op.from_dict(json.loads(line))
        except json.JSONDecodeError:
            if number >= len(lines) - 1:
                return  # the line being written when the writer died
            raise


def write_history(path: str | Path, ops: Iterable[Op]) -> Path:
    """Write hand-made ops (tests of the checker, replays)."""
    path = Path(path)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(entry.to_json() + "\n" for entry in ops)
    return path
