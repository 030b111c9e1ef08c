"""The active controller's broker sessions (Kafka's ``BrokerHeartbeatManager``).

In memory only, never in the metadata log: each registered broker's session deadline
(last heartbeat + ``broker.session.timeout.ms``) and whether it asked for a controlled
shutdown. A new active controller starts every registered broker with a fresh session
(``activate``), so a failover never fences a broker that is merely between heartbeats.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(slots=True)
class BrokerSession:
    deadline_ms: int
    shutting_down: bool = False


class BrokerSessions:
    def __init__(self, session_timeout_ms: int) -> None:
        self.session_timeout_ms = session_timeout_ms
        self._sessions: dict[int, BrokerSession] = {}

    def start(self, broker_id: int, now_ms: int) -> None:
        """A fresh session (registration, controller failover)."""
        self._sessions[broker_id] = BrokerSession(now_ms + self.session_timeout_ms)

    def touch(self, broker_id: int, now_ms: int) -> None:
        session = self._sessions.get(broker_id)
        if session is None:
            self.start(broker_id, now_ms)
        else:
            session.deadline_ms = max(session.deadline_ms, now_ms + self.session_timeout_ms)

    def set_shutting_down(self, broker_id: int, shutting_down: bool) -> None:
        session = self._sessions.get(broker_id)
        if session is not None:
            session.shutting_down = shutting_down

    def is_shutting_down(self, broker_id: int) -> bool:
        session = self._sessions.get(broker_id)
        return session is not None and session.shutting_down

    def deadline_ms(self, broker_id: int) -> int | None:
        session = self._sessions.get(broker_id)
        return None if session is None else session.deadline_ms

    def expired(self, broker_ids: Iterable[int], now_ms: int) -> list[int]:
        """Those of ``broker_ids`` whose session ended (no session counts as ended), sorted."""
        out = []
        for broker_id in sorted(broker_ids):
            session = self._sessions.get(broker_id)
            if session is None or session.deadline_ms <= now_ms:
                out.append(broker_id)
        return out

    def next_deadline_ms(self, broker_ids: Iterable[int]) -> int | None:
        deadlines = [s.deadline_ms for b in broker_ids if (s := self._sessions.get(b)) is not None]
        return min(deadlines) if deadlines else None

    def clear(self) -> None:
        self._sessions.clear()
