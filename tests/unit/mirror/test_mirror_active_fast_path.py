"""The active-active copy path's batch-level fast path decides, stamps, admits, syncs and
encodes exactly what the record-by-record path does: each batch-level piece is checked
against its per-record reference on random input (``Stamper.stamp_columns`` against
``Stamper.copy``, ``DedupeIndex.admit_run`` against ``admit_origin``,
``OffsetSyncEmitter.on_written_run`` against ``on_written``, ``build_batch_columns`` and
``AppendedHeaders.build`` against ``build_batch``), and ``ActiveCopier._decide`` on fetches mixing local records,
records with provenance and duplicates against the per-record loop it replaced."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.active import ActiveCopier, RemotePartition
from mirror.dedupe import DedupeIndex
from mirror.remote import PROVENANCE_HEADERS, Provenance, Route, Stamper, encode_provenance
from mirror.translation import OffsetSyncEmitter
from mq.core.types import CompressionType, TopicPartition
from mq.protocol.batch_builder import build_batch, build_batch_columns
from mq.protocol.record_batch import decode_records

TP = TopicPartition("orders", 2)
header_lists = st.lists(st.tuples(st.sampled_from(["a", "trace", *PROVENANCE_HEADERS]), st.binary(max_size=8)),
                        max_size=3).map(tuple)


@settings(max_examples=200)
@given(st.lists(header_lists, min_size=1, max_size=20), st.integers(0, 2**40), st.integers(-(2**40), 2**40),
       st.sampled_from([("east", "west"), ("east", "east")]), st.booleans())
def test_stamp_columns_is_copy_for_every_record_or_declines(headers: list, base: int, ts: int,
                                                            regions: tuple[str, str], forward: bool) -> None:
    stamper = Stamper(Route(*regions, forward), 2)
    offsets = range(base, base + len(headers))
    timestamps = tuple(ts + 3 * k for k in range(len(headers)))
    stamped = stamper.stamp_columns(offsets, timestamps, tuple(headers))
    each = [stamper.copy(h, o, t) for h, o, t in zip(headers, offsets, timestamps, strict=True)]
    carries = any(name in PROVENANCE_HEADERS for h in headers for name, _ in h)
    if stamped is None:  # declined: only when some record needs the per-record rules
        assert carries or regions[0] == regions[1]
        return
    assert not carries
    assert list(stamped) == [out for _, _, _, out in each]
    assert all(bool(d) and origin == ("east", 2) and oo == o for (d, origin, oo, _), o in zip(each, offsets))


@settings(max_examples=300)
@given(st.integers(-1, 60), st.lists(st.integers(0, 5), max_size=30), st.integers(0, 40))
def test_admit_run_admits_what_admit_origin_admits(high: int, steps: list[int], start: int) -> None:
    offsets, o = [], start
    for step in steps:
        o += step + 1
        offsets.append(o)
    key = ("east", 2)
    seed = {key: high} if high >= 0 else {}
    one, run = DedupeIndex(seed), DedupeIndex(seed)
    admitted = [o for o in offsets if one.admit_origin(key, o)]
    first = run.admit_run(key, offsets)
    assert offsets[first:] == admitted and run.high == one.high and run.duplicates == one.duplicates


def test_on_written_run_emits_the_syncs_on_written_emits() -> None:
    for seed in range(400):
        rnd = random.Random(seed)
        lag, interval = rnd.randint(1, 150), rnd.choice([0, 5, 1000])
        per_record = OffsetSyncEmitter(TP, offset_lag_max=lag, interval_ms=interval)
        per_run = OffsetSyncEmitter(TP, offset_lag_max=lag, interval_ms=interval)
        source, target, now = rnd.randint(0, 5), rnd.randint(0, 5), 0
        for _ in range(rnd.randint(1, 8)):
            n = rnd.randint(1, 400)
            now += rnd.randint(0, 10)
            if rnd.random() < 0.2:
                per_record.reset()
                per_run.reset()
            want = per_record.on_written([(source + k, target + k) for k in range(n)], now)
            assert per_run.on_written_run(source, target, n, now) == want, seed
            assert vars(per_run) == vars(per_record), seed
            source += n + rnd.choice([0, 0, 1, 5])
            target += n + rnd.choice([0, 0, 2])
    with pytest.raises(ValueError, match="in order"):
        per_run.on_written_run(source - 10, target + 5, 3, now)


records = st.lists(st.tuples(st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=300),
                             header_lists, st.integers(-(2**40), 2**40)), min_size=1, max_size=40)


@settings(max_examples=200)
@given(records, st.sampled_from([CompressionType.NONE, CompressionType.LZ4, CompressionType.GZIP]))
def test_build_batch_columns_is_build_batch(recs: list, codec: CompressionType) -> None:
    keys, values, headers, timestamps = (tuple(c) for c in zip(*recs, strict=True))
    batch = build_batch_columns(timestamps, keys, values, headers, compression=codec)
    want = build_batch(recs, compression=codec)
    if codec is CompressionType.NONE:
        assert batch == want
    assert decode_records(batch) == decode_records(want)
    same = build_batch_columns((7,) * len(recs), keys, values, headers)
    assert [r.timestamp for r in decode_records(same)] == [7] * len(recs)


@settings(max_examples=200)
@given(records, st.sampled_from([CompressionType.NONE, CompressionType.LZ4]), st.booleans(),
       st.integers(0, 2**62))
def test_appended_headers_build_what_build_batch_builds(recs: list, codec: CompressionType, own: bool,
                                                        base: int) -> None:
    stamper = Stamper(Route("east", "west"), 2)
    keys, values, headers, timestamps = (tuple(c) for c in zip(*recs, strict=True))
    # what takes the fast path: headers of the record's own, none of them provenance
    headers = tuple(tuple(h for h in hs if h[0] not in PROVENANCE_HEADERS) if own else () for hs in headers)
    assert stamper.takes_fast_path(headers)
    offsets = range(base, base + len(recs))
    batch = stamper.appended.build(timestamps, keys, values, headers, offsets, timestamps, compression=codec)
    stamped = [stamper.copy(h, o, t)[3] for h, o, t in zip(headers, offsets, timestamps, strict=True)]
    want = build_batch([(k, v, h, t) for k, v, h, t in zip(keys, values, stamped, timestamps, strict=True)],
                       compression=codec)
    if codec is CompressionType.NONE:
        assert batch == want  # byte for byte: the templates are msgpack's own encoding
    assert decode_records(batch) == decode_records(want)
    with pytest.raises(ValueError, match="one entry per record"):
        stamper.appended.build(timestamps, keys, values, headers, offsets[:-1], timestamps)


def test_build_batch_columns_refuses_ragged_or_empty_columns() -> None:
    with pytest.raises(ValueError, match="one entry per record"):
        build_batch_columns((1, 2), (None,), (b"a", b"b"), ((), ()))
    with pytest.raises(ValueError, match="at least one record"):
        build_batch_columns((), (), (), ())
    with pytest.raises(ValueError, match="64 bits"):
        build_batch_columns((1 << 63,), (None,), (b"a",), ((),))


# ------------------------------------------------------------------ _decide against the per-record loop


class _Raw:
    def __init__(self, records: bytes) -> None:
        self.records = records


def _reference(rp: RemotePartition, fetched: list[tuple[int, int, bytes | None, bytes | None, tuple]],
               offset: int) -> list[tuple]:
    """The per-record loop ``_decide`` had before the fast path (forward_copy + admit_origin)."""
    out = []
    for o, ts, key, value, headers in fetched:
        if o < offset:
            continue
        decision, origin, origin_offset, stamped = rp.stamper.copy(headers, o, ts)
        if not decision or origin is None:
            rp.not_forwarded += 1
        elif not rp.index.admit_origin(origin, origin_offset):
            rp.duplicates += 1
        else:
            out.append((o, ts, key, value, stamped))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_decide_writes_what_the_per_record_path_writes(seed: int) -> None:
    rnd = random.Random(seed)
    forward = rnd.random() < 0.5
    route = Route("east", "west", forward)
    south = encode_provenance(Provenance("south", 1, 5, 9, ("south", "east")))
    back = encode_provenance(Provenance("west", 0, 7, 9, ("west", "east")))
    batches, fetched, offset = [], [], rnd.randint(0, 50)
    first_offset = offset
    for _ in range(rnd.randint(1, 6)):
        n = rnd.randint(1, 30)
        kind = rnd.choice(["local", "local", "headers", "provenance", "mixed"])
        recs = []
        for k in range(n):
            headers: tuple = ()
            if kind == "headers" or (kind == "mixed" and rnd.random() < 0.3):
                headers = (("trace", b"%d" % k),)
            if kind == "provenance" or (kind == "mixed" and rnd.random() < 0.3):
                headers = rnd.choice([south, back])
            recs.append((offset + k, 1_000 + rnd.randint(0, 50), rnd.choice([None, b"k"]), b"v%d" % k, headers))
        batch = build_batch([(key, value, h, ts) for _, ts, key, value, h in recs], base_offset=offset)
        batches.append(batch)
        fetched += recs
        offset += n
    start = rnd.randint(first_offset, offset - 1)  # a fetch returns the batch that holds it
    high = rnd.randint(first_offset - 1, offset)  # what an earlier run wrote (a restart)
    fast, slow = (RemotePartition(TP, "east.orders", route, offset_lag_max=100, offset_sync_interval_ms=1000)
                  for _ in range(2))
    for rp in (fast, slow):
        if high >= 0:
            rp.index = DedupeIndex({("east", TP.partition): high})
    got = ActiveCopier._decide(None, fast, _Raw(b"".join(batches)), start)  # type: ignore[arg-type]
    want = _reference(slow, fetched, start)
    assert got is not None and got.next_offset == offset
    assert got.records == offset - start
    headers = got.headers if got.stamped else fast.stamper.appended.columns(got.headers, got.offsets, got.timestamps)
    assert got.stamped == any(name in PROVENANCE_HEADERS for r in fetched if r[0] >= start for name, _ in r[4])
    assert list(zip(got.offsets, got.timestamps, got.keys, got.values, headers, strict=True)) == want
    assert (fast.duplicates, fast.not_forwarded, fast.index.high) == (slow.duplicates, slow.not_forwarded,
                                                                      slow.index.high)


# ------------------------------------------------------------------ _write: requests of several batches


class _Producer:
    compression = CompressionType.NONE

    def __init__(self) -> None:
        self.requests: list[tuple[bytes, int]] = []
        self.end = 0

    async def send_built_batch(self, topic: str, partition: int, batch: bytes, count: int, size: int) -> int:
        base, self.end = self.end, self.end + count
        self.requests.append((batch, count))
        return base


class _Clock:
    def wall_ms(self) -> int:
        return 2_000

    def monotonic_ms(self) -> int:
        return 0


class _Metrics:
    def observe_latencies(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("seed", range(10))
async def test_writes_are_requests_of_batches_that_fit_the_remote_topic(seed: int) -> None:
    """Every record once, in order, stamped; each request at most about ``write_max_bytes``;
    each batch within the remote topic's ``max.message.bytes`` even when records carry large
    headers of their own (the size estimate leaves those out: such a batch is halved)."""
    rnd = random.Random(seed)
    route = Route("east", "west", False)
    rp = RemotePartition(TP, "east.orders", route, offset_lag_max=100, offset_sync_interval_ms=1000)
    rp.max_message_bytes = 20_000
    recs = []
    for o in range(rnd.randint(200, 600)):
        headers = (("trace", rnd.randbytes(rnd.choice([0, 0, 3_000]))),) if rnd.random() < 0.1 else ()
        recs.append((o, 1_000 + o, None, rnd.randbytes(rnd.randint(1, 300)), headers))
    raw = build_batch([(k, v, h, ts) for _, ts, k, v, h in recs], base_offset=0)
    fetched = ActiveCopier._decide(None, rp, _Raw(raw), 0)  # type: ignore[arg-type]
    copier = object.__new__(ActiveCopier)
    copier.producer, copier.clock, copier.metrics = _Producer(), _Clock(), _Metrics()
    copier.write_max_bytes, copier.batch_max_bytes = 60_000, 16_000
    synced: list = []
    copier._emit = synced.extend  # type: ignore[method-assign]
    await copier._write(rp, fetched)
    written = []
    for request, count in copier.producer.requests:
        records, pos = [], 0
        while pos < len(request):
            size = int.from_bytes(request[pos + 8:pos + 12], "big") + 12
            assert size <= rp.max_message_bytes or len(decode_records(request[pos:pos + size])) == 1
            records += decode_records(request[pos:pos + size])
            pos += size
        assert len(records) == count and sum(len(r.value) + 200 for r in records) <= 60_000 + 3_400
        written += records
    assert [(r.timestamp, r.value) for r in written] == [(ts, v) for _, ts, _, v, _ in recs]
    assert all(dict(r.headers)["mq.origin.offset"] == b"%d" % o for r, (o, *_) in zip(written, recs, strict=True))
    assert len(copier.producer.requests) > 1 and any(request.count(b"mq.hops") and len(request) > 20_000
                                                     for request, _ in copier.producer.requests)
    assert rp.records_mirrored == len(recs)
