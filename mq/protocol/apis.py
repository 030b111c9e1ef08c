"""Which request class each API key decodes to.

``CLIENT_REQUESTS`` are what producers, consumers and admin clients send;
``INTER_BROKER_REQUESTS`` travel between brokers and the metadata quorum. A broker
serves both (``REQUESTS``) and advertises both in ApiVersions, as Kafka does.
"""

from __future__ import annotations

from mq.protocol import group_messages as g
from mq.protocol import inter_broker as ib
from mq.protocol import messages as m
from mq.protocol import mirror_messages as mirror
from mq.protocol import producer_messages as producer
from mq.protocol import share_messages as share
from mq.protocol import txn_messages as txn
from mq.protocol.schema import decoder_for, encoder_for

CLIENT_REQUESTS: dict[m.ApiKey, type[m.Request]] = {
    cls.API_KEY: cls
    for cls in (
        m.ProduceRequest, m.FetchRequest, m.ListOffsetsRequest, m.MetadataRequest, m.ApiVersionsRequest,
        m.CreateTopicsRequest, m.DeleteTopicsRequest, m.DeleteRecordsRequest, m.DescribeConfigsRequest,
        m.AlterConfigsRequest, m.CreatePartitionsRequest, *g.GROUP_REQUESTS,
        *producer.PRODUCER_REQUESTS, *mirror.MIRROR_REQUESTS, *share.SHARE_REQUESTS, *txn.TXN_CLIENT_REQUESTS,
    )
}

INTER_BROKER_REQUESTS: dict[m.ApiKey, type[m.Request]] = {
    cls.API_KEY: cls
    for cls in (
        ib.OffsetsForLeaderEpochRequest, ib.AlterPartitionRequest, ib.BrokerRegistrationRequest,
        ib.BrokerHeartbeatRequest, ib.RaftRequest, *txn.TXN_INTER_BROKER_REQUESTS,
    )
}

REQUESTS: dict[m.ApiKey, type[m.Request]] = {**CLIENT_REQUESTS, **INTER_BROKER_REQUESTS}
"""Every API a broker serves (what ApiVersions advertises)."""

ALL_REQUESTS = REQUESTS
"""Every request this build can encode and decode."""


def _build_codecs() -> None:
    """Generate every message's encoder and decoder now, at import. Built lazily, two
    threads with their own event loops (notebook consumers, locust users) could meet one
    half-built: the second would call the first's placeholder and recurse forever."""
    for request in ALL_REQUESTS.values():
        for cls in (request, request.RESPONSE):
            encoder_for(cls)
            decoder_for(cls)
    encoder_for(m.ErrorResponse)
    decoder_for(m.ErrorResponse)


_build_codecs()
