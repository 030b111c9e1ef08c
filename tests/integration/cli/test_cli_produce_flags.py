"""`mq produce` as Kafka users call it, in real processes against a real broker: headers and
keys by --property, bad lines (reported, or --strict), the batching flags and
--producer-property (checked in the segment files), Kafka's and rpk's flag spellings."""

from __future__ import annotations

import json

from .helpers import base_env, run_mq


def _consume_json(cluster, topic: str, count: int) -> list[dict]:
    result = cluster.mq("consume", topic, "--from-beginning", "--format", "json", "--max-messages", str(count),
                        "--timeout-ms", "10000")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


def test_headers_and_keys_by_property(cluster):
    assert cluster.mq("topic", "create", "pf-headers").returncode == 0
    lines = b"source:web,trace:t-1\tuser-1\tclicked\n\tuser-2\tviewed\nsource:app\tNULL\tNULL\n"
    produced = cluster.mq("produce", "pf-headers", "--property", "parse.headers=true", "--property",
                          "parse.key=true", "--property", "null.marker=NULL", input=lines)
    assert produced.returncode == 0, produced.stderr
    records = _consume_json(cluster, "pf-headers", 3)
    assert [(r["headers"], r["key"], r["value"]) for r in records] == [
        ([["source", "web"], ["trace", "t-1"]], "user-1", "clicked"),
        ([], "user-2", "viewed"),
        ([["source", "app"]], None, None),  # null key, and a tombstone
    ]
    # Kafka's formatter prints them back in the same layout (null.literal for the nulls).
    printed = cluster.mq("consume", "pf-headers", "--from-beginning", "--max-messages", "3",
                         "--property", "print.headers=true", "--property", "print.key=true")
    assert printed.stdout == (b"source:web,trace:t-1\tuser-1\tclicked\nNO_HEADERS\tuser-2\tviewed\n"
                              b"source:app\tnull\tnull\n")


def test_bad_lines_are_reported_and_the_rest_sent(cluster):
    assert cluster.mq("topic", "create", "pf-bad").returncode == 0
    lines = b"k1:v1\nno separator\nk2:v2\nalso bad\nk3:v3\n"
    result = cluster.mq("produce", "pf-bad", "--property", "parse.key=true", "--property", "key.separator=:",
                        input=lines)
    err = result.stderr.decode()
    assert result.returncode == 1, err
    assert "line 2 not sent: no key separator ':' found: 'no separator'" in err
    assert "line 4 not sent" in err and "2 line(s) could not be parsed and were not sent (line 2, 4)" in err
    assert [(r["key"], r["value"]) for r in _consume_json(cluster, "pf-bad", 3)] == [
        ("k1", "v1"), ("k2", "v2"), ("k3", "v3")]


def test_strict_stops_at_the_first_bad_line(cluster):
    assert cluster.mq("topic", "create", "pf-strict").returncode == 0
    lines = b"k1:v1\nk2:v2\nno separator\nk3:v3\n"
    result = cluster.mq("produce", "pf-strict", "--key-separator", ":", "--require-key", "--strict", input=lines)
    err = result.stderr.decode()
    assert result.returncode == 1, err
    assert "line 3 cannot be parsed" in err and "nothing after it was sent" in err
    records = _consume_json(cluster, "pf-strict", 2)
    assert [r["key"] for r in records] == ["k1", "k2"]
    after = cluster.mq("consume", "pf-strict", "--from-beginning", "--timeout-ms", "300", "--format", "%v")
    assert after.stdout == b"v1\nv2\n"  # k3 was never sent
    # Without --require-key the shorthand sends such a line whole, and says so.
    lenient = cluster.mq("produce", "pf-strict", "--key-separator", ":", input=b"plain\n")
    assert lenient.returncode == 0 and b"1 line(s) had no key separator ':'" in lenient.stderr


def _batches(cluster, topic: str) -> list[dict]:
    [segment] = (cluster.data_dir / "broker-1" / f"{topic}-0").glob("*.log")
    result = cluster.mq("dump-log", str(segment), "--json")
    assert result.returncode == 0, result.stderr
    return [d for d in map(json.loads, result.stdout.decode().splitlines()) if d["type"] == "batch"]


def test_compression_linger_batch_size_and_producer_properties(cluster):
    lines = b"".join(b"record-%03d\n" % i for i in range(100))
    assert cluster.mq("topic", "create", "pf-one-batch").returncode == 0
    one = cluster.mq("produce", "pf-one-batch", "-z", "gzip", "--linger-ms", "1000", "--producer-property",
                     "acks=all", input=lines)
    assert one.returncode == 0, one.stderr
    batches = _batches(cluster, "pf-one-batch")
    assert [(b["codec"], b["count"]) for b in batches] == [("gzip", 100)]

    assert cluster.mq("topic", "create", "pf-small-batches").returncode == 0
    small = cluster.mq("produce", "pf-small-batches", "--compression-codec", "lz4", "--batch-size", "200",
                       "--producer-property", "linger.ms=1000", input=lines)
    assert small.returncode == 0, small.stderr
    batches = _batches(cluster, "pf-small-batches")
    assert len(batches) > 5 and {b["codec"] for b in batches} == {"lz4"}
    assert sum(b["count"] for b in batches) == 100

    clash = cluster.mq("produce", "pf-one-batch", "--linger-ms", "1", "--producer-property", "linger.ms=2",
                       input=b"x\n")
    assert clash.returncode == 2 and b"--linger-ms and --producer-property linger.ms disagree" in clash.stderr


def test_kafka_and_rpk_flag_spellings(cluster, tmp_path):
    env = base_env()  # no MQ_BOOTSTRAP: the flags must carry the address
    assert run_mq("topic", "create", "pf-spell", "--partitions", "2", "--bootstrap-server", cluster.listen,
                  env=env, cwd=tmp_path).returncode == 0
    produced = run_mq("produce", "-t", "pf-spell", "-p", "1", "-b", cluster.listen, input=b"a\nb\n", env=env,
                      cwd=tmp_path)
    assert produced.returncode == 0, produced.stderr
    read = run_mq("consume", "-t", "pf-spell", "-p", "1", "-o", "earliest", "-f", "%p %o %v", "--max-messages", "2",
                  "--bootstrap-server", cluster.listen, env=env, cwd=tmp_path)
    assert read.stdout == b"1 0 a\n1 1 b\n", read.stderr
    grouped = run_mq("consume", "pf-spell", "-g", "spell", "--from-beginning", "--max-messages", "2",
                     "-b", cluster.listen, env=env, cwd=tmp_path)
    assert grouped.returncode == 0 and grouped.stdout == b"a\nb\n", grouped.stderr
    listed = run_mq("group", "list", "--json", "--bootstrap-server", cluster.listen, env=env, cwd=tmp_path)
    assert "spell" in {g["group_id"] for g in json.loads(listed.stdout)}
