"""Conflict policies through the `mq` command, in real processes from a scratch directory:
`mq up` of two one-broker regions (east, west); bad conflict configs refused with one error
line and no topic; keys produced outside their home region refused with the home named, or
routed home with --route-home; a malformed mq.hlc refused; two regions' `mq table show`
of a last-writer-wins topic written in both agree on every row and on the digest.

Until the active-active mirror lands, the remote copies (east.accounts in west, west.accounts
in east) are filled by hand here, as the mirror will: same keys, values and headers, plus
mq.origin.region. Once it lands, the same assertions must hold with the mirror's copies."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import jsonschema

from mq.cli import schemas
from mq.core.conflict import home_region

from .helpers import base_env, free_listens, run_mq

READY_S = 60
REGIONS = ("east", "west")


def up_two_regions(tmp_path: Path, env: dict) -> None:
    east, west = free_listens(2)
    path = tmp_path / "two.yaml"
    path.write_text(textwrap.dedent(f"""\
        data_dir: .mq
        regions:
          - name: east
            brokers: [{{id: 1, listen: '{east}'}}]
          - name: west
            brokers: [{{id: 1, listen: '{west}'}}]
        """))
    up = run_mq("up", str(path), "--timeout", str(READY_S), env=env, cwd=tmp_path, timeout=READY_S + 30)
    assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")


def keys_of(region: str, n: int) -> list[str]:
    return [k for k in (f"user-{i}" for i in range(20 * n)) if home_region(k.encode(), REGIONS) == region][:n]


def table_doc(env: dict, cwd: Path, region: str, *extra: str) -> dict:
    shown = run_mq("table", "show", "accounts", "--region", region, "--json", *extra, env=env, cwd=cwd)
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    jsonschema.Draft202012Validator(schemas.schema_of("mq table show").schema).validate(doc)
    return doc


def test_conflict_policies_from_the_command_line(tmp_path):
    env = base_env()
    up_two_regions(tmp_path, env)

    def mq(*args: str, stdin: bytes | None = None):
        return run_mq(*args, env=env, cwd=tmp_path, input=stdin)

    try:
        # Bad configs: one error line, nothing created.
        bad = mq("topic", "create", "orders", "--region", "east", "--config", "conflict.policy=lww")
        assert bad.returncode != 0
        assert "conflict.policy='lww': must be one of none, home-region, last-writer-wins" in bad.stderr.decode()
        bad = mq("topic", "create", "orders", "--region", "east", "--config", "conflict.policy=home-region",
                 "--config", "conflict.home.regions=east,west", "--config", "conflict.home.map=eu-:north")
        assert bad.returncode != 0 and "region 'north', which conflict.home.regions=east,west does not name" \
            in bad.stderr.decode()
        assert b"orders" not in mq("topic", "list", "--region", "east").stdout

        # home-region: refused outside the home, or routed home.
        home = ["--config", "conflict.policy=home-region", "--config", "conflict.home.regions=east,west"]
        for region in REGIONS:
            assert mq("topic", "create", "orders", "--region", region, "--partitions", "2", *home).returncode == 0
        east_keys, west_keys = keys_of("east", 5), keys_of("west", 5)
        lines = "".join(f"{k}:order-{k}\n" for k in east_keys + west_keys).encode()
        refused = mq("produce", "orders", "--region", "east", "--key-separator", ":", stdin=lines)
        err = refused.stderr.decode()
        assert refused.returncode == 1, err
        assert "error: 5 of 10 records were not acknowledged; first error: NOT_HOME_REGION: " \
               f"key {west_keys[0]!r} of topic orders lives in region west" in err
        assert "mq produce --route-home" in err
        routed = mq("produce", "orders", "--region", "east", "--key-separator", ":", "--route-home", stdin=lines)
        assert routed.returncode == 0, routed.stderr
        for region, keys in (("east", east_keys), ("west", west_keys)):
            read = mq("consume", "orders", "--region", region, "--from-beginning", "--format", "json",
                      "--max-messages", str(len(keys) * (2 if region == "east" else 1)), "--timeout-ms", "10000")
            seen = sorted(json.loads(line)["key"] for line in read.stdout.decode().splitlines())
            assert seen == sorted(keys * (2 if region == "east" else 1)), (region, seen)
            described = json.loads(mq("topic", "describe", "orders", "--region", region, "--json").stdout)
            assert sum(p["log_end_offset"] for p in described["partitions"]) == len(seen)  # nothing refused kept

        # last-writer-wins: both regions write the same keys; a malformed stamp is refused.
        lww = ["--config", "conflict.policy=last-writer-wins", "--config", "conflict.home.regions=east,west"]
        for region in REGIONS:
            assert mq("topic", "create", "accounts", "--region", region, "--partitions", "3", *lww).returncode == 0
        keys = [f"acct-{i}" for i in range(100)]
        for region in REGIONS:
            body = "".join(f"{k}:{region}-{k}\n" for k in keys).encode()
            assert mq("produce", "accounts", "--region", region, "--key-separator", ":", stdin=body).returncode == 0
        forged = mq("produce", "accounts", "--region", "east", "--property", "parse.headers=true",
                    "--property", "parse.key=true", stdin=b"mq.hlc:noon\tacct-1\tlate\n")
        assert forged.returncode == 1
        assert "mq.hlc='noon' is not <wall_ms>.<logical>" in forged.stderr.decode()
        assert "let the producer stamp mq.hlc" in forged.stderr.decode()

        # The remote copies, as the mirror writes them (by hand until it lands).
        for source, target in (("east", "west"), ("west", "east")):
            assert mq("topic", "create", f"{source}.accounts", "--region", target, "--partitions", "3").returncode == 0
            read = mq("consume", "accounts", "--region", source, "--from-beginning", "--format", "json",
                      "--max-messages", "100", "--timeout-ms", "10000")
            records = [json.loads(line) for line in read.stdout.decode().splitlines()]
            assert len(records) == 100
            copy = "".join(f"{','.join(f'{h}:{v}' for h, v in r['headers'])},mq.origin.region:{source}\t"
                           f"{r['key']}\t{r['value']}\n" for r in records).encode()
            written = mq("produce", f"{source}.accounts", "--region", target, "--property", "parse.headers=true",
                         "--property", "parse.key=true", stdin=copy)
            assert written.returncode == 0, written.stderr

        east_doc, west_doc = table_doc(env, tmp_path, "east"), table_doc(env, tmp_path, "west")
        assert east_doc["digest"] == west_doc["digest"] and east_doc["rows"] == west_doc["rows"] == 100
        assert east_doc["entries"] == west_doc["entries"]
        assert west_doc["region"] == "west" and west_doc["policy"] == "last-writer-wins"
        assert west_doc["sources"] == [{"topic": "accounts", "region": "west"},
                                       {"topic": "east.accounts", "region": "east"}]
        assert west_doc["stats"]["applied"] + west_doc["stats"]["superseded"] == 200
        # west wrote after east: its stamps are later and win every key (clocks of one host)
        assert {e["value"] for e in west_doc["entries"]} == {f"west-{k}" for k in keys}

        text = mq("table", "show", "accounts", "--region", "west").stdout.decode()
        assert "acct-7" in text and f"digest {west_doc['digest']}" in text
        assert "table accounts in region west: policy last-writer-wins, 100 rows" in text
        summary = mq("table", "show", "accounts", "--region", "east", "--summary").stdout.decode()
        assert summary.splitlines()[-1] == f"digest {east_doc['digest']}" and "acct-7" not in summary
        missing = mq("table", "show", "nosuch", "--region", "east")
        assert missing.returncode == 1 and "topic 'nosuch' does not exist" in missing.stderr.decode()
    finally:
        down = run_mq("down", env=env, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
