"""Consumer groups in a lab: members in threads, who owned what when, and the pause.

``GroupLab`` runs the members of one consumer group, each an asyncio ``Consumer`` on
its own event loop in its own thread, and records on one clock (``now_s``):

- the **assignment timeline**: every ``on_assign`` / ``on_revoke`` / ``on_lost`` a
  member's consumer calls, plus what ``assignment()`` says after each poll (so a
  client that skips a callback cannot fool the record). ``ownership()`` turns it into
  intervals (member, partition, from, to) to plot;
- **consumption**: when a poll returned records of which partition, and their offsets
  (``duplicates()`` counts a record read twice);
- what the lab did (``mark``), for vertical lines on the plots.

``pause(start_s, end_s)`` then measures a rebalance: per partition the longest gap
between two polls that returned its records (the stretch before ``start_s`` counts
from the last poll before it), the fraction of partitions whose longest gap stayed
under ``threshold_s`` ("kept consuming"), and the fraction whose ownership never
lapsed. ``PartitionLoad`` keeps every partition of a topic fed at a steady rate, so a
gap in consumption is the consumer's doing, not the producer's.

    with PartitionLoad(cluster.bootstrap, "clicks", partitions=12, rate_per_s=600):
        with GroupLab(cluster.bootstrap, ["clicks"], group_id="g", partitions={"clicks": 12}) as lab:
            lab.add("c1"); lab.wait_stable(1)
            joined = lab.mark("c2 joins"); lab.add("c2"); settled = lab.wait_stable(2)
            print(lab.pause(joined, settled + 0.5))
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Self

from mq.core.types import TopicPartition
from mq.lab.process import wait_until
from mq.lab.rebalance import Ownership, PauseStats, activity, is_balanced, longest_gaps, pause_stats

POLL_MS = 100


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _finish(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is still pending and close the loop, as ``asyncio.run`` does."""
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    with contextlib.suppress(BaseException):
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.close()


# ---------------------------------------------------------------- a member


