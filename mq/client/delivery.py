"""Delivery presets: ``delivery="at-most-once" | "at-least-once" | "exactly-once"`` on the
producer and the consumer set the documented combination of settings (issue 14;
docs/explanation/delivery-semantics.md tells what each costs).

| preset | producer | consumer |
|---|---|---|
| at-most-once | ``acks=1``, ``retries=0``, not idempotent: a lost answer is a lost record, never a second copy | commits what ``poll`` returns before returning it (a crash while processing skips those records) |
| at-least-once | ``acks="all"``, retries, idempotent: no duplicate from a retry | auto-commit at the next ``poll`` of what the previous one returned: a crash re-reads, never skips |
| exactly-once | the same plus a ``transactional_id``: writes and the group's offsets commit together | ``isolation_level="read_committed"``, no auto-commit (offsets go through ``send_offsets_to_transaction``) |

A setting passed explicitly that contradicts the preset is an ``INVALID_CONFIG`` naming
both, never silently overridden; a setting left at its default takes the preset's value.
Sans-IO: a pure function of the arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from mq.core.errors import ErrorCode, MqError


class Delivery(StrEnum):
    AT_MOST_ONCE = "at-most-once"
    AT_LEAST_ONCE = "at-least-once"
    EXACTLY_ONCE = "exactly-once"


PRODUCER_PRESETS: Mapping[Delivery, Mapping[str, Any]] = {
    Delivery.AT_MOST_ONCE: {"acks": 1, "retries": 0, "enable_idempotence": False},
    Delivery.AT_LEAST_ONCE: {"acks": "all", "enable_idempotence": True},
    Delivery.EXACTLY_ONCE: {"acks": "all", "enable_idempotence": True},
}
CONSUMER_PRESETS: Mapping[Delivery, Mapping[str, Any]] = {
    Delivery.AT_MOST_ONCE: {"enable_auto_commit": False, "commit_on_poll": True},
    Delivery.AT_LEAST_ONCE: {"enable_auto_commit": True, "isolation_level": "read_uncommitted"},
    Delivery.EXACTLY_ONCE: {"enable_auto_commit": False, "isolation_level": "read_committed"},
}


def parse_delivery(value: str | Delivery) -> Delivery:
    try:
        return Delivery(value)
    except ValueError:
        raise MqError(ErrorCode.INVALID_CONFIG,
                      f"delivery must be one of {', '.join(d.value for d in Delivery)}, not {value!r}") from None


def _equal(name: str, a: Any, b: Any) -> bool:
    if name == "acks":  # "all" is also -1; 1 is also "1"
        a, b = ("all" if str(a) in ("all", "-1") else str(a)), ("all" if str(b) in ("all", "-1") else str(b))
    return a == b


def resolve(delivery: str | Delivery, preset: Mapping[Delivery, Mapping[str, Any]],
            given: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The preset's settings over ``given`` (the values passed, by name), where each one
    is either its default (``defaults``) or already what the preset wants."""
    chosen = parse_delivery(delivery)
    out = dict(given)
    for name, wanted in preset[chosen].items():
        value = given.get(name, defaults.get(name))
        if name in defaults and not _equal(name, value, defaults[name]) and not _equal(name, value, wanted):
            raise MqError(ErrorCode.INVALID_CONFIG,
                          f"delivery={chosen.value!r} sets {name}={wanted!r}, which conflicts with "
                          f"{name}={value!r}: drop one of them")
        out[name] = wanted
    return out


def producer_settings(delivery: str | Delivery, given: Mapping[str, Any], defaults: Mapping[str, Any],
                      *, transactional_id: str | None) -> dict[str, Any]:
    settings = resolve(delivery, PRODUCER_PRESETS, given, defaults)
    if parse_delivery(delivery) is Delivery.EXACTLY_ONCE and not transactional_id:
        raise MqError(ErrorCode.INVALID_CONFIG,
                      "delivery='exactly-once' needs a transactional_id (one per pipeline instance, "
                      "stable across its restarts): pass transactional_id=NAME")
    return settings


def consumer_settings(delivery: str | Delivery, given: Mapping[str, Any],
                      defaults: Mapping[str, Any]) -> dict[str, Any]:
    return resolve(delivery, CONSUMER_PRESETS, given, defaults)


__all__ = ["CONSUMER_PRESETS", "PRODUCER_PRESETS", "Delivery", "consumer_settings", "parse_delivery",
           "producer_settings", "resolve"]
