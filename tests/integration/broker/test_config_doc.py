"""docs/reference/configs.md is generated from the ConfigKey declarations."""

from __future__ import annotations

from pathlib import Path

from mq.broker.config_doc import render_configs_reference
from mq.core.config import BROKER_KEYS, TOPIC_KEYS

DOC = Path(__file__).resolve().parents[3] / "docs" / "reference" / "configs.md"


def test_committed_config_reference_matches_the_code():
    assert DOC.read_text() == render_configs_reference(), (
        "regenerate with: python -m mq.broker.config_doc > docs/reference/configs.md")


def test_every_key_is_documented():
    text = render_configs_reference()
    for key in (*TOPIC_KEYS, *BROKER_KEYS):
        assert f"| `{key.name}` |" in text
