"""A mirror topic through the `mq` command: created with `--config
mirror.source.region=east`, it refuses `mq produce` with one error line naming the
region that writes it; `mq topic alter-config --delete mirror.source.region` promotes it."""

from __future__ import annotations


def test_produce_to_a_mirror_topic_is_refused_until_promoted(cluster):
    created = cluster.mq("topic", "create", "mirrored", "--config", "mirror.source.region=east")
    assert created.returncode == 0, created.stderr
    refused = cluster.mq("produce", "mirrored", "--acks", "all", input=b"hello\n")
    assert refused.returncode != 0
    [line] = refused.stderr.decode().strip().splitlines()
    assert line.startswith("error: ") and "mirror of region east" in line and "mq mirror failover" in line
    bad = cluster.mq("topic", "create", "bad-region", "--config", "mirror.source.region=no spaces")
    assert bad.returncode != 0 and b"mirror.source.region" in bad.stderr
    promoted = cluster.mq("topic", "alter-config", "mirrored", "--delete", "mirror.source.region")
    assert promoted.returncode == 0, promoted.stderr
    written = cluster.mq("produce", "mirrored", "--acks", "all", input=b"hello\n")
    assert written.returncode == 0, written.stderr
    consumed = cluster.mq("consume", "mirrored", "--from-beginning", "--timeout-ms", "2000")
    assert consumed.stdout.strip() == b"hello"
