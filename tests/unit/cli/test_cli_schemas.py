"""The JSON output schemas: valid JSON Schemas, the documents built without a broker match
them, the reference page is generated from them, and tables share one style."""

from __future__ import annotations

import jsonschema
import pytest

from mq.cli import schemas
from mq.cli.group import describe_doc
from mq.cli.group_reset import plan_doc
from mq.cli.output import cell, header, table
from mq.cli.reference import JSON_PAGE
from mq.client.group_admin import GroupDescription, MemberDescription, PartitionLag
from mq.client.internals.offset_reset import PlannedReset
from mq.core.types import TopicPartition

T0, T1 = TopicPartition("clicks", 0), TopicPartition("clicks", 1)


def validate(prefix: str, doc) -> None:
    jsonschema.Draft202012Validator(schemas.schema_of(prefix).schema).validate(doc)


@pytest.mark.parametrize("output", schemas.OUTPUTS, ids=lambda o: o.command)
def test_every_schema_is_a_valid_json_schema(output):
    jsonschema.Draft202012Validator.check_schema(output.schema)


def test_reference_page_is_generated():
    """docs/reference/json-output.md: regenerate with `python -m mq.cli.reference --write`."""
    assert JSON_PAGE.read_text(encoding="utf-8") == schemas.render()


def test_group_documents_match_their_schemas():
    description = GroupDescription("g", "Stable", "range", 4, 1, [
        MemberDescription("m-1", None, "c1", "/10.0.0.1", [T0, T1]),
        MemberDescription("m-2", "inst-2", "c2", "/10.0.0.2", [])])
    lags = [PartitionLag(T0, "m-1", 40, 100, 60, 12.345), PartitionLag(T1, "m-1", None, 7, None, None)]
    validate("mq group describe", describe_doc("g", description, lags))
    validate("mq group describe", describe_doc("g", None, [PartitionLag(T0, None, 3, 9, 6, 1.5)]))
    validate("mq group reset-offsets", plan_doc("g", [PlannedReset(T0, None, 0), PlannedReset(T1, 9, 4, True)],
                                                executed=False))


def test_schemas_are_strict():
    doc = describe_doc("g", None, [])
    validate("mq group describe", doc)
    with pytest.raises(jsonschema.ValidationError, match="Additional properties"):
        validate("mq group describe", {**doc, "surprise": 1})
    with pytest.raises(jsonschema.ValidationError, match="'state' is a required property"):
        validate("mq group describe", {k: v for k, v in doc.items() if k != "state"})
    record = {"topic": "t", "partition": 0, "offset": 1, "key": {"base64": "/w=="}, "value": None,
              "timestamp": 1, "headers": [["h", "v"], ["h", {"base64": "AA=="}]]}
    validate("mq consume", record)
    with pytest.raises(jsonschema.ValidationError):
        validate("mq consume", {**record, "headers": [["h"]]})


def test_one_table_style():
    assert header("log end offset") == "LOG-END-OFFSET" == header("LOG-END-OFFSET")
    assert [c.header for c in table("topic", "replication factor").columns] == ["TOPIC", "REPLICATION-FACTOR"]
    assert [cell(v) for v in (None, "", [], [1, 2], True, False, 0, 1.25, "x")] == \
        ["-", "-", "-", "1,2", "yes", "no", "0", "1.2", "x"]
