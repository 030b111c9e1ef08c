"""Long-poll ShareFetch: a fetch that found nothing waits (Kafka's share fetch purgatory).

A ShareFetch with ``max_wait_ms`` > 0 is run at once, as any other (its
acknowledgements are applied and written). If its answer, once written, holds no
records, it is *parked* instead of sent: the fetch is tried again — without the
acknowledgements, already applied, whose results are kept for the answer — whenever
something may have made records available (a partition's high watermark moved on
this broker, a request was handled, the service's timer ran) and answered as soon as
it acquires records, or empty at its deadline. The wait is capped at
``MAX_SHARE_FETCH_WAIT_MS``: a consumer that died while parked can only lock records
(until their lock expires) for that long after its last request.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mq.protocol import share_messages as s

MAX_SHARE_FETCH_WAIT_MS = 5000
RECHECK_MS = 50
"""While fetches wait, the service's timer re-runs them this often (a follower replica's
high watermark moves without waking anything)."""


@dataclass(slots=True)
class ParkedFetch:
    op_id: int
    request: s.ShareFetchRequest  # without acknowledgements
    acknowledgements: list[s.AcknowledgeResult]  # the results of the ones the first run applied
    deadline_ms: int
    client_id: str
    client_host: str


class ShareFetchWaits:
    def __init__(self) -> None:
        self.waiting: dict[int, tuple[s.ShareFetchRequest, int, str, str]] = {}  # op id -> long-poll not answered
        self.parked: dict[int, ParkedFetch] = {}

    def watch(self, op_id: int, request: s.ShareFetchRequest, *, client_id: str, client_host: str,
              now_ms: int) -> None:
        if request.max_wait_ms > 0 and request.max_records > 0:
            deadline = now_ms + min(request.max_wait_ms, MAX_SHARE_FETCH_WAIT_MS)
            self.waiting[op_id] = (request, deadline, client_id, client_host)

    def park(self, op_id: int, response: object, *, now_ms: int) -> bool:
        """True if ``response`` (the first run's answer) should wait instead of going out."""
        entry = self.waiting.pop(op_id, None)
        if entry is None or not isinstance(response, s.ShareFetchResponse):
            return False
        request, deadline, client_id, client_host = entry
        empty = response.error_code == 0 and not response.partitions
        if not empty or now_ms >= deadline:
            return False
        self.parked[op_id] = ParkedFetch(op_id, replace(request, acknowledgements=[]), response.acknowledgements,
                                         deadline, client_id, client_host)
        return True

    def forget(self, op_id: int) -> None:
        self.waiting.pop(op_id, None)
        self.parked.pop(op_id, None)

    def next_deadline_ms(self, now_ms: int) -> int | None:
        if not self.parked:
            return None
        return min(now_ms + RECHECK_MS, *(p.deadline_ms for p in self.parked.values()))


def answer_of(parked: ParkedFetch, response: object) -> object:
    """A retry's answer, with the first run's acknowledgement results."""
    if isinstance(response, s.ShareFetchResponse):
        return replace(response, acknowledgements=parked.acknowledgements)
    return response
