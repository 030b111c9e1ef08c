"""When is a started region ready? Every broker answers Metadata naming an active
controller, and lists every broker of the region as registered and not fenced.

``region_problems`` is the pure check (unit-tested on hand-made responses); the
launcher asks each broker with ``mq.deploy.probe`` until the list is empty.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mq.deploy.topology import BrokerSpec
from mq.protocol.messages import MetadataResponse


def _ids(ids: Sequence[int]) -> str:
    return ", ".join(str(i) for i in ids)


def region_problems(asked: Sequence[BrokerSpec], required: Sequence[int],
                    answers: Mapping[int, MetadataResponse | str]) -> list[str]:
    """What keeps the region from being ready, one phrase per broker asked (empty: ready).

    ``answers[node_id]`` is the broker's MetadataResponse, or why it gave none.
    """
    problems: list[str] = []
    for spec in asked:
        answer = answers.get(spec.node_id, "not asked")
        if isinstance(answer, str):
            problems.append(f"{spec.name} did not answer Metadata ({answer})")
            continue
        listed = {b.node_id: b for b in answer.brokers}
        missing = [i for i in required if i not in listed]
        fenced = [i for i in required if i in listed and listed[i].fenced]
        if answer.controller_id < 0:
            problems.append(f"{spec.name} knows no active controller yet")
        if missing:
            problems.append(f"{spec.name} has not seen broker {_ids(missing)} register")
        if fenced:
            problems.append(f"{spec.name} sees broker {_ids(fenced)} fenced")
    return problems