class GroupMember:
    """One consumer of the group on its own event loop thread (``GroupLab.add`` makes it)."""

    def __init__(self, lab: GroupLab, name: str, options: Mapping[str, Any]) -> None:
        self.lab = lab
        self.name = name
        self.options = dict(options)
        self.error: BaseException | None = None
        self.generation: int | None = None
        self.member_id: str | None = None
        self.started_s = lab.now_s()
        self.ended_s: float | None = None
        self.how_ended: str | None = None  # "left", "closed" (static: no LeaveGroup), "crashed"
        self._owned: set[TopicPartition] = set()
        self._stop = threading.Event()
        self._crash = threading.Event()
        self._joined = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._consumer: Any = None
        self._thread = threading.Thread(target=self._thread_main, name=f"member-{name}", daemon=True)

    # -- lifecycle (caller's thread)

    def start(self) -> GroupMember:
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._crash.is_set()

    def assignment(self) -> list[TopicPartition]:
        """What this member owns, as its callbacks and polls told us."""
        with self.lab.lock:
            return sorted(self._owned)

    def stop(self, *, timeout_s: float = 30.0) -> None:
        """Close the consumer: commit, then LeaveGroup (a static member sends none)."""
        self._stop.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"member {self.name} did not close within {timeout_s:g} s")

    def crash(self) -> None:
        """Stop dead: no commit, no LeaveGroup, no heartbeat — a killed or hung process,
        as the coordinator sees it. Its connections stay open until ``reap``."""
        self._crash.set()
        self._thread.join(10)

    def reap(self) -> None:
        """Free what a crashed member still holds (its loop, its sockets)."""
        loop, consumer = self._loop, self._consumer
        if loop is None or loop.is_closed() or self._thread.is_alive():
            return
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in tasks:
            task.cancel()
        with contextlib.suppress(BaseException):
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        if consumer is not None:
            with contextlib.suppress(BaseException):
                loop.run_until_complete(asyncio.wait_for(consumer.cluster.close(), 5))
        _finish(loop)

    # -- the member's own thread

    def _thread_main(self) -> None:
        loop = self._loop = _new_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._main())
        except BaseException as error:  # noqa: BLE001 - reported to the lab, never hangs it
            self.error = error
            self.lab.note(self.name, "error", (), label=f"{type(error).__name__}: {error}")
        finally:
            if not self._crash.is_set():
                _finish(loop)

    async def _main(self) -> None:
        from mq.client import Consumer  # mq.lab may import clients; late to keep start-up light

        options = {"group_id": self.lab.group_id, **self.lab.defaults, **self.options,
                   "on_assign": self._on_assign, "on_revoke": self._on_revoke, "on_lost": self._on_lost}
        consumer = self._consumer = Consumer(self.lab.bootstrap, **options)
        await consumer.start()
        consumer.subscribe(self.lab.topics)
        self.lab.note(self.name, "start", ())
        while not self._stop.is_set():
            if self._crash.is_set():
                self._end("crashed")
                return  # the loop stops with the consumer's tasks pending: silence
            records = await consumer.poll(timeout_ms=POLL_MS)
            if self._crash.is_set():
                continue  # dead already: what this last poll returned was never processed
            now = self.lab.now_s()
            if records:
                self.lab.consumed(self.name, now, records)
            self._sync(consumer, now)
        static = self.options.get("group_instance_id") or self.lab.defaults.get("group_instance_id")
        await consumer.close()
        self._end("closed" if static else "left")

    def _end(self, how: str) -> None:
        now = self.lab.now_s()
        self.ended_s, self.how_ended = now, how
        with self.lab.lock:
            released = sorted(self._owned)
            self._owned.clear()
        self.lab.note(self.name, how, released, t_s=now)

    def _sync(self, consumer: Any, now: float) -> None:
        """Reconcile with ``assignment()`` and the group metadata after a poll."""
        with contextlib.suppress(Exception):
            meta = consumer.group_metadata()
            if meta.generation_id != self.generation:
                self.generation, self.member_id = meta.generation_id, meta.member_id
                self.lab.note(self.name, "generation", (), label=str(meta.generation_id), t_s=now)
        actual = set(consumer.assignment())
        with self.lab.lock:
            added, removed = sorted(actual - self._owned), sorted(self._owned - actual)
        if removed:
            self._take(removed, "revoke", now, label="seen after poll")
        if added:
            self._give(added, "assign", now, label="seen after poll")
        if (added or actual) and not self._joined.is_set():
            self._joined.set()

    def _give(self, tps: Sequence[TopicPartition], kind: str, now: float, label: str = "") -> None:
        with self.lab.lock:
            fresh = [tp for tp in tps if tp not in self._owned]
            self._owned.update(fresh)
        if fresh or kind == "assign":
            self.lab.note(self.name, kind, fresh, t_s=now, label=label)

    def _take(self, tps: Sequence[TopicPartition], kind: str, now: float, label: str = "") -> None:
        with self.lab.lock:
            gone = [tp for tp in tps if tp in self._owned]
            self._owned.difference_update(gone)
        self.lab.note(self.name, kind, gone, t_s=now, label=label)

    def _on_assign(self, tps: list[TopicPartition]) -> None:
        self._give(sorted(tps), "assign", self.lab.now_s())

    async def _on_revoke(self, tps: list[TopicPartition]) -> None:
        self._take(sorted(tps), "revoke", self.lab.now_s())
        if tps and self.lab.revoke_s > 0:  # the application flushing state before it lets go
            await asyncio.sleep(self.lab.revoke_s)

    def _on_lost(self, tps: list[TopicPartition]) -> None:
        self._take(sorted(tps), "lost", self.lab.now_s())

    def __repr__(self) -> str:
        state = self.how_ended or ("running" if self.alive else "starting")
        return f"GroupMember({self.name}, {state}, generation={self.generation}, owns={len(self._owned)})"


# ---------------------------------------------------------------- the group


