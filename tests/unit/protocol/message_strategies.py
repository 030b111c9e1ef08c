"""Hypothesis strategies for every message dataclass, generated from its type hints.

Generating from the hints (rather than by hand) means a field added to
``mq.protocol.messages`` is covered by the round-trip tests the moment it exists.
"""

from __future__ import annotations

import dataclasses
import typing

from hypothesis import strategies as st

from mq.protocol import (
    group_messages,
    inter_broker,
    messages,
    mirror_messages,
    producer_messages,
    share_messages,
    txn_messages,
)
from mq.protocol.messages import Records, Request, Response
from mq.protocol.reference import example_instance
from mq.protocol.schema import INT64_MAX, INT64_MIN, field_hints, optional_arg

INT64 = st.integers(INT64_MIN, INT64_MAX)


def strategy_for(hint: typing.Any) -> st.SearchStrategy[typing.Any]:
    if hint == Records:
        return st.binary(max_size=64)
    if hint is int:
        return INT64
    if hint is bool:
        return st.booleans()
    if hint is str:
        return st.text(max_size=12)
    if hint is bytes:
        return st.binary(max_size=12)
    if dataclasses.is_dataclass(hint):
        return dataclass_strategy(hint)
    inner = optional_arg(hint)
    if inner is not None:
        return st.none() | strategy_for(inner)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return st.lists(strategy_for(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(strategy_for(args[0]), strategy_for(args[1]), max_size=3)
    raise TypeError(f"no strategy for {hint!r}")


def dataclass_strategy(cls: type) -> st.SearchStrategy[typing.Any]:
    return st.builds(cls, **{f.name: strategy_for(hint) for f, hint in field_hints(cls)})


def _message_classes(base: type) -> list[type]:
    found = [
        obj for module in (messages, inter_broker, group_messages, mirror_messages, producer_messages, share_messages,
                           txn_messages)
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, base) and dataclasses.is_dataclass(obj)
    ]
    return sorted(found, key=lambda cls: cls.__name__)


REQUEST_CLASSES = _message_classes(Request)
RESPONSE_CLASSES = _message_classes(Response)


def sample_instance(cls: type) -> typing.Any:
    """A deterministic instance with every optional filled and every list non-empty,
    so a test that mutates it reaches every nested field."""
    return example_instance(cls)


def field_paths(cls: type, prefix: tuple = ()) -> list[tuple[tuple, typing.Any]]:
    """``(path, hint)`` for every field reachable in a ``sample_instance`` body; a path
    is the keys and list indices leading to the field."""
    out = []
    for f, hint in field_hints(cls):
        path = prefix + (f.name,)
        out.append((path, hint))
        target = optional_arg(hint) or hint
        if dataclasses.is_dataclass(target):
            out.extend(field_paths(target, path))
        elif typing.get_origin(target) is list and dataclasses.is_dataclass(
            typing.get_args(target)[0]
        ):
            out.extend(field_paths(typing.get_args(target)[0], path + (0,)))
    return out
