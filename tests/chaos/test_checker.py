"""The history checker and the replica check on hand-written inputs.

Each anomaly class gets a history that has exactly that anomaly (and is otherwise
clean), so a checker that missed or mislabelled it would fail here; a clean history
must pass ``assert_ok``. The replica check compares real segment files written by
``mq.storage.Log``.
"""

from __future__ import annotations

import os

import pytest

from mq.core.config import TopicConfig
from mq.protocol.record_batch import build_batch
from mq.storage import Log, OsFileIO

from .harness import ANOMALIES, History, Op, check, check_file, compare_replicas, read_history
from .harness.history import write_history
from .harness.processes import format_failpoints, parse_failpoints

NOW = 1_700_000_000_000


def send(value, partition=0, offset=None, *, t=0, end=None, status="ok", process=0):
    ops = [Op("invoke", "send", value, partition, None, t, process)]
    if status is not None:
        done = end if end is not None else t + 1
        ops.append(Op(status, "send", value, partition, offset if status == "ok" else None, done, process))
    return ops


def read(process, partition, *pairs, t=100):
    return [Op("ok", "read", v, partition, off, t + i, process) for i, (off, v) in enumerate(pairs)]


def clean_history():
    ops = send("a", 0, 0) + send("b", 0, 1) + send("c", 1, 0) + send("d", 0, 2, status="info")
    ops += read("drain", 0, (0, "a"), (1, "b"), (2, "d")) + read("drain", 1, (0, "c"))
    return ops


def only(result, *kinds):
    """Assert exactly ``kinds`` are non-zero among the anomalies; return their counts."""
    nonzero = {k: result.counts[k] for k in ANOMALIES if result.counts[k]}
    assert set(nonzero) == set(kinds), result.summary()
    return nonzero


def test_clean_history_passes_and_tallies():
    result = check(clean_history())
    result.assert_ok()
    assert result.attempted == 4 and result.acked == 3 and result.indeterminate == 1
    assert result.recovered == 1  # the info send "d" turned up: fine, it may have happened
    assert result.read_records == 4 and result.distinct_read == 4


def test_lost_acked_value_below_the_highest_read_offset():
    ops = send("a", 0, 0) + send("b", 0, 1) + send("c", 0, 2) + read("drain", 0, (0, "a"), (2, "c"))
    ops += [Op("ok", "read", "x", 0, 1, 200, "other")]  # a reader saw something else at 1
    result = check(ops, allowed_gaps={0: [(1, 2)]})
    assert only(result, "lost", "unexpected") == {"lost": 1, "unexpected": 1}
    assert "b acked at p0@1" in result.examples["lost"][0]
    with pytest.raises(AssertionError, match="lost=1"):
        result.assert_ok()


def test_unseen_acked_value_past_the_end_of_every_read():
    ops = send("a", 0, 0) + send("b", 0, 1) + send("c", 0, 2) + read("drain", 0, (0, "a"))
    result = check(ops)
    assert only(result, "unseen") == {"unseen": 2}
    assert result.lost_total == 2
    check(ops).assert_ok(allow_lost=True)


def test_duplicates_explained_by_a_fault_window_and_not():
    ops = send("a", 0, 1, t=10, end=50)  # in flight while the broker was killed
    ops += [Op("invoke", "nemesis", "kill n1", None, None, 20, "nemesis"),
            Op("ok", "nemesis", "kill n1", None, None, 40, "nemesis")]
    ops += send("b", 0, 2, t=60, end=61)  # completed after the fault: no excuse
    ops += read("drain", 0, (0, "a"), (1, "a"), (2, "b"), (3, "b"))
    result = check(ops)
    assert only(result, "duplicates", "unexplained_duplicates") == {
        "duplicates": 2, "unexplained_duplicates": 1}
    assert result.examples["unexplained_duplicates"][0].startswith("b read at p0@2, p0@3")
    with pytest.raises(AssertionError, match="unexplained_duplicates=1"):
        result.assert_ok(allow_fault_duplicates=True)
    explained = check(ops[:-4] + read("drain", 0, (0, "a"), (1, "a"), (2, "b")))
    explained.assert_ok(allow_fault_duplicates=True)
    with pytest.raises(AssertionError, match="duplicates=1"):
        explained.assert_ok()


