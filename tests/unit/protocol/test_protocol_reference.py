"""The committed reference pages are exactly what the code renders."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mq.protocol.batch_format import BatchHeader
from mq.protocol.apis import ALL_REQUESTS, INTER_BROKER_REQUESTS
from mq.protocol.messages import ErrorResponse
from mq.protocol.reference import (
    BATCH_FIELD_NOTES,
    RECORD_BATCH_PATH,
    WIRE_PROTOCOL_PATH,
    render_record_batch,
    render_wire_protocol,
    write_docs,
)

ROOT = Path(__file__).resolve().parents[3]
REGENERATE = "regenerate with: python -m mq.protocol.reference"


@pytest.mark.parametrize("relative,render", [
    (WIRE_PROTOCOL_PATH, render_wire_protocol), (RECORD_BATCH_PATH, render_record_batch),
])
def test_committed_reference_matches_the_code(relative, render) -> None:
    path = ROOT / relative
    assert path.exists(), f"{relative} is missing; {REGENERATE}"
    assert path.read_text() == render(), f"{relative} is out of date; {REGENERATE}"


def test_every_message_and_batch_field_is_documented() -> None:
    page = render_wire_protocol()
    for request in ALL_REQUESTS.values():
        for cls in (request, request.RESPONSE):
            assert f"### {cls.__name__}\n" in page
            for f in dataclasses.fields(cls):
                assert f"| `{f.name}` |" in page
    assert "### ErrorResponse\n" in page
    assert "| 42 | `INVALID_REQUEST` | no |" in page
    assert set(BATCH_FIELD_NOTES) == {f.name for f in dataclasses.fields(BatchHeader)}
    assert "| 57 | 4 | i32 | `record_count` |" in render_record_batch()
    assert ErrorResponse.__name__ in page
    served, inter_broker = page.split("## Inter-broker APIs")[0], page.split("## Messages")[0]
    for key, request in INTER_BROKER_REQUESTS.items():  # listed apart from what is served
        row = f"| {int(key)} | {key.name} | [{request.__name__}]"
        assert row not in served and row in inter_broker.split("## Inter-broker APIs")[1]


def test_write_docs_writes_both_pages(tmp_path: Path) -> None:
    written = write_docs(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in written] == [
        WIRE_PROTOCOL_PATH, RECORD_BATCH_PATH]
    assert written[0].read_text() == render_wire_protocol()
