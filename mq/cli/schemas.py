"""The JSON that ``mq`` commands print, as JSON Schemas: one source for the reference page
(docs/reference/json-output.md, rendered by ``python -m mq.cli.reference --write``) and
for the tests, which validate real output against them.

Each schema is strict (``additionalProperties: false``): a field the page does not
document fails the tests. Stability rule, stated on the page: later versions may add
fields; they never rename, remove or retype one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from mq.cli.schema_kit import BOOL, BYTES, INT, NUM, STR, Schema, _t, arr, nullable, obj
from mq.cli.schemas_mirror import (
    MIRROR_FAILBACK,
    MIRROR_FAILOVER,
    MIRROR_FAILOVER_TRANSLATED,
    MIRROR_STATUS,
)
from mq.cli.schemas_share import SHARE_GROUP_DESCRIBE, SHARE_GROUP_LIST

IDS = arr({"type": "integer"}, "broker ids")
HEADERS = arr({"type": "array", "prefixItems": [{"type": "string"}, BYTES("header value")], "minItems": 2,
               "maxItems": 2}, "headers in record order, each [name, value] (a name may repeat)")
PARTITION = INT("partition number")
OFFSET_NOTE = "the offset of the next record to read"

TOPIC_LIST = arr(obj("a topic", name=STR("topic name"), partitions=INT("number of partitions"),
                     replication_factor=INT("replicas per partition (the largest)")), "every topic, by name")

TOPIC_DESCRIBE = obj(
    "one topic", name=STR("topic name"),
    partitions=arr(obj("a partition", partition=PARTITION, leader=INT("leader broker id (-1: none)"),
                       leader_epoch=INT("leader epoch"), replicas=IDS, isr=IDS,
                       offline_replicas=IDS, log_start_offset=INT("first offset still stored"),
                       log_end_offset=INT("offset the next record will get")), "by partition number"),
    config_overrides={"type": "object", "description": "configs set on the topic (Kafka names), name -> value",
                      "additionalProperties": {"type": "string"}})

GROUP_LIST = arr(obj("a consumer group", group_id=STR("group id"),
                     state=STR("Empty, PreparingRebalance, CompletingRebalance, Stable or Dead"),
                     protocol_type=STR("consumer (or empty)"), coordinator=INT("coordinator broker id")),
                 "every group")

GROUP_DESCRIBE = obj(
    "one consumer group", group_id=STR("group id"), state=STR("group state (Empty when no member)"),
    assignor=STR("the assignor of the current generation (empty when none)"),
    generation_id=INT("generation (-1: none)"),
    coordinator=nullable(INT("coordinator broker id"), "unknown"),
    members=arr(obj("a member", member_id=STR("member id"),
                    group_instance_id=nullable(STR("static member id"), "a dynamic member"),
                    client_id=STR("client id"), host=STR("client host"),
                    assignment=arr({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                                    "minItems": 2, "maxItems": 2}, "[topic, partition] pairs")),
                "current members"),
    partitions=arr(obj("a partition the group has committed or is assigned", topic=STR("topic"),
                       partition=PARTITION,
                       current_offset=nullable(INT(f"committed offset, {OFFSET_NOTE}"), "nothing committed"),
                       log_end_offset=nullable(INT("log end offset"), "unknown"),
                       lag=nullable(INT("records between the committed offset and the log end"), "unknown"),
                       lag_seconds=nullable(_t("number", "age in seconds of the next unread record"), "unknown"),
                       member_id=nullable(STR("owning member"), "no owner"),
                       client_id=nullable(STR("owner's client id"), "no owner"),
                       host=nullable(STR("owner's host"), "no owner")),
                   "by topic and partition"))

GROUP_RESET = obj(
    "a reset plan", group_id=STR("group id"), executed=BOOL("true with --execute (committed), false for a dry run"),
    partitions=arr(obj("a partition", topic=STR("topic"), partition=PARTITION,
                       current_offset=nullable(INT("committed offset now"), "nothing committed"),
                       new_offset=INT("the new committed offset"),
                       clamped=BOOL("the requested offset was outside [log start, log end] and was clamped")),
                   "by topic and partition"))

RECORDS_DELETE = arr(obj("a partition", topic=STR("topic"), partition=PARTITION,
                         log_start_offset=INT("the new log start offset")), "by topic and partition")

_STATUS_BROKER = obj(
    "a broker process", name=STR("broker-N"), region=STR("its region"), node_id=INT("node id"),
    pid=nullable(INT("process id"), "never started"), alive=BOOL("process alive"),
    answering=BOOL("answers requests"), endpoint=STR("native protocol HOST:PORT"),
    metrics=STR("Prometheus HOST:PORT"), data_dir=STR("its data directory"),
    log=STR("its log file"), topics=nullable(INT("topics it holds"), "unknown"),
    partitions=nullable(INT("partitions it holds"), "unknown"),
    log_bytes=INT("bytes of log segments on disk"),
    started_at_ms=nullable(INT("start time, epoch ms"), "unknown"),
    paused=BOOL("stopped by SIGSTOP (`mq broker pause`)"),
    registered=nullable(BOOL("registered with the controller"), "no broker answered"),
    fenced=nullable(BOOL("fenced by the controller"), "not registered or no answer"),
    state=STR("alive, paused, starting or down", enum=["alive", "paused", "starting", "down"]))
_STATUS_CONTROLLER = nullable(obj("the active controller", id=INT("broker id"), epoch=INT("controller epoch")),
                              "no active controller, or no answer")
_STATUS_PARTITIONS = arr(
    obj("a partition of a user topic", topic=STR("topic"), partition=PARTITION,
        leader=INT("leader broker id (-1: offline)"), leader_epoch=INT("leader epoch"),
        replicas=IDS, isr=IDS, high_watermark=nullable(INT("high watermark"), "leader did not answer"),
        under_replicated=BOOL("ISR smaller than the replicas"), offline=BOOL("no leader"),
        error_code=INT("metadata error code (0: none)")),
    "by topic and partition (empty when no broker answered)")
_STATUS_REGION = obj(
    "a region", name=STR("region name"), bootstrap=STR("its bootstrap list"), voters=IDS,
    brokers=arr(_STATUS_BROKER, "by node id"), answered=BOOL("a live broker answered the Metadata request"),
    controller=_STATUS_CONTROLLER, partitions=_STATUS_PARTITIONS)
LINK = obj(
    "one direction of a WAN link", name=STR("SOURCE->TARGET"), source=STR("region the bytes come from"),
    target=STR("region they go to"), latency_ms=NUM("one-way delay"), jitter_ms=NUM("± delay variation"),
    bandwidth_mbit=nullable(NUM("capacity, Mbit/s"), "unlimited"), loss=NUM("share of chunks that stall"),
    loss_stall_ms=NUM("the stall of a lost chunk"),
    state=STR("up, cut, or down (the link process does not answer)", enum=["up", "cut", "down"]),
    cut_mode={**nullable(STR("blackhole or refuse"), "not cut"), "enum": ["blackhole", "refuse", None]},
    pair=STR("its link process (A-B)"), control=STR("the link process's control HOST:PORT"),
    stall_left_ms=NUM("ms left of a stall (0: none)"),
    connections=nullable(INT("open connections crossing it"), "process down"),
    bytes=nullable(INT("bytes it carried"), "process down"),
    loss_stalls=nullable(INT("chunks stalled as lost"), "process down"))
_STATUS_FLOW = obj(
    "a mirror flow", name=STR("flow name"), source=STR("source region"), target=STR("target region"),
    mode=STR("active-passive or active-active"),
    process=nullable(obj("the mirror process", name=STR("mirror/FLOW"), pid=nullable(INT("process id"), "not running"),
                         alive=BOOL("process alive"), log=STR("its log file"),
                         started_at_ms=nullable(INT("start time, epoch ms"), "not running")), "not recorded"),
    mirror_installed=BOOL("the mirror service (python -m mirror) is installed"),
    status_file=STR("where the mirror writes its status"),
    mirror_status=nullable({"type": "object", "description": "the mirror's own status.json, as it wrote it "
                            "(fields: `mq mirror status --json` below)"}, "no status file"))
_STATUS_LAG_EXPORTER = nullable(obj(
    "the lag exporter `mq up` started", name=STR("lag-exporter"), pid=nullable(INT("process id"), "not running"),
    alive=BOOL("process alive"), log=STR("its log file"),
    started_at_ms=nullable(INT("start time, epoch ms"), "not running"),
    metrics=nullable(STR("HOST:PORT of its /metrics"), "no round written yet"),
    status=nullable({"type": "object", "description": "its status.json (docs/reference/lag-snapshots.md)"},
                    "no round written yet")), "`mq up --no-lag-export`, or cluster.json from before the exporter")
STATUS = obj(
    "what `mq up` started here: regions, links, mirror flows; with one region (or none) its fields also at the "
    "top, as before regions",
    ("region", "bootstrap", "voters", "brokers", "answered", "controller", "partitions"),
    data_dir=STR("absolute data directory"), running=BOOL("any broker process alive (exit code 0)"),
    regions=arr(_STATUS_REGION, "in file order"), links=arr(LINK, "every direction, in file order"),
    flows=arr(_STATUS_FLOW, "in file order"), lag_exporter=_STATUS_LAG_EXPORTER,
    region=nullable(STR("region name"), "no cluster.json"), bootstrap=nullable(STR("bootstrap list"), "no cluster.json"),
    voters=IDS, answered=BOOL("a live broker answered the Metadata request"),
    brokers=arr(_STATUS_BROKER, "by node id"), controller=_STATUS_CONTROLLER, partitions=_STATUS_PARTITIONS)
LINK_LIST = arr(LINK, "every direction, in file order")

CONSUME_RECORD = obj(
    "one record (one line)", topic=STR("topic"), partition=PARTITION, offset=INT("offset"),
    key=nullable(BYTES("key"), "no key"), value=nullable(BYTES("value"), "a tombstone"),
    timestamp=INT("timestamp, epoch ms"), headers=HEADERS)

PRODUCE_REPORT = obj("one acknowledged record (one line, in input order)", partition=PARTITION,
                     offset=INT("its offset"), key=nullable(BYTES("key"), "no key"),
                     value=nullable(BYTES("value"), "a tombstone"))

TABLE_SHOW = obj(
    "a keyed topic and its remote copies merged under its conflict policy (`--summary`: without `entries`)",
    ("entries",),
    topic=STR("the keyed topic"), region=nullable(STR("this region (the broker's region.name)"), "none"),
    policy=STR("the conflict policy merged under", enum=["none", "home-region", "last-writer-wins"]),
    sources=arr(obj("a topic read", topic=STR("topic name"),
                    region=nullable(STR("the region its records come from"), "unknown")),
                "the topic and its remote copies, by name"),
    rows=INT("live rows (tombstones not counted)"),
    digest=STR("SHA-256 of the live rows in key order: equal digests, equal tables"),
    stats=obj("records read", applied=INT("became or replaced a row"),
              superseded=INT("last-writer-wins: older than the row they met"),
              foreign=INT("home-region: not from the key's home region, left out"),
              unstamped=INT("last-writer-wins: no valid mq.hlc (ordered by timestamp)"),
              keyless=INT("without a key (no row)")),
    entries=arr(obj("a live row", key=BYTES("key"), value=BYTES("value"),
                    hlc=nullable(STR("its stamp, <wall_ms>.<logical>"), "the record had none"),
                    region=STR("the region that wrote it")), "in key order"))

_BATCH = obj(
    "a record batch", ("records", "records_error", "control"), type=STR("batch", const="batch"),
    position=INT("byte position in the file"), base_offset=INT("first offset"), last_offset=INT("last offset"),
    count=INT("records in the batch"), first_timestamp=INT("epoch ms"), max_timestamp=INT("epoch ms"),
    timestamp_type=STR("CREATE_TIME or LOG_APPEND_TIME"), codec=STR("none, gzip, lz4 or zstd"),
    size=INT("bytes"), crc=INT("stored CRC-32C"), crc_ok=BOOL("the CRC matches"),
    partition_leader_epoch=INT("leader epoch"), producer_id=INT("-1: none"), producer_epoch=INT("-1: none"),
    base_sequence=INT("-1: none"), is_transactional=BOOL("transactional"), is_control=BOOL("control batch"),
    records=arr(obj("a record", offset=INT("offset"), timestamp=INT("epoch ms"),
                    key=nullable(BYTES("key"), "no key"), value=nullable(BYTES("value"), "a tombstone"),
                    headers=HEADERS), "with --print-records"),
    records_error=STR("why the records could not be decoded"),
    control=obj("a transaction marker (control batches only)", marker=STR("COMMIT or ABORT"),
                coordinator_epoch=INT("epoch of the transaction coordinator that wrote it")))
_INDEX = obj("an offset index entry", ("valid",), type=STR("index_entry", const="index_entry"),
             offset=INT("offset"), position=INT("byte position in the .log"),
             valid=BOOL("points at a batch of the .log beside it"))
_TIME_INDEX = obj("a time index entry", ("valid",), type=STR("time_index_entry", const="time_index_entry"),
                  timestamp=INT("epoch ms"), offset=INT("offset"), valid=BOOL("names a batch of the .log"))
_ERROR = obj("an unreadable tail (always last)", ("position",), type=STR("error", const="error"),
             position=INT("byte position"), message=STR("what is wrong"), valid=BOOL("false"))
_PRODUCER = obj(
    "an idempotent producer in a .snapshot file", type=STR("producer", const="producer"),
    producer_id=INT("producer id"), producer_epoch=INT("its epoch"),
    last_sequence=INT("sequence of its last record (-1: none)"), last_offset=INT("offset of its last record"),
    last_timestamp=INT("max timestamp of its last batch, epoch ms (expiry counts from it)"),
    current_txn_first_offset=INT("first offset of its open transaction (-1: none)"),
    batches=arr(obj("a remembered batch (a retry of it is answered with these offsets)",
                    first_sequence=INT("first sequence"), last_sequence=INT("last sequence"),
                    first_offset=INT("first offset"), last_offset=INT("last offset")),
                "its last batches (at most 5), oldest first"))
_ABORTED_TXN = obj(
    "an aborted transaction in a .txnindex file", type=STR("aborted_txn", const="aborted_txn"),
    producer_id=INT("producer id"), first_offset=INT("its first offset in the partition"),
    last_offset=INT("offset of its ABORT marker"), last_stable_offset=INT("the LSO once the marker was appended"))
DUMP_LOG = {"description": "one entry (one line)",
            "oneOf": [_BATCH, _INDEX, _TIME_INDEX, _PRODUCER, _ABORTED_TXN, _ERROR]}


@dataclass(frozen=True)
class Output:
    command: str
    schema: Schema
    lines: bool = False  # one JSON document per line (JSON Lines) instead of one document


OUTPUTS: tuple[Output, ...] = (
    Output("mq topic list --json", TOPIC_LIST),
    Output("mq topic describe NAME --json", TOPIC_DESCRIBE),
    Output("mq group list --json", GROUP_LIST),
    Output("mq group describe GROUP --json", GROUP_DESCRIBE),
    Output("mq group reset-offsets GROUP ... --json", GROUP_RESET),
    Output("mq share-group list --json", SHARE_GROUP_LIST),
    Output("mq share-group describe GROUP --json", SHARE_GROUP_DESCRIBE),
    Output("mq records delete TOPIC ... --json", RECORDS_DELETE),
    Output("mq status --json", STATUS),
    Output("mq link list --json", LINK_LIST),
    Output("mq table show TOPIC --json", TABLE_SHOW),
    Output("mq consume TOPIC --format json", CONSUME_RECORD, lines=True),
    Output("mq produce TOPIC --report FILE", PRODUCE_REPORT, lines=True),
    Output("mq dump-log FILE --json", DUMP_LOG, lines=True),
    Output("mq mirror status --flow NAME --json", MIRROR_STATUS),
    Output("mq mirror failover --to REGION --json", MIRROR_FAILOVER),
    Output("mq mirror failover --to REGION --group G --translate --json", MIRROR_FAILOVER_TRANSLATED),
    Output("mq mirror failback --to REGION --json", MIRROR_FAILBACK),
)


def schema_of(command_prefix: str) -> Output:
    """The output whose command starts with ``command_prefix`` (``"mq status"``)."""
    [found] = [o for o in OUTPUTS if o.command.startswith(command_prefix)]
    return found


# ---------------------------------------------------------------- the reference page

INTRO = """\
# JSON output of `mq` commands

