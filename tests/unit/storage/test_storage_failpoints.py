"""Storage failpoints: an injected ENOSPC/EIO before an fsync or an append is handled
exactly like a real one (KAFKA_STORAGE_ERROR, log offline, nothing acked after), and
a scoped failpoint leaves other partitions alone."""

from __future__ import annotations

import errno

import pytest
from storage_helpers import DIR, NOW, batch, config, open_log, read_all, values

from mq.core.errors import ErrorCode, MqError
from mq.core.failpoints import FailpointPanic, installed
from mq.storage import Log, MemoryFileIO


def test_fsync_enospc_takes_the_log_offline_and_nothing_is_acked_after() -> None:
    fs = MemoryFileIO()
    log = open_log(fs)
    log.append_as_leader(batch(2, tag="durable"), leader_epoch=0, now_ms=NOW)
    log.flush()
    log.append_as_leader(batch(2, tag="lost"), leader_epoch=0, now_ms=NOW)
    with installed("storage.before_fsync=oserror(ENOSPC)") as points:
        with pytest.raises(MqError) as err:
            log.flush()
        assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
        assert "ENOSPC" in err.value.message
        assert isinstance(err.value.__cause__, OSError) and err.value.__cause__.errno == errno.ENOSPC
        assert points.fired == {"storage.before_fsync": 1}
    assert log.is_offline and log.recovery_point == 2
    # Offline for good, failpoint gone or not: no append, read or flush is acknowledged.
    for action in (lambda: log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW),
                   lambda: log.flush(), lambda: log.read(0, max_bytes=1000)):
        with pytest.raises(MqError) as err:
            action()
        assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR and "offline" in err.value.message
    log.close()  # releases the files without fsyncing them
    fs.crash()
    reopened = open_log(fs)
    assert values(read_all(reopened)) == [b"durable0", b"durable1"]


def test_fsync_eio_once_then_the_next_log_works() -> None:
    with installed("storage.before_fsync=1*oserror(EIO)"):
        first = open_log()
        first.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
        with pytest.raises(MqError):
            first.flush()
        second = Log.open(MemoryFileIO(), "/data/other-0", config(), now_ms=NOW)
        second.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
        second.flush()
        assert second.recovery_point == 1 and not second.is_offline
    assert first.is_offline


def test_append_failpoint_appends_nothing() -> None:
    log = open_log()
    with installed("storage.before_append=oserror(EIO)"), pytest.raises(MqError) as err:
        log.append_as_follower(batch(2), now_ms=NOW)
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert log.is_offline and log.log_end_offset == 0


def test_error_action_is_a_named_error_and_the_log_stays_online() -> None:
    log = open_log()
    with installed("storage.before_append=1*error(NOT_LEADER)"):
        with pytest.raises(MqError) as err:
            log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
        assert err.value.code == ErrorCode.NOT_LEADER
        info = log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    assert info.first_offset == 0 and not log.is_offline


def test_scoped_failpoint_hits_only_its_partition() -> None:
    fs = MemoryFileIO()
    other = Log.open(fs, "/data/orders-1", config(), now_ms=NOW)
    target = open_log(fs)
    assert DIR.endswith("orders-0")
    with installed("storage.before_fsync@orders-0=oserror(EIO)"):
        for log in (other, target):
            log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
        other.flush()
        with pytest.raises(MqError):
            target.flush()
    assert not other.is_offline and other.recovery_point == 1
    assert target.is_offline


def test_panic_propagates_through_the_storage_error_handling() -> None:
    log = open_log()
    with installed("storage.before_append=panic"), pytest.raises(FailpointPanic):
        log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    assert log.log_end_offset == 0
