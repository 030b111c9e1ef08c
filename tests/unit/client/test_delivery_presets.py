"""Delivery presets (issue 14, item 4): each sets its documented combination, a setting
left at its default takes the preset's value, a contradicting explicit one is refused."""

from __future__ import annotations

import pytest

from mq.client.delivery import (
    CONSUMER_PRESETS,
    PRODUCER_PRESETS,
    Delivery,
    consumer_settings,
    producer_settings,
)
from mq.core.errors import ErrorCode, MqError

PRODUCER_DEFAULTS = {"acks": 1, "retries": 2**31 - 1, "enable_idempotence": None}
CONSUMER_DEFAULTS = {"enable_auto_commit": True, "isolation_level": "read_uncommitted"}


def test_at_most_once_producer_never_retries_and_is_not_idempotent():
    got = producer_settings("at-most-once", dict(PRODUCER_DEFAULTS), PRODUCER_DEFAULTS, transactional_id=None)
    assert (got["acks"], got["retries"], got["enable_idempotence"]) == (1, 0, False)


def test_at_least_once_producer_is_idempotent_with_acks_all():
    got = producer_settings("at-least-once", dict(PRODUCER_DEFAULTS), PRODUCER_DEFAULTS, transactional_id=None)
    assert (got["acks"], got["retries"], got["enable_idempotence"]) == ("all", 2**31 - 1, True)


def test_exactly_once_needs_a_transactional_id():
    with pytest.raises(MqError) as err:
        producer_settings("exactly-once", dict(PRODUCER_DEFAULTS), PRODUCER_DEFAULTS, transactional_id=None)
    assert err.value.code == ErrorCode.INVALID_CONFIG and "transactional_id" in err.value.message
    got = producer_settings("exactly-once", dict(PRODUCER_DEFAULTS), PRODUCER_DEFAULTS, transactional_id="t-1")
    assert got["acks"] == "all" and got["enable_idempotence"] is True


def test_an_explicit_setting_that_agrees_is_kept_one_that_contradicts_is_refused():
    given = {**PRODUCER_DEFAULTS, "acks": -1}
    assert producer_settings("at-least-once", given, PRODUCER_DEFAULTS, transactional_id=None)["acks"] == "all"
    with pytest.raises(MqError) as err:
        producer_settings("at-most-once", {**PRODUCER_DEFAULTS, "acks": "all"}, PRODUCER_DEFAULTS,
                          transactional_id=None)
    assert "acks" in err.value.message and "at-most-once" in err.value.message
    with pytest.raises(MqError):
        consumer_settings("exactly-once", {**CONSUMER_DEFAULTS, "isolation_level": "read_uncommitted",
                                           "enable_auto_commit": True}, {**CONSUMER_DEFAULTS,
                                                                         "enable_auto_commit": False})


def test_consumer_presets():
    assert consumer_settings("at-most-once", dict(CONSUMER_DEFAULTS), CONSUMER_DEFAULTS)["commit_on_poll"] is True
    eos = consumer_settings("exactly-once", dict(CONSUMER_DEFAULTS), CONSUMER_DEFAULTS)
    assert (eos["isolation_level"], eos["enable_auto_commit"]) == ("read_committed", False)


def test_an_unknown_preset_names_the_choices():
    with pytest.raises(MqError) as err:
        producer_settings("twice", dict(PRODUCER_DEFAULTS), PRODUCER_DEFAULTS, transactional_id=None)
    assert "at-most-once, at-least-once, exactly-once" in err.value.message


def test_every_preset_is_defined_for_both_clients():
    assert set(PRODUCER_PRESETS) == set(CONSUMER_PRESETS) == set(Delivery)
