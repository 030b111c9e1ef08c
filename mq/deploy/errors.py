"""The one error type of ``mq.deploy``: what went wrong, what to do, and a log tail."""

from __future__ import annotations


class DeployError(Exception):
    """What went wrong and what to do about it, plus the broker log's tail if relevant."""

    def __init__(self, what: str, todo: str, *, log_tail: str = "") -> None:
        self.what = what
        self.todo = todo
        self.log_tail = log_tail
        super().__init__(f"{what} — {todo}")


class RegionError(DeployError):
    """A region file that cannot be used: ``what`` names the file and the key path."""
