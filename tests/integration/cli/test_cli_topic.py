"""`mq topic`: configs at creation, alter-config, list, delete."""

from __future__ import annotations

import json


def test_topic_configs_and_delete(cluster):
    created = cluster.mq("topic", "create", "configured", "--partitions", "2",
                         "--config", "retention.ms=60000", "--config", "segment.bytes=1048576")
    assert created.returncode == 0, created.stderr

    def overrides() -> dict:
        result = cluster.mq("topic", "describe", "configured", "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["config_overrides"]

    assert overrides() == {"retention.ms": "60000", "segment.bytes": "1048576"}
    altered = cluster.mq("topic", "alter-config", "configured", "--set", "retention.ms=120000",
                         "--delete", "segment.bytes")
    assert altered.returncode == 0, altered.stderr
    assert overrides() == {"retention.ms": "120000"}

    listed = {t["name"]: t for t in json.loads(cluster.mq("topic", "list", "--json").stdout)}
    assert listed["configured"] == {"name": "configured", "partitions": 2, "replication_factor": 1}

    assert cluster.mq("topic", "delete", "configured").returncode == 0
    assert "configured" not in {t["name"] for t in json.loads(cluster.mq("topic", "list", "--json").stdout)}
    again = cluster.mq("topic", "delete", "configured")
    assert again.returncode == 1 and b"does not exist" in again.stderr
