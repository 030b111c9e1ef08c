"""Share group administration: list, describe, delete (``mq share-group``)."""

from __future__ import annotations

from collections.abc import Mapping

from mq.client.cluster import ClusterClient
from mq.core.errors import ErrorCode, MqError
from mq.protocol import share_messages as s
from mq.protocol.group_messages import FindCoordinatorRequest, FindCoordinatorResponse


class ShareGroupAdmin:
    def __init__(self, bootstrap: str, *, client_id: str = "mq-share-admin",
                 address_map: Mapping[str, str] | None = None) -> None:
        self.cluster = ClusterClient(bootstrap, client_id=client_id, address_map=address_map)
        self.coordinator_id = -1  # the broker that answered the last group request

    async def __aenter__(self) -> ShareGroupAdmin:  # noqa: PYI034
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.cluster.close()

    async def _coordinator(self, group_id: str) -> int:
        for _ in range(50):
            response = await self.cluster.request_any(FindCoordinatorRequest(group_id, key_type=s.SHARE_KEY_TYPE))
            assert isinstance(response, FindCoordinatorResponse)
            if response.error_code == ErrorCode.NONE:
                self.cluster.add_node(response.node_id, response.host, response.port)
                self.coordinator_id = response.node_id
                return response.node_id
            if not ErrorCode(response.error_code).retriable:
                raise MqError(ErrorCode(response.error_code), response.error_message)
            await _sleep(0.1)
        raise MqError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no share coordinator for {group_id!r}")

    async def _to_coordinator(self, group_id: str, request: s.Request) -> s.Response:  # type: ignore[name-defined]
        for _ in range(50):
            node = await self._coordinator(group_id)
            try:
                response = await self.cluster.request(node, request)
            except MqError as exc:
                if not exc.code.retriable:
                    raise
                await _sleep(0.2)
                continue
            codes = [getattr(response, "error_code", 0)] + [g.error_code for g in getattr(response, "groups", [])]
            if not any(c in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             ErrorCode.COORDINATOR_NOT_AVAILABLE) for c in codes):
                return response
            await _sleep(0.1)
        raise MqError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no share coordinator for {group_id!r}")

    async def list_groups(self) -> list[s.ListedShareGroup]:
        """Every share group: each broker lists those it coordinates."""
        await self.cluster.refresh_metadata()
        out: dict[str, s.ListedShareGroup] = {}
        for node_id in sorted(self.cluster.metadata.brokers):
            response = await self.cluster.request(node_id, s.ListShareGroupsRequest())
            assert isinstance(response, s.ListShareGroupsResponse)
            for g in response.groups:
                out[g.group_id] = g
        return [out[g] for g in sorted(out)]

    async def describe_group(self, group_id: str) -> s.DescribedShareGroup:
        response = await self._to_coordinator(group_id, s.ShareGroupDescribeRequest([group_id]))
        group = response.groups[0]  # type: ignore[attr-defined]
        if group.error_code != ErrorCode.NONE:
            raise MqError(ErrorCode(group.error_code), group.error_message)
        return group  # type: ignore[no-any-return]

    async def delete_group(self, group_id: str) -> None:
        response = await self._to_coordinator(group_id, s.DeleteShareGroupsRequest(group_id))
        if response.error_code != ErrorCode.NONE:  # type: ignore[attr-defined]
            raise MqError(ErrorCode(response.error_code), response.error_message)  # type: ignore[attr-defined]


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)
