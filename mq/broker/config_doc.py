"""Render ``docs/reference/configs.md`` from the ConfigKey declarations.

Run ``python -m mq.broker.config_doc > docs/reference/configs.md`` after changing a
setting; a test checks the committed page equals this output.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Any

from mq.core.config import BROKER_KEYS, TOPIC_KEYS, ConfigKey

_INTRO = """\
# Configuration reference

Generated from `mq/core/config.py` by `python -m mq.broker.config_doc`; do not edit by
hand. Names and meanings follow Kafka's, so Kafka's documentation is a second source.

Broker settings are given at start-up (`mq broker --config name=value`, or
`python -m mq.aio.runner --config name=value`) and are read-only at run time
(`DescribeConfigs` shows them; `AlterConfigs` on a broker is refused with
`INVALID_CONFIG`). Topic settings are set at creation (`CreateTopics` configs) and
changed at run time with `AlterConfigs` (incremental: set or delete single keys); a
change applies to the live log at once. A topic setting that is not overridden takes
the broker's default (`log.segment.bytes`, `log.retention.ms`,
`log.retention.bytes`, `message.max.bytes`), else the value below.
"""


def _type_name(key: ConfigKey) -> str:
    if isinstance(key.default, Enum):
        return "enum"
    if key.type in (int, float, bool, str):
        return key.type.__name__
    return "string"


def _default_text(value: Any) -> str:
    if isinstance(value, Enum):
        value = value.value
        if isinstance(value, int):  # TimestampType
            return "CreateTime" if value == 0 else "LogAppendTime"
    if isinstance(value, bool):
        return str(value).lower()
    if value == "":
        return '""'
    return str(value)


def _table(keys: Iterable[ConfigKey]) -> list[str]:
    rows = ["| name | type | default | valid values | description |", "|---|---|---|---|---|"]
    for key in keys:
        valid = key.valid or ""
        rows.append(
            f"| `{key.name}` | {_type_name(key)} | `{_default_text(key.default)}` | {valid} | {key.doc} |"
        )
    return rows


def render_configs_reference() -> str:
    """The whole Markdown page."""
    lines = [_INTRO, "## Topic settings", "", *_table(TOPIC_KEYS), "", "## Broker settings", "",
             *_table(BROKER_KEYS), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_configs_reference(), end="")
