"""Failpoints: parsing, each action, counts, scopes, errors for bad strings, and the
process-wide registry that only the shell fills."""

from __future__ import annotations

import errno

import pytest

from mq.core import failpoints
from mq.core.errors import ErrorCode, MqError
from mq.core.failpoints import Failpoint, FailpointPanic, Failpoints, installed


def test_parse_every_action_and_round_trip() -> None:
    text = ("a=off;b=panic;c=error(KAFKA_STORAGE_ERROR);d=oserror(ENOSPC);e=3*oserror(EIO);"
            "f@orders-0=2*panic")
    points = Failpoints.parse(text)
    assert points.names == ("a", "b", "c", "d", "e", "f@orders-0")
    assert points.get("a") == Failpoint("off")
    assert points.get("b") == Failpoint("panic")
    assert points.get("c") == Failpoint("error", error_code=ErrorCode.KAFKA_STORAGE_ERROR)
    assert points.get("d") == Failpoint("oserror", errno=errno.ENOSPC)
    assert points.get("e") == Failpoint("oserror", errno=errno.EIO, count=3)
    assert points.get("f@orders-0") == Failpoint("panic", count=2)
    assert Failpoints.parse(str(points)).names == points.names
    assert str(Failpoints.parse(str(points))) == str(points)


def test_blank_entries_and_whitespace_are_ignored() -> None:
    points = Failpoints.parse(" ; x = 2 * error( NOT_LEADER ) ;; ")
    assert points.get("x") == Failpoint("error", error_code=ErrorCode.NOT_LEADER, count=2)
    assert Failpoints.parse("").names == ()


@pytest.mark.parametrize("text, fragment", [
    ("nonsense", "'nonsense': expected name=action"),
    ("=panic", "expected name=action"),
    ("a b=panic", "expected name=action"),
    ("a=explode", "unknown action 'explode'"),
    ("a=error(NO_SUCH_CODE)", "unknown error code 'NO_SUCH_CODE'"),
    ("a=error()", "expected error(NAME)"),
    ("a=error(KAFKA_STORAGE_ERROR", "expected error(NAME)"),
    ("a=oserror(ENOTREAL)", "unknown errno 'ENOTREAL'"),
    ("a=oserror(errorcode)", "unknown errno 'errorcode'"),
    ("a=0*panic", "count '0' must be a positive integer"),
    ("a=x*panic", "count 'x' must be a positive integer"),
    ("a=-1*panic", "count '-1'"),
    ("a=panic;a=off", "'a' is set twice"),
    ("a@=panic", "empty name or scope"),
    ("ok=off;bad=boom", "'bad=boom'"),
])
def test_malformed_strings_name_the_bad_part(text: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        Failpoints.parse(text)
    assert fragment in str(info.value)


def test_unset_and_off_are_no_ops() -> None:
    points = Failpoints.parse("quiet=off")
    for _ in range(3):
        points.hit("quiet")
        points.hit("not.set")
        Failpoints().hit("anything")
    assert points.fired == {"quiet": 3}


def test_error_and_oserror_raise_named_errors() -> None:
    points = Failpoints.parse("e=error(KAFKA_STORAGE_ERROR);o=oserror(ENOSPC);i=oserror(EIO)")
    with pytest.raises(MqError) as err:
        points.hit("e")
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR and "failpoint e" in err.value.message
    with pytest.raises(OSError) as os_err:
        points.hit("o")
    assert os_err.value.errno == errno.ENOSPC and "ENOSPC" in str(os_err.value)
    with pytest.raises(OSError) as os_err:
        points.hit("i")
    assert os_err.value.errno == errno.EIO


def test_panic_is_not_an_exception_and_calls_the_hook_first() -> None:
    calls: list[str] = []
    points = Failpoints.parse("p=panic", on_panic=calls.append)
    with pytest.raises(FailpointPanic) as info:
        points.hit("p")
    assert calls == ["p"] and info.value.name == "p"
    # Ordinary ``except Exception`` handling (e.g. the server's) cannot swallow it.
    assert not issubclass(FailpointPanic, Exception)


def test_count_fires_on_the_first_n_hits_only() -> None:
    points = Failpoints.parse("c=2*oserror(EIO)")
    for _ in range(2):
        with pytest.raises(OSError):
            points.hit("c")
    for _ in range(5):
        points.hit("c")
    assert points.fired == {"c": 2}


def test_scoped_entry_fires_only_for_its_scope_and_wins_over_the_plain_name() -> None:
    points = Failpoints.parse("w@orders-0=oserror(EIO);w=error(NOT_LEADER)")
    with pytest.raises(OSError):
        points.hit("w", "orders-0")
    with pytest.raises(MqError):
        points.hit("w", "orders-1")
    with pytest.raises(MqError):
        points.hit("w")
    only_scoped = Failpoints.parse("w@orders-0=panic")
    only_scoped.hit("w", "other-0")
    only_scoped.hit("w")
    assert only_scoped.fired == {}


def test_process_wide_registry_is_empty_until_installed() -> None:
    failpoints.hit("storage.before_fsync")  # nothing installed: a no-op
    assert failpoints.registry().names == ()
    with installed("storage.before_fsync=1*oserror(ENOSPC)") as points:
        assert failpoints.registry() is points
        with pytest.raises(OSError):
            failpoints.hit("storage.before_fsync")
        failpoints.hit("storage.before_fsync")
    assert failpoints.registry().names == ()
    failpoints.hit("storage.before_fsync")


def test_harness_failpoint_strings_parse() -> None:
    """The chaos harness's own strings (tests/chaos) are valid registry input."""
    assert Failpoints.parse("test.harness.noop=off").get("test.harness.noop") == Failpoint("off")
    assert Failpoints.parse("raft.before_persist=panic;storage.before_fsync=oserror(ENOSPC)").names == (
        "raft.before_persist", "storage.before_fsync")