<!-- Generated from mq/cli/schemas.py by `python -m mq.cli.reference --write`. Do not edit. -->

Every listing has a `--json` form for scripts, with the shape below; the tests validate the
real output of each command against these schemas, so the page cannot drift. Stability:
later versions may add fields (and this page with them); they never rename, remove or
change the type of a field. Tables (the default output) are for people and may change.

Conventions: offsets and timestamps are integers (timestamps in epoch milliseconds); a
value that is not known is `null`, never omitted; keys, values and header values are bytes,
shown as a JSON string when they are valid UTF-8 and as `{"base64": "..."}` otherwise; headers
are `[[name, value], ...]` because a name may repeat and order matters. Commands marked
*JSON Lines* print one document per line. `python -m mq.cli.schemas ["mq status" ...]` prints
the machine-readable JSON Schemas (draft 2020-12) these tables are rendered from.
"""


def _type_of(schema: Schema) -> str:
    if "oneOf" in schema:  # BYTES: a string or {"base64": ...}, maybe null
        is_bytes = "base64" in json.dumps(schema)
        kinds = [_type_of(s) for s in schema["oneOf"] if not (is_bytes and s.get("type") in ("string", "object"))]
        return " or ".join((["bytes"] if is_bytes else []) + kinds)
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    names = []
    for k in kinds:
        if k == "array" and "items" in schema:
            names.append(f"array of {_type_of(schema['items'])}")
        elif k == "array":
            names.append("pair")
        else:
            names.append(str(k))
    return " or ".join(names)


def _rows(schema: Schema, path: str) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    target = schema
    if schema.get("type") == "array" or (isinstance(schema.get("type"), list) and "array" in schema["type"]):
        target = schema.get("items", {})
        path = f"{path}[]"
    if "object" in (target.get("type") if isinstance(target.get("type"), list) else [target.get("type")]) \
            and "properties" in target:
        required = set(target.get("required", []))
        for name, sub in target["properties"].items():
            where = f"{path}.{name}" if path else name
            note = "" if name in required else " (only when present)"
            rows.append((where, _type_of(sub), sub.get("description", "") + note))
            rows += _rows(sub, where)
    values = target.get("additionalProperties")
    if isinstance(values, dict) and "properties" in values:  # a map: name -> object
        rows += _rows(values, f"{path}.<key>")
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _summary(o: Output) -> str:
    what = o.schema["description"]
    if o.schema.get("type") == "array":
        text = f"A JSON array: {what}. Each item:"
    elif o.lines:
        text = f"*JSON Lines*: {what}."
    else:
        text = f"One JSON object: {what}."
    return text


def render() -> str:
    out = [INTRO]
    for o in OUTPUTS:
        out += [f"## `{o.command}`", "", _summary(o), ""]
        variants = o.schema["oneOf"] if "oneOf" in o.schema and "type" not in o.schema else [o.schema]
        for v in variants:
            if len(variants) > 1:
                out += [f"`type` = `{v['properties']['type'].get('const')}`: {v['description']}", ""]
            rows = _rows(v, "")
            out += ["| field | type | meaning |", "|---|---|---|"]
            out += [f"| `{p}` | {t} | {_cell(d)} |" for p, t, d in rows]
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the JSON Schema (draft 2020-12) of every output, or of those named."""
    import sys

    wanted = argv if argv is not None else sys.argv[1:]
    docs = {o.command: {"$schema": "https://json-schema.org/draft/2020-12/schema", **o.schema} for o in OUTPUTS
            if not wanted or any(o.command.startswith(w) for w in wanted)}
    print(json.dumps(docs, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
