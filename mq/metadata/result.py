"""What every controller handler returns: the records to propose and the answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from mq.metadata.records import MetadataRecord

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[T]):
    """``records`` are proposed to the metadata log (nothing changed yet); ``response``
    is sent once they are committed."""

    records: list[MetadataRecord]
    response: T