def test_inconsistent_offsets_across_readers():
    ops = send("a", 0, 0) + send("b", 0, 1) + send("c", 0, status="info")
    ops += read("r1", 0, (0, "a"), (1, "b")) + read("r2", 0, (0, "a"), (1, "c"))
    result = check(ops)
    assert only(result, "inconsistent_offsets") == {"inconsistent_offsets": 1}  # b for r1, c for r2
    assert "p0@1 read as ['b', 'c']" in result.examples["inconsistent_offsets"][0]


def test_reorder_within_one_reader():
    ops = send("a", 0, 0) + send("b", 0, 1)
    ops += read("r1", 0, (0, "a"), (1, "b"), (0, "a"))  # went back without a new name
    result = check(ops)
    assert only(result, "reorders") == {"reorders": 1}
    # The same offsets read by two different readers are not a reorder.
    check(send("a", 0, 0) + read("r1", 0, (0, "a")) + read("r2", 0, (0, "a"))).assert_ok()


def test_skip_within_one_reader_unless_declared_as_a_gap():
    ops = send("a", 0, 0) + send("b", 0, 1, status="info") + send("c", 0, 3)
    ops += read("r1", 0, (0, "a"), (3, "c"))
    assert only(check(ops), "skips") == {"skips": 1}
    check(ops, allowed_gaps={0: [(1, 2), (2, 3)]}).assert_ok()
    assert only(check(ops, allowed_gaps={0: [(1, 2)]}), "skips")  # 2 not declared
    assert only(check(ops, allowed_gaps={1: [(1, 3)]}), "skips")  # wrong partition


def test_unexpected_value():
    ops = send("a", 0, 0) + read("drain", 0, (0, "a"), (1, "zzz"))
    result = check(ops)
    assert only(result, "unexpected") == {"unexpected": 1}
    assert "zzz" in result.examples["unexpected"][0]


def test_failed_send_that_was_read():
    ops = send("a", 0, 0) + send("b", status="fail") + read("drain", 0, (0, "a"), (1, "b"))
    result = check(ops)
    assert only(result, "failed_read") == {"failed_read": 1}
    assert result.failed == 1


def test_acked_at_one_offset_read_at_another():
    ops = send("a", 0, 0) + send("b", 0, 1) + read("drain", 0, (0, "b"), (1, "a"))
    result = check(ops)
    counts = only(result, "offset_mismatches")
    assert counts == {"offset_mismatches": 2}
    assert "a acked at p0@0 but read at p0@1" in result.examples["offset_mismatches"]
    result.assert_ok(allow_lost=True)


def test_pending_send_is_indeterminate_and_open_fault_window_counts():
    # A send with no completion (the client died) may or may not have happened.
    ops = send("a", 0, status=None, t=5) + [Op("invoke", "nemesis", "pause n1", None, None, 1, "nemesis")]
    ops += read("drain", 0, (0, "a"), (1, "a"))
    result = check(ops)
    assert result.indeterminate == 1 and result.faults == 1
    result.assert_ok(allow_fault_duplicates=True)  # the window never closed: still explains


def test_assert_ok_message_names_seed_history_and_examples(tmp_path):
    path = write_history(tmp_path / "h.jsonl", send("a", 0, 0) + send("b", 0, 1)
                         + read("drain", 0, (0, "a"), (2, "b")))
    result = check_file(path, seed=1234)
    with pytest.raises(AssertionError) as err:
        result.assert_ok()
    text = str(err.value)
    assert "MQ_SEED=1234" in text and str(path) in text
    assert "skips=1" in text and "offset_mismatches=1" in text and "b acked at p0@1" in text


