"""Clients a lab hands out per region and closes when it closes (``GeoLab``, ``ComposeLab``)."""

from __future__ import annotations

import sys
from typing import Any

from mq.client import blocking


class LabClients:
    """Mixed into a lab that has ``bootstrap(region)``; ``close()`` calls ``_close_clients()``."""

    _clients: list[Any]

    def _keep(self, client: Any) -> Any:
        self._clients.append(client)
        return client

    def admin(self, region: str, **config: Any) -> blocking.Admin:
        return self._keep(blocking.Admin(self.bootstrap(region), **config))  # type: ignore[attr-defined]

    def producer(self, region: str, **config: Any) -> blocking.Producer:
        return self._keep(blocking.Producer(self.bootstrap(region), **config))  # type: ignore[attr-defined]

    def consumer(self, region: str, **config: Any) -> blocking.Consumer:
        return self._keep(blocking.Consumer(self.bootstrap(region), **config))  # type: ignore[attr-defined]

    def forget(self, client: Any) -> None:
        """Close a client now (and not again at ``close()``)."""
        if client in self._clients:
            self._clients.remove(client)
        client.close()

    def _close_clients(self) -> None:
        for client in reversed(self._clients):
            try:
                client.close()
            except Exception as error:  # noqa: BLE001 - closing must go on for the others
                print(f"closing {type(client).__name__}: {error}", file=sys.stderr)
        self._clients.clear()
