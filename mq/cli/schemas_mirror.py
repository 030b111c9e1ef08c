"""The JSON of ``mq mirror ...`` (``python -m mirror ...``) as JSON Schemas, beside the
other commands' in ``mq.cli.schemas`` (which lists them in ``OUTPUTS``, so the reference
page and the tests cover them). mq never imports the mirror: these are documents, and
the mirror's tests validate what the real processes print against them.

The status document is written by three hands (the running flow, a flow refused at
start, fail-over marking it ``failed-over``), so only its core fields are required.
"""

from __future__ import annotations

from mq.cli.schema_kit import BOOL, INT, NUM, STR, Schema, arr, nullable, obj

PARTITION = INT("partition number")
_SILENT = "while the source is not heard (`source_unreachable`)"


def _map(values: Schema, description: str) -> Schema:
    return {"type": "object", "description": description, "additionalProperties": values}


_MIRROR_PARTITION = obj(
    "a mirrored partition",
    ("buffered_bytes", "remote_topic", "not_forwarded", "duplicates_dropped", "restarts", "resume"),
    topic=STR("topic"), partition=PARTITION,
    state=STR("waiting, running, stalled or blocked", enum=["waiting", "running", "stalled", "blocked"]),
    reason=STR("why, when not running (empty otherwise)"),
    source_end=nullable(INT("the source's high watermark, as last seen"), "never seen"),
    source_log_start=nullable(INT("the source's log start offset, as last seen"), "never seen"),
    mirrored_end=nullable(INT("the target's high watermark (mirrored end)"), "not read yet"),
    lag_records=nullable(INT("source end - mirrored end; " + _SILENT + ": the last known source end, "
                             "so a lower bound as of `source_seen_wall_ms`"), "unknown"),
    lag_seconds=nullable(NUM("age of the oldest source record not yet mirrored"),
                         "unknown (also while the source is not heard and nothing is known unmirrored)"),
    latency_p50_ms=nullable(INT("replication latency p50 over the last minute"), "no batch in the last minute"),
    latency_p99_ms=nullable(INT("replication latency p99 over the last minute"), "no batch in the last minute"),
    records_mirrored=INT("records appended by this process"), bytes_mirrored=INT("batch bytes appended"),
    gap_records=INT("records deleted in the source before they were mirrored"),
    gaps=arr(arr({"type": "integer"}, "[from, to): offsets lost"), "the last 100 gaps"),
    source_seen_wall_ms=nullable(INT("when the source last answered a fetch (epoch ms): what the lag is as "
                                     "of"), "never"),
    source_unreachable=BOOL("the source does not answer this partition's fetches (link cut, region down): "
                            "the lag is a lower bound"),
    source_silent_s=nullable(NUM("seconds since the source last answered"), "never answered"),
    source_rate_per_s=nullable(NUM("the source's produce rate, records/s, from consecutive source-end "
                                   "observations over the last 10 s (the last known rate " + _SILENT + ")"),
                               "not measured yet"),
    lag_records_estimate=nullable(INT(_SILENT + ": lag_records + source_rate_per_s x source_silent_s, an "
                                      "estimate (right if the writers kept their pace), not a bound"),
                                  "the source is heard, or its rate was never measured"),
    buffered_bytes=INT("fetched, not yet appended (the append in flight included); active-passive flows"),
    remote_topic=STR("active-active flows: the remote topic written in the target, e.g. east.orders"),
    not_forwarded=INT("active-active: records not copied by the forwarding rule (already in the target's "
                      "path, or remote topics without forward: true)"),
    duplicates_dropped=INT("active-active: records dropped as already written (dedupe by origin offset)"),
    restarts=INT("active-active: times the partition restarted from what the target holds"),
    resume=STR("active-active: where the partition resumed and why"))

