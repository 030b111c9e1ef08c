"""One consumer-group member as its own process, for the group chaos tests (R21, R22).

    python -m tests.chaos.group_member --bootstrap H:P,... --group G --topic T \
        --name m0.1 --member m0 --events m0.1.jsonl --t0 <monotonic seconds> [--instance-id s0]

A blocking ``mq.client.blocking.Consumer`` subscribed to one topic, manual commits
(``enable_auto_commit=False``): after a poll that returned records it commits what it
consumed (at most every ``--commit-interval-ms``; 0 = after every such poll, the
commit storm of R22), and in ``on_revoke`` it commits the revoked partitions first
(Kafka's pattern: a clean hand-off reads nothing twice). Every event is one JSON line,
flushed at once, so a SIGKILLed member leaves everything it did up to the kill:

    {"event": "assigned",  "t": ms, "member": m0, "incarnation": "m0.1", "member_id": ...,
     "generation": g, "tps": [[topic, p], ...] (added), "assignment": [...] (full)}
    {"event": "revoked" | "lost", ..., "generation": g, "tps": [...]}
    {"event": "consumed",  ..., "generation": g, "tp": [topic, p], "offset": o, "value": v}
    {"event": "committed", ..., "generation": g, "tp": [topic, p], "offset": o,
     "sent": ms}  # acknowledged; ``sent``: when the commit was asked
    {"event": "commit_failed", ..., "generation": g, "offsets": {...}, "error": "..."}
    {"event": "started" | "closed" | "error", ...}

``t`` is ``time.monotonic()`` minus ``--t0`` in milliseconds: the test passes the
origin of its ``History`` (CLOCK_MONOTONIC is one clock for every process), so member
events and the history's sends line up. ``member`` is the logical member: a static
member keeps its name across incarnations (its instance id), a dynamic member's
restart is a new logical member (``m0.2``) because it is a new member of the group.

SIGTERM: finish the current poll, ``close()`` (which revokes, so commits, and leaves
unless static), write ``closed``, exit 0. SIGKILL: nothing more is written.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from mq.client.blocking import Consumer
from mq.core.errors import MqError
from mq.core.types import TopicPartition


class EventLog:
    def __init__(self, path: str, *, t0: float, member: str, incarnation: str) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed at exit
        self._lock = threading.Lock()
        self.t0 = t0
        self.member = member
        self.incarnation = incarnation
        self.member_id = ""

    def now_ms(self) -> int:
        return int((time.monotonic() - self.t0) * 1000)

    def write(self, event: str, **fields: Any) -> None:
        entry = {"event": event, "t": self.now_ms(),
                 "member": self.member, "incarnation": self.incarnation,
                 "member_id": self.member_id, **fields}
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def _tps(tps: Any) -> list[list[Any]]:
    return [[tp.topic, tp.partition] for tp in sorted(tps, key=lambda tp: (tp.topic, tp.partition))]


class Member:
    """The poll loop and the rebalance callbacks; positions are what this incarnation
    consumed (offset of the last record + 1) on partitions it still owns."""

    def __init__(self, args: argparse.Namespace, log: EventLog) -> None:
        self.args = args
        self.log = log
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.positions: dict[TopicPartition, int] = {}
        self.committed: dict[TopicPartition, int] = {}
        self.owned: set[TopicPartition] = set()  # as the callbacks last said
        self.generation = -1
        self.consumer: Consumer | None = None
        self.last_commit = 0.0

    # -------------------------------------------------------------- helpers

    def _inner(self) -> Any:
        assert self.consumer is not None
        return self.consumer._client  # the asyncio Consumer: callbacks run on its loop

    def _group_meta(self, *, on_loop: bool = True) -> tuple[int, str]:
        """On the consumer's loop (callbacks) ask the asyncio consumer; on the main
        thread go through the blocking facade."""
        assert self.consumer is not None
        meta = self._inner().group_metadata() if on_loop else self.consumer.group_metadata()
        return meta.generation_id, meta.member_id

    def _assignment(self, *, on_loop: bool = True) -> list[TopicPartition]:
        assert self.consumer is not None
        return self._inner().assignment() if on_loop else self.consumer.assignment()

    def _pending(self, tps: Any = None) -> dict[TopicPartition, int]:
        with self.lock:
            wanted = self.positions if tps is None else {tp: self.positions[tp] for tp in tps
                                                          if tp in self.positions}
            return {tp: off for tp, off in wanted.items() if off > self.committed.get(tp, -1)}

    def _committed_ok(self, offsets: dict[TopicPartition, int], generation: int, sent: int) -> None:
        with self.lock:
            for tp, off in sorted(offsets.items()):
                self.committed[tp] = max(off, self.committed.get(tp, -1))
        for tp, off in sorted(offsets.items()):
            self.log.write("committed", generation=generation, tp=[tp.topic, tp.partition],
                           offset=off, sent=sent)

    def _commit_failed(self, offsets: dict[TopicPartition, int], generation: int,
                       err: BaseException) -> None:
        self.log.write("commit_failed", generation=generation,
                       offsets={f"{tp.topic}-{tp.partition}": o for tp, o in sorted(offsets.items())},
                       error=f"{type(err).__name__}: {err}")

    def _note_generation(self, added: Any, *, on_loop: bool = True) -> None:
        generation, member_id = self._group_meta(on_loop=on_loop)
        assignment = self._assignment(on_loop=on_loop)
        with self.lock:
            self.owned = set(assignment)
        self.log.member_id = member_id
        self.generation = generation
        self.log.write("assigned", generation=generation, tps=_tps(added),
                       assignment=_tps(assignment))

    # -------------------------------------------------------------- callbacks (consumer loop)

    def on_assign(self, tps: list[TopicPartition]) -> None:
        self._note_generation(tps)

    async def on_revoke(self, tps: list[TopicPartition]) -> None:
        generation, _ = self._group_meta()
        offsets = self._pending(tps)
        if offsets:
            sent = self.log.now_ms()
            try:
                await self._inner().commit(offsets)
            except (MqError, OSError, TimeoutError) as err:
                self._commit_failed(offsets, generation, err)
            else:
                self._committed_ok(offsets, generation, sent)
        self._drop("revoked", tps, generation)

    def on_lost(self, tps: list[TopicPartition]) -> None:
        generation, _ = self._group_meta()
        self._drop("lost", tps, generation)

    def _drop(self, event: str, tps: list[TopicPartition], generation: int) -> None:
        with self.lock:
            for tp in tps:
                self.owned.discard(tp)
                self.positions.pop(tp, None)
                self.committed.pop(tp, None)
        self.log.write(event, generation=generation, tps=_tps(tps))

    # -------------------------------------------------------------- main loop

    def run(self) -> int:
        a = self.args
        self.consumer = Consumer(
            a.bootstrap, group_id=a.group, group_instance_id=a.instance_id or None,
            assignor=a.assignor, enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=a.session_timeout_ms, heartbeat_interval_ms=a.heartbeat_interval_ms,
            max_poll_interval_ms=a.max_poll_interval_ms, rebalance_timeout_ms=a.rebalance_timeout_ms,
            on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost,
            fetch_max_wait_ms=100, request_timeout_ms=a.request_timeout_ms, retry_backoff_ms=50,
            client_id=a.incarnation)
        if a.go_file and not self._wait_for_go(Path(a.go_file)):
            self.consumer.close()
            return 0
        self.log.write("started", instance_id=a.instance_id or None, assignor=a.assignor)
        try:
            self.consumer.subscribe([a.topic])
            while not self.stop.is_set():
                self.poll_once()
        finally:
            try:
                self.consumer.close()
            except (MqError, OSError, TimeoutError) as err:
                self.log.write("error", where="close", error=f"{type(err).__name__}: {err}")
            self.log.write("closed")
        return 0

    def _wait_for_go(self, go: Path) -> bool:
        """Prepared (imports done, consumer built), wait for the test's go: a restart
        then costs what a real one does, not Python's start-up on a loaded machine."""
        Path(f"{go}.ready").touch()
        while not go.exists():
            if self.stop.wait(0.01):
                return False
        return True

    def poll_once(self) -> None:
        assert self.consumer is not None
        try:
            records = self.consumer.poll(200)
        except (MqError, OSError, TimeoutError) as err:
            self.log.write("error", where="poll", error=f"{type(err).__name__}: {err}")
            time.sleep(0.05)  # back off before polling again
            return
        generation, _ = self._group_meta(on_loop=False)
        if generation != self.generation and generation >= 0:
            # A generation without an on_assign call (nothing added): still a new one.
            self._note_generation([], on_loop=False)
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            self.log.write("consumed", generation=generation, tp=[r.topic, r.partition],
                           offset=r.offset, value=r.value.decode(errors="replace") if r.value else "")
            with self.lock:
                # A record of a partition revoked meanwhile is recorded (the application
                # saw it) but never committed: that commit could move the new owner back.
                if tp in self.owned:
                    self.positions[tp] = r.offset + 1
        now = time.monotonic()
        if now - self.last_commit >= self.args.commit_interval_ms / 1000:
            offsets = self._pending()
            if offsets:
                self.last_commit = now
                sent = self.log.now_ms()
                try:
                    self.consumer.commit(offsets)
                except (MqError, OSError, TimeoutError) as err:
                    self._commit_failed(offsets, generation, err)
                else:
                    self._committed_ok(offsets, generation, sent)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.chaos.group_member")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--member", required=True, help="logical member name (checker's owner)")
    p.add_argument("--incarnation", required=True, help="this process's name (client id)")
    p.add_argument("--events", required=True)
    p.add_argument("--t0", type=float, required=True)
    p.add_argument("--instance-id", default="")
    p.add_argument("--assignor", default="range")
    p.add_argument("--session-timeout-ms", type=int, default=6000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=500)
    p.add_argument("--max-poll-interval-ms", type=int, default=30_000)
    p.add_argument("--rebalance-timeout-ms", type=int, default=10_000)
    p.add_argument("--request-timeout-ms", type=int, default=3_000)
    p.add_argument("--commit-interval-ms", type=int, default=100)
    p.add_argument("--go-file", default="", help="touch <go-file>.ready, then wait for <go-file>")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    log = EventLog(args.events, t0=args.t0, member=args.member, incarnation=args.incarnation)
    member = Member(args, log)
    def on_sigterm(*_: object) -> None:
        # Once: a second SIGTERM during interpreter shutdown (handlers restored to the
        # default by then) would kill the process mid-exit.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        member.stop.set()

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return member.run()
    except BaseException as err:  # noqa: BLE001 - written to the event log, then exit 1
        log.write("error", where="run", error=f"{type(err).__name__}: {err}",
                  traceback=traceback.format_exc())
        return 1
    finally:
        log.close()


if __name__ == "__main__":
    sys.exit(main())
