"""Kafka's and rpk's spellings of the common flags parse to the same arguments."""

from __future__ import annotations

import pytest

from mq.cli.main import build_parser

CLIENT_COMMANDS = [
    ["topic", "list"], ["topic", "describe", "t"], ["topic", "create", "t"], ["topic", "delete", "t"],
    ["topic", "alter-config", "t"], ["produce", "t"], ["consume", "t"], ["group", "list"],
    ["group", "describe", "g"], ["group", "delete", "g"], ["group", "reset-offsets", "g", "--to-latest"],
    ["records", "delete", "t", "--before-offset", "1"],
]


@pytest.mark.parametrize("command", CLIENT_COMMANDS, ids=" ".join)
@pytest.mark.parametrize("flag", ["--bootstrap", "--bootstrap-server", "-b"])
def test_every_client_command_takes_each_bootstrap_spelling(command, flag):
    args = build_parser().parse_args([*command, flag, "127.0.0.1:29201"])
    assert args.bootstrap == "127.0.0.1:29201"


def test_help_shows_the_kafka_spelling(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["consume", "--help"])
    assert "--bootstrap-server" in capsys.readouterr().out
