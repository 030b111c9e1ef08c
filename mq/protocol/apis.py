"""Which request class each API key decodes to.

``CLIENT_REQUESTS`` are what producers, consumers and admin clients send;
``INTER_BROKER_REQUESTS`` travel between brokers and the metadata quorum. A broker
serves both (``REQUESTS``) and advertises both in ApiVersions, as Kafka does.
"""

from __future__ import annotations

from mq.protocol import group_messages as g
from mq.protocol import inter_broker as ib
from mq.protocol import messages as m

CLIENT_REQUESTS: dict[m.ApiKey, type[m.Request]] = {
    cls.API_KEY: cls
    for cls in (
        m.ProduceRequest, m.FetchRequest, m.ListOffsetsRequest, m.MetadataRequest, m.ApiVersionsRequest,
        m.CreateTopicsRequest, m.DeleteTopicsRequest, m.DeleteRecordsRequest, m.DescribeConfigsRequest,
        m.AlterConfigsRequest, *g.GROUP_REQUESTS,
    )
}

INTER_BROKER_REQUESTS: dict[m.ApiKey, type[m.Request]] = {
    cls.API_KEY: cls
    for cls in (
        ib.OffsetsForLeaderEpochRequest, ib.AlterPartitionRequest, ib.BrokerRegistrationRequest,
        ib.BrokerHeartbeatRequest, ib.RaftRequest,
    )
}

REQUESTS: dict[m.ApiKey, type[m.Request]] = {**CLIENT_REQUESTS, **INTER_BROKER_REQUESTS}
"""Every API a broker serves (what ApiVersions advertises)."""

ALL_REQUESTS = REQUESTS
"""Every request this build can encode and decode."""