MIRROR_STATUS = obj(
    "one flow's status document, `<data_dir>/mirror-<flow>/status.json` (an array of them without `--flow` "
    "or with several); `mq status --json` has it as `flows[].mirror_status`",
    ("pid", "error", "updated_at_ms", "lag_records", "lag_ms", "replication_latency_p99_ms",
     "source_unreachable", "source_heard_at_ms", "source_silent_s", "lag_records_lower_bound", "lag_as_of_ms",
     "source_rate_per_s", "lag_records_estimate", "started_ms", "metrics", "topics", "problems", "skipped",
     "errors", "heartbeats", "groups", "totals", "mode", "fetch"),
    flow=STR("flow name"), source=STR("source region"), target=STR("target region"),
    pid=nullable(INT("the mirror process"), "not started"),
    state=STR("running, starting, stalled, blocked, stopped or failed-over"),
    reason=STR("why, when not running"), updated_ms=INT("when this was written (epoch ms)"),
    updated_at_ms=INT("the same (the name `mq status` reads)"),
    error=STR("the reason, when stalled or blocked (empty otherwise)"),
    lag_records=INT("total lag in records, all partitions; a lower bound when `lag_records_lower_bound`"),
    lag_ms=nullable(INT("the oldest unmirrored record's age"), "unknown"),
    replication_latency_p99_ms=nullable(INT("the worst partition's p99"), "no batch in the last minute"),
    source_unreachable=BOOL("the source (or its discovery) does not answer: the flow is stalled on it"),
    source_heard_at_ms=nullable(INT("the last answer of the source, any partition (epoch ms)"), "never"),
    source_silent_s=nullable(NUM("seconds since `source_heard_at_ms`"), "never heard"),
    lag_records_lower_bound=BOOL("`lag_records` is the last known figure, a lower bound (= source_unreachable)"),
    lag_as_of_ms=nullable(INT("the oldest last answer among the partitions: `lag_records` is as of then "
                              "at least"), "never heard"),
    source_rate_per_s=nullable(NUM("the partitions' source produce rates summed, records/s"), "not measured"),
    lag_records_estimate=nullable(INT(_SILENT + ": the partitions' estimates (the lags of partitions still "
                                      "heard) summed, an estimate"),
                                  "the source is heard, or a rate is unknown"),
    started_ms=INT("when the process started (epoch ms)"), metrics=STR("where /metrics listens, HOST:PORT"),
    topics=_map(INT("partitions"), "topics mirrored, name -> partition count"),
    problems=_map(STR("why"), "topics not (fully) mirrored, name -> why"),
    skipped=_map(STR("why"), "topics left out on purpose, name -> why"),
    errors=_map(STR("the last error"), "the periodic steps failing now (source, groups, status...)"),
    heartbeats=obj("heartbeats", enabled=BOOL("written to the source"), reason=STR("why not"),
                   sent=INT("heartbeats written"),
                   latency_p50_ms=nullable(INT("end-to-end replication latency p50"), "none in the last minute"),
                   latency_p99_ms=nullable(INT("end-to-end replication latency p99"), "none in the last minute")),
    groups=_map(obj("a group", ("committed", "synced_ms", "skipped", "clamped", "checkpoints", "checkpointed_ms"),
                    committed=INT("offsets written so far"),
                    synced_ms=INT("last sync (epoch ms)"), skipped=STR("why not synced (e.g. active in the target)"),
                    clamped=INT("offsets clamped to the mirrored end in the last sync"),
                    checkpoints=INT("active-active: translated offsets written to the checkpoints topic"),
                    checkpointed_ms=INT("active-active: last checkpoint (epoch ms)")),
                "groups whose offsets are synced, id -> figures"),
    totals=obj("over all partitions", records_mirrored=INT("records"), bytes_mirrored=INT("bytes"),
               lag_records=INT("lag (a lower bound when the source is not heard)"),
               gap_records=INT("records lost to gaps"), stalled=INT("partitions stalled"),
               blocked=INT("partitions blocked")),
    partitions=arr(_MIRROR_PARTITION, "by topic and partition"),
    mode=STR("active-passive or active-active", enum=["active-passive", "active-active"]),
    fetch=obj("the flow's fetch settings and buffer use",
              ("buffer_used_bytes", "fetches_in_flight"),
              **{"max.partition.fetch.bytes": INT("most bytes one fetch asks of one partition"),
                 "buffer.max.bytes": INT("the flow's buffer budget"),
                 "fetches.per.leader": INT("requests in flight per source leader"),
                 "buffer_used_bytes": INT("fetched, not yet appended, plus what fetches in flight may bring"),
                 "fetches_in_flight": nullable(INT("fetch requests in flight"),
                                               "an active-active flow (one fetch at a time)")}))