def test_checker_on_a_large_history():
    ops = []
    for i in range(20_000):
        ops += send(f"v{i}", i % 4, i // 4, t=i)
    for p in range(4):
        ops += read("drain", p, *[(o, f"v{o * 4 + p}") for o in range(5_000)])
    result = check(ops)
    result.assert_ok()
    assert result.acked == 20_000 and result.read_records == 20_000


def test_history_round_trip_and_torn_last_line(tmp_path):
    with History(tmp_path / "h.jsonl") as history:
        history.record("invoke", "send", "1-0", partition=2, process=1)
        history.record("ok", "send", "1-0", partition=2, offset=7, process=1)
        history.nemesis_start("kill n1")
        history.nemesis_end("kill n1")
    with open(tmp_path / "h.jsonl", "a") as f:
        f.write('{"type":"ok","op":"re')  # the writer died mid-line
    ops = read_history(tmp_path / "h.jsonl")
    assert [(o.type, o.op, o.value, o.partition, o.offset, o.process) for o in ops] == [
        ("invoke", "send", "1-0", 2, None, 1), ("ok", "send", "1-0", 2, 7, 1),
        ("invoke", "nemesis", "kill n1", None, None, "nemesis"),
        ("ok", "nemesis", "kill n1", None, None, "nemesis")]
    assert ops == history.ops
    with pytest.raises(ValueError):
        Op("done", "send")


def test_failpoint_strings():
    text = format_failpoints({"raft.before_persist": "panic", "log.before_fsync": "error(ENOSPC)"})
    assert text == "log.before_fsync=error(ENOSPC);raft.before_persist=panic"
    assert parse_failpoints(text + ";") == {"raft.before_persist": "panic",
                                            "log.before_fsync": "error(ENOSPC)"}
    with pytest.raises(ValueError):
        format_failpoints({"a;b": "panic"})
    with pytest.raises(ValueError):
        parse_failpoints("nonsense")


# ----------------------------------------------------------------------- replicas


def write_replica(directory, batches, *, epoch=0):
    log = Log.open(OsFileIO(), str(directory), TopicConfig(), now_ms=NOW)
    for values in batches:
        log.append_as_leader(build_batch((None, v, (), NOW) for v in values),
                             leader_epoch=epoch, now_ms=NOW)
    log.flush()
    log.close()


def test_replica_check_identical_divergent_and_bounded(tmp_path):
    batches = [[b"a", b"b"], [b"c"], [b"d", b"e", b"f"]]
    for name in ("r1", "r2", "r3"):
        write_replica(tmp_path / name / "t-0", batches)
    write_replica(tmp_path / "r3" / "t-1", [[b"x"]])  # only on r3: not compared
    same = compare_replicas([tmp_path / "r1", tmp_path / "r2", tmp_path / "r3"])
    same.assert_ok()
    assert same.partitions == ("t-0",) and same.compared_batches == 3

    # r2 diverges in the last batch (different value), r3 lacks it entirely.
    write_replica(tmp_path / "r2b" / "t-0", [[b"a", b"b"], [b"c"], [b"d", b"E", b"f"]])
    write_replica(tmp_path / "r3b" / "t-0", [[b"a", b"b"], [b"c"]])
    diff = compare_replicas([tmp_path / "r1", tmp_path / "r2b", tmp_path / "r3b"])
    assert len(diff.divergences) == 2
    assert "batch 3-5" in diff.divergences[0] and "has 2 batches" in diff.divergences[1]
    with pytest.raises(AssertionError, match="2 replica divergences"):
        diff.assert_ok()
    # Below the high watermark 3 they agree byte for byte.
    compare_replicas([tmp_path / "r1", tmp_path / "r2b", tmp_path / "r3b"], below={"t-0": 3}).assert_ok()

    # A different leader epoch on the same records is a different batch.
    write_replica(tmp_path / "r4" / "t-0", batches, epoch=1)
    assert compare_replicas([tmp_path / "r1", tmp_path / "r4"], below=2).divergences


def test_replica_check_stops_at_a_corrupt_batch(tmp_path):
    write_replica(tmp_path / "r1" / "t-0", [[b"a"], [b"b"], [b"c"]])
    write_replica(tmp_path / "r2" / "t-0", [[b"a"], [b"b"], [b"c"]])
    segment = os.path.join(tmp_path, "r2", "t-0", "00000000000000000000.log")
    with open(segment, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)[0]
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last ^ 0xFF]))  # flip the bits of the last batch's last byte
    result = compare_replicas([tmp_path / "r1", tmp_path / "r2"])
    assert result.divergences == (
        f"t-0: {tmp_path / 'r2'} has 2 batches below None, {tmp_path / 'r1'} has 3",)