class GroupLab:
    """The members of one consumer group and what they did (see the module docstring).

    ``defaults`` are Consumer keyword options for every member (``add`` can override
    them per member); ``partitions`` maps each subscribed topic to its partition count
    (for ``wait_stable`` and ``pause``). ``revoke_s``: every ``on_revoke`` that gives
    partitions up takes this long (an application flushing its state first)."""

    def __init__(self, bootstrap: str, topics: Sequence[str], *, group_id: str,
                 partitions: Mapping[str, int], origin: float | None = None, revoke_s: float = 0.0,
                 **defaults: Any) -> None:
        self.revoke_s = revoke_s
        self.bootstrap = bootstrap
        self.topics = list(topics)
        self.group_id = group_id
        self.partitions = dict(partitions)
        self.defaults = {"auto_offset_reset": "earliest", "session_timeout_ms": 3000,
                         "heartbeat_interval_ms": 250, **defaults}
        self.origin = time.monotonic() if origin is None else origin
        self.lock = threading.Lock()
        self.members: dict[str, GroupMember] = {}
        self.events: list[dict[str, Any]] = []  # assignment timeline, in time order
        self.marks: list[dict[str, Any]] = []  # what the lab did (plot as vertical lines)
        self._times: dict[TopicPartition, list[float]] = {}
        self._offsets: dict[TopicPartition, list[int]] = {}
        self._counts: dict[str, int] = {}

    def now_s(self) -> float:
        return time.monotonic() - self.origin

    @property
    def all_partitions(self) -> list[TopicPartition]:
        return sorted(TopicPartition(t, p) for t, n in self.partitions.items() for p in range(n))

    # -- recording (any thread)

    def note(self, member: str, kind: str, tps: Iterable[TopicPartition], *, label: str = "",
             t_s: float | None = None) -> None:
        t = self.now_s() if t_s is None else t_s
        with self.lock:
            self.events.append({"t_s": round(t, 4), "member": member, "kind": kind,
                                "partitions": sorted(tps), "label": label})

    def consumed(self, member: str, t_s: float, records: Sequence[Any]) -> None:
        by_tp: dict[TopicPartition, list[int]] = {}
        for record in records:
            by_tp.setdefault(TopicPartition(record.topic, record.partition), []).append(record.offset)
        with self.lock:
            for tp, offsets in by_tp.items():
                self._times.setdefault(tp, []).append(t_s)
                self._offsets.setdefault(tp, []).extend(offsets)
            self._counts[member] = self._counts.get(member, 0) + len(records)

    def mark(self, label: str, *, kind: str = "event") -> float:
        """Note what the lab did now; returns the time (for ``pause`` windows)."""
        t = self.now_s()
        with self.lock:
            self.marks.append({"t_s": round(t, 3), "kind": kind, "label": label})
        return t

    # -- members

    def add(self, name: str | None = None, **options: Any) -> GroupMember:
        """Start a member (Consumer keyword options override the lab's defaults)."""
        name = name or f"c{len(self.members) + 1}"
        if name in self.members and self.members[name].alive:
            raise ValueError(f"member {name} already runs")
        member = GroupMember(self, name, options)
        self.members[name] = member
        return member.start()

    def stop(self, name: str) -> None:
        """Close a member (LeaveGroup for a dynamic member: an immediate rebalance)."""
        self.members[name].stop()

    def crash(self, name: str) -> None:
        """Kill a member without leaving: the group only notices when its session times out."""
        self.members[name].crash()

    def live(self) -> list[GroupMember]:
        return [m for m in self.members.values() if m.alive]

    def assignment(self) -> dict[str, list[TopicPartition]]:
        """Current assignment of the live members, by name."""
        return {m.name: m.assignment() for m in self.live()}

    def counts(self) -> dict[str, int]:
        """Records each member has received so far."""
        with self.lock:
            return dict(self._counts)

    def check(self) -> None:
        """Raise the first error a member's thread died of."""
        for member in self.members.values():
            if member.error is not None:
                raise RuntimeError(f"member {member.name} failed: {member.error!r}") from member.error

    def wait_stable(self, members: int | None = None, *, timeout_s: float = 30.0) -> float:
        """Until ``members`` live members (default: all live ones) share every partition,
        one owner each, balanced within one; returns the time it first held."""
        def check() -> float | None:
            self.check()
            live = self.live()
            if members is not None and len(live) != members:
                return None
            return self.now_s() if is_balanced(self.assignment(), self.all_partitions) else None
        return wait_until(check, timeout_s=timeout_s, interval_s=0.02,
                          what=f"group {self.group_id} to settle with {members or 'its'} members")

    def wait_consumed(self, since_s: float, *, tps: Sequence[TopicPartition] | None = None,
                      timeout_s: float = 30.0) -> float:
        """Until every partition (or ``tps``) had records polled after ``since_s``."""
        wanted = tps if tps is not None else self.all_partitions

        def check() -> float | None:
            self.check()
            with self.lock:
                ok = all(self._times.get(tp) and self._times[tp][-1] > since_s for tp in wanted)
            return self.now_s() if ok else None
        return wait_until(check, timeout_s=timeout_s, interval_s=0.02,
                          what=f"every partition consumed after {since_s:.2f} s")

    # -- what happened

    def ownership(self, *, until_s: float | None = None) -> list[Ownership]:
        """Intervals of ownership from the assignment timeline (open ones end ``until_s``
        when given, else stay None)."""
        with self.lock:
            events = sorted(self.events, key=lambda e: e["t_s"])
        open_: dict[tuple[str, TopicPartition], float] = {}
        out: list[Ownership] = []
        for event in events:
            for tp in event["partitions"]:
                key = (event["member"], tp)
                if event["kind"] == "assign":
                    open_.setdefault(key, event["t_s"])
                elif key in open_:
                    out.append(Ownership(event["member"], tp, open_.pop(key), event["t_s"]))
        out += [Ownership(m, tp, start, until_s) for (m, tp), start in sorted(open_.items())]
        return sorted(out, key=lambda o: (o.tp, o.start_s))

    def times(self) -> dict[TopicPartition, list[float]]:
        with self.lock:
            return {tp: list(ts) for tp, ts in self._times.items()}

    def duplicates(self) -> int:
        """Records polled more than once (a partition re-read from its committed offset)."""
        with self.lock:
            return sum(len(o) - len(set(o)) for o in self._offsets.values())

    def consumed_offsets(self) -> dict[TopicPartition, set[int]]:
        with self.lock:
            return {tp: set(o) for tp, o in self._offsets.items()}

    def steady_gap(self, start_s: float, end_s: float) -> float:
        """The median over partitions of the longest gap in a quiet window: what
        "consuming" looks like here, to set ``pause``'s threshold from."""
        gaps = longest_gaps(self.times(), self.all_partitions, start_s, end_s)
        return statistics.median(gaps.values()) if gaps else 0.0

    def pause(self, start_s: float, end_s: float, *, threshold_s: float = 0.5) -> PauseStats:
        """How consumption fared over ``[start_s, end_s]`` (a rebalance): per partition
        the longest gap, how many stayed under ``threshold_s``, how many were owned by
        some member at every instant."""
        return pause_stats(self.times(), self.ownership(), self.all_partitions, start_s, end_s,
                           threshold_s=threshold_s)

    def consuming_series(self, start_s: float, end_s: float, *, window_s: float = 0.25,
                         step_s: float = 0.05) -> tuple[list[float], list[int]]:
        """Partitions consumed within the last ``window_s``, every ``step_s`` from
        ``start_s`` (times relative to it): for ``plot_consuming``."""
        return activity(self.times(), self.all_partitions, start_s, end_s, window_s=window_s,
                        step_s=step_s)

    def generations(self) -> list[dict[str, Any]]:
        """When each member reached which generation."""
        with self.lock:
            return [{"t_s": e["t_s"], "member": e["member"], "generation": int(e["label"])}
                    for e in self.events if e["kind"] == "generation"]

    # -- lifecycle

    def close(self) -> None:
        """Close every live member (all at once) and reap crashed ones."""
        for member in self.members.values():
            if member.alive:
                member._stop.set()
        errors = []
        for member in self.members.values():
            try:
                if member.alive or member._thread.is_alive():
                    member.stop()
                member.reap()
            except Exception as error:  # noqa: BLE001 - close the others regardless
                errors.append(error)
        if errors:
            raise errors[0]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------- a steady load