_AT_RISK = obj(
    "a promoted partition", topic=STR("topic"), partition=PARTITION,
    source_end=nullable(INT("the source's end: asked now, or the last known"), "never seen"),
    mirrored_end=INT("the promoted region's end at promotion"),
    records=nullable(INT("records at risk: exact when the source answered, else the last known figure, a "
                         "lower bound"), "the source's end was never seen"),
    basis=STR("source (asked now), last known (N s old), or unknown"),
    records_kind=STR("exact, lower bound or unknown", enum=["exact", "lower bound", "unknown"]),
    records_estimate=nullable(INT("a lower bound's estimate: records + source_rate_per_s x source_silent_s "
                                  "(right if the source's writers kept their pace), not a bound"),
                              "exact, or the rate is unknown"),
    source_rate_per_s=nullable(NUM("the source's last known produce rate, records/s"), "exact or unknown"),
    source_seen_ms=nullable(INT("when the mirror last heard the source's end (epoch ms)"), "exact or unknown"),
    source_silent_s=nullable(NUM("seconds from then to this fail-over"), "exact or unknown"))

MIRROR_FAILOVER = obj(
    "the fail-over report of one flow (an array when several flows go into the region)",
    flow=STR("flow name"), source=STR("the old writer region"), promoted_region=STR("the new writer region"),
    promoted_ms=INT("when the topics became writable (epoch ms)"),
    stopped_pid=nullable(INT("the mirror process stopped"), "none was running"),
    topics=arr(STR("topic"), "topics promoted"),
    promotion_ends=_map(arr({"type": "integer"}, "by partition"), "each partition's end at promotion, topic -> "
                        "ends (fail-back saves the old writer's records past them)"),
    partitions=arr(_AT_RISK, "records at risk by topic and partition"),
    records_at_risk=INT("their sum: exact, or a lower bound when `records_at_risk_exact` is false"),
    records_at_risk_exact=BOOL("the source answered: every figure is exact"),
    records_at_risk_estimate=nullable(INT("the partitions' estimates (exact figures as they are) summed, an "
                                          "estimate"), "exact, or a rate is unknown"),
    groups=_map(obj("a group", offsets=_map(INT("committed offset"), "TOPIC-PARTITION -> offset in the "
                                                "promoted region"), skipped=STR("why not synced")),
                "groups and where they resume"))

MIRROR_FAILOVER_TRANSLATED = obj(
    "`--translate`: one group moved across one active-active flow (an array when several flows go into "
    "the region, or several groups move)",
    flow=STR("flow name"), source=STR("the region the group consumed in"),
    region=STR("the region the group moves to"), group=STR("group id"),
    basis=STR("source: the group's commits asked of the source; checkpoint: the source did not answer, the "
              "mirror's last checkpoints in the region stand for them", enum=["source", "checkpoint"]),
    partitions=arr(obj(
        "one source partition the group committed on",
        source_topic=STR("the topic in the source, e.g. orders"),
        remote_topic=STR("its remote topic in the region, e.g. east.orders"), partition=PARTITION,
        committed=INT("the group's committed offset in the source (the next record it reads there)"),
        translated=nullable(INT("the offset in the remote topic standing for it: never past the record it "
                                "stands for"), "untranslatable: no offset sync at or before it"),
        reread_bound=nullable(INT("records the group may read again from there (0 when exact)"),
                              "untranslatable"),
        exact=BOOL("translated at a sync or inside a one-for-one run: nothing read again"),
        previous=nullable(INT("the group's committed offset in the remote topic before"), "none"),
        action=STR("committed, kept (already at or past it: never moved back) or untranslatable (left alone)",
                   enum=["committed", "kept", "untranslatable"])),
        "by source topic and partition"))

MIRROR_FAILBACK = obj(
    "the fail-back summary of one flow (an array when several flows come out of the region)",
    flow=STR("flow name"), writer=STR("the writer region again"), topics=arr(STR("topic"), "topics failed back"),
    diverged=_map(arr({"type": "integer"}, "records, in partition order, of the partitions that had any"),
                  "records saved to TOPIC.diverged, topic -> counts (`diverged_partitions` names the partitions)"),
    diverged_partitions=arr(obj(
        "one partition of a failed-back topic", topic=STR("topic"), partition=PARTITION,
        from_offset=INT("the promotion point: the first offset the new writer did not have"),
        to_offset=INT("the old writer's end when it was demoted"),
        records=INT("to_offset - from_offset: records acknowledged by the old writer, missing in the new"),
        saved_to=nullable(STR("the topic holding them, same offsets and bytes"), "nothing diverged")),
        "every partition of the failed-back topics, by topic and partition"),
    ends=_map(INT("end offset"), "TOPIC-PARTITION -> the end both regions share"),
    groups=arr(STR("group"), "groups synced back"), reverse_flow=STR("the reverse flow used (now stopped)"),
    resumed_pid=INT("the resumed flow's mirror process"), done_ms=INT("when done (epoch ms)"))
