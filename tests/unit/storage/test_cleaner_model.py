"""A RuleBasedStateMachine of log compaction against a dict model (TESTING.md, unit tier).

The model keeps every record ever appended (offset → key, value, timestamp) and the
set of offsets still alive. A cleaning pass with first uncleanable offset ``U`` must
leave, below ``U``, exactly the latest record of each key (none when it is a
tombstone whose delete horizon — ``delete.retention.ms`` after the first pass that
kept it — has passed) and every keyless record; at and above ``U`` nothing changes.
Reading the log gives the alive records at their original offsets, in order, and a
read at a removed offset gives the next alive record.
"""

from __future__ import annotations

from cleaner_helpers import compact_config
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from storage_helpers import DIR, NOW, read_all

from mq.protocol.record_batch import build_batch, iter_batches, iter_records
from mq.storage import Log, MemoryFileIO
from mq.storage.cleaner import LogCleaning, cleanable_log

RETENTION = 200
LAG = 50

Entry = tuple[bytes | None, bytes | None, int]


class CleanerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.fs = MemoryFileIO()
        self.cfg = compact_config(segment_bytes=350, delete_retention_ms=RETENTION, min_compaction_lag_ms=LAG)
        self.log = Log.open(self.fs, DIR, self.cfg, now_ms=NOW)
        self.now = NOW
        self.hw = 0
        self.records: dict[int, Entry] = {}
        self.alive: set[int] = set()
        self.first_kept: dict[int, int] = {}  # tombstone offset → time of the first pass that kept it
        self.serial = 0

    # ---- rules

    @rule(recs=st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", None]), st.booleans()),
                        min_size=1, max_size=4))
    def append(self, recs: list[tuple[bytes | None, bool]]) -> None:
        entries = []
        for key, tombstone in recs:
            self.serial += 1
            entries.append((key, None if tombstone and key is not None else b"v%d" % self.serial))
        info = self.log.append_as_leader(
            build_batch([(k, v, (), self.now) for k, v in entries]), leader_epoch=1, now_ms=self.now
        )
        for i, (key, value) in enumerate(entries):
            self.records[info.first_offset + i] = (key, value, self.now)
            self.alive.add(info.first_offset + i)

    @rule()
    def roll(self) -> None:
        self.log.roll(self.now)

    @rule(dt=st.integers(0, 150))
    def advance_time(self, dt: int) -> None:
        self.now += dt

    @rule(frac=st.floats(0, 1))
    def advance_high_watermark(self, frac: float) -> None:
        self.hw += int(frac * (self.log.log_end_offset - self.hw))

    @rule(budget=st.sampled_from([1, 200, 1000, 1 << 30]))
    def clean(self, budget: int) -> None:
        log = self.log
        found = cleanable_log(log, high_watermark=self.hw, now_ms=self.now)
        bound = found.first_uncleanable_offset
        self._check_bound(found.first_dirty_offset, bound)
        cleaning = LogCleaning(log, found, now_ms=self.now)
        while not cleaning.step(budget, now_ms=self.now):
            assert cleaning.is_valid()
        self._model_clean(bound)

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = Log.open(self.fs, DIR, self.cfg, now_ms=self.now)

    @rule(frac=st.floats(0, 1))
    def read_at(self, frac: float) -> None:
        end = self.log.log_end_offset
        offset = int(frac * end)
        if offset >= end:
            return
        expected = min((o for o in self.alive if o >= offset), default=None)
        position, found = offset, None
        while found is None and position < end:
            data = self.log.read(position, max_bytes=1).records
            found = next((r for r in iter_records(data) if r.offset >= position), None)
            position = [h for _, h in iter_batches(data)][-1].next_offset
        assert (found.offset if found else None) == expected

    # ---- the model

    def _check_bound(self, first_dirty: int, bound: int) -> None:
        """The first uncleanable offset is the first segment base from the dirty start
        that is the active segment, reaches the high watermark or is too young."""
        segments = self.log.segments
        bases = [s.base_offset for s in segments]
        assert first_dirty in bases and bound in bases and first_dirty <= bound <= min(segments[-1].base_offset, max(self.hw, first_dirty))
        for i, segment in enumerate(segments):
            if first_dirty <= segment.base_offset < bound:
                assert bases[i + 1] <= self.hw and segment.max_timestamp <= self.now - LAG
            if segment.base_offset == bound and i + 1 < len(segments):
                assert bases[i + 1] > self.hw or segment.max_timestamp > self.now - LAG

    def _model_clean(self, bound: int) -> None:
        latest_below: dict[bytes, int] = {}
        for offset in sorted(self.records):
            key = self.records[offset][0]
            if offset < bound and key is not None:
                latest_below[key] = offset
        keep = {o for o in self.alive if o >= bound or self.records[o][0] is None}
        for offset in latest_below.values():
            if offset not in self.alive:
                continue  # a tombstone dropped earlier
            if self.records[offset][1] is None:
                first = self.first_kept.setdefault(offset, self.now)
                if first + RETENTION <= self.now:
                    continue
            keep.add(offset)
        self.alive = keep

    @invariant()
    def log_matches_model(self) -> None:
        got = [(r.offset, r.key, r.value, r.timestamp) for r in read_all(self.log)]
        assert got == [(o, *self.records[o]) for o in sorted(self.alive)]
        assert self.log.log_end_offset == (max(self.records) + 1 if self.records else 0)

    def teardown(self) -> None:
        assert self.log.verify() == []
        self.log.close()


TestCleanerMachine = CleanerMachine.TestCase
TestCleanerMachine.settings = settings(
    max_examples=30, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