class PartitionLoad:
    """Produce to every partition of ``topic`` at ``rate_per_s`` in total, one record
    per partition per tick, from a thread with its own event loop (``value`` may be a
    function of the sequence number). ``keys=True`` sends key ``k<partition>``."""

    def __init__(self, bootstrap: str, topic: str, *, partitions: int, rate_per_s: float,
                 value: bytes | Callable[[int], bytes] = b"x" * 100, keys: bool = False,
                 **producer_options: Any) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.rate_per_s = rate_per_s
        self.value = value
        self.keys = keys
        self.options = {"linger_ms": 5, "acks": 1, **producer_options}
        self.sent = 0
        self.acked = 0
        self.failed = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._thread_main, name=f"load-{topic}", daemon=True)

    def start(self) -> PartitionLoad:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _thread_main(self) -> None:
        loop = _new_loop()
        try:
            loop.run_until_complete(self._main())
        except BaseException as error:  # noqa: BLE001 - reported, never hangs the lab
            self.error = error
        finally:
            _finish(loop)

    def _done(self, future: Any) -> None:
        try:
            failed = future.exception() is not None
        except BaseException:  # noqa: BLE001 - cancelled
            failed = True
        if failed:
            self.failed += 1
        else:
            self.acked += 1

    async def _main(self) -> None:
        from mq.client import Producer

        tick = max(0.005, self.partitions / self.rate_per_s)
        async with Producer(self.bootstrap, **self.options) as producer:
            await producer.partitions_for(self.topic)
            start = time.monotonic()
            ticks = 0
            while not self._stop.is_set():
                for p in range(self.partitions):
                    value = self.value(self.sent) if callable(self.value) else self.value
                    key = f"k{p}".encode() if self.keys else None
                    producer.send(self.topic, value, key=key, partition=p).add_done_callback(self._done)
                    self.sent += 1
                ticks += 1
                await asyncio.sleep(max(0.0, start + ticks * tick - time.monotonic()))
            await producer.flush()
