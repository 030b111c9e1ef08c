"""The JSON of ``mq share-group list|describe --json`` as JSON Schemas, beside the other
commands' in ``mq.cli.schemas`` (which lists them in ``OUTPUTS``, so the reference page
and the tests cover them)."""

from __future__ import annotations

from mq.cli.schema_kit import INT, STR, arr, obj

SHARE_GROUP_LIST = arr(obj("a share group", group_id=STR("share group id"), state=STR("Empty or Stable"),
                           members=INT("members now")), "every share group of the cluster, by id")

SHARE_GROUP_DESCRIBE = obj(
    "one share group", group_id=STR("share group id"), state=STR("Empty or Stable"),
    group_epoch=INT("bumped by every membership or subscription change"),
    coordinator=INT("the broker coordinating the group (leader of its __share_group_state partition)"),
    members=arr(obj("a member", member_id=STR("member id"), client_id=STR("client id"), host=STR("client address"),
                    assignment=arr({"type": "array", "description": "[topic, [partition, ...]]"},
                                   "the partitions it reads (shared with other members)"),
                    acquired=INT("records it holds locked now")), "by member id"),
    partitions=arr(obj(
        "a share-partition", topic=STR("topic"), partition=INT("partition number"),
        start_offset=INT("share-partition start offset (SPSO): every record before it is done"),
        end_offset=INT("the next offset never handed out"),
        high_watermark=INT("the partition's high watermark on the coordinator's replica (-1: no replica)"),
        lag=INT("records never handed out yet (high watermark - end offset)"),
        acquired=INT("records locked by a member now"), available=INT("records waiting to be handed out again"),
        acknowledged=INT("accepted records inside the window (before the start offset they are forgotten)"),
        archived=INT("dead-lettered or gap records inside the window"),
        dead_letters=INT("records waiting to be written to the dead-letter topic")), "by topic and partition"),
)
