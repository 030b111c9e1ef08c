"""Replica fetches to one leader in flight at once each get their own connection lane:
the leader answers a connection's requests in order, so a fetch for busy partitions
queued behind a long poll for idle ones would wait out ``replica.fetch.wait.max.ms``."""

from __future__ import annotations

from mq.broker.follower_fetch import MAX_FETCH_LANES, FetcherManager, _InFlight
from mq.core.config import BrokerConfig
from mq.protocol.messages import FetchRequest


def test_each_fetch_in_flight_to_a_leader_takes_the_lowest_free_lane() -> None:
    manager = FetcherManager(BrokerConfig(node_id=1, log_dirs="/data"))
    assert manager._free_lane(2) == 0
    manager._in_flight[10] = _InFlight(2, FetchRequest([]), 0)
    manager._in_flight[11] = _InFlight(3, FetchRequest([]), 0)  # another leader's lanes are its own
    assert manager._free_lane(2) == 1 and manager._free_lane(3) == 1 and manager._free_lane(4) == 0
    manager._in_flight[12] = _InFlight(2, FetchRequest([]), 1)
    del manager._in_flight[10]  # the first long poll returned: its lane is free again
    assert manager._free_lane(2) == 0
    for tag in range(MAX_FETCH_LANES):
        manager._in_flight[20 + tag] = _InFlight(2, FetchRequest([]), tag)
    assert manager._free_lane(2) == MAX_FETCH_LANES - 1  # more share the last lane
