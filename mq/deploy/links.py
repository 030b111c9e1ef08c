"""Change the WAN links of a running deployment: ``Links(".mq").set("east", "west", latency_ms=80)``.

What ``mq link list|set|cut|heal|reset|stall`` does, and what ``mq.lab`` wraps for
notebooks. Each call finds the link in ``cluster.json``, sends one JSON-lines request to
its link process's control port (``mq.deploy.link``) and records the new settings and
cut state in ``cluster.json``, so a link process started again (``mq up`` after a crash)
comes back as it was left. A link is a direction: ``set("east", "west", ...)`` shapes
the bytes flowing from east to west; ``both=True`` also acts on west->east.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from mq.deploy import state as cluster_state
from mq.deploy.errors import DeployError
from mq.deploy.shaping import LinkSettings
from mq.deploy.topology import CLUSTER_FILE, Deployment, LinkSpec, split_host_port

CONTROL_TIMEOUT_S = 3.0
MAX_ANSWER_BYTES = 1024 * 1024


class LinkError(DeployError):
    """A link request that cannot be done: unknown link, process down, bad setting."""


@dataclass(frozen=True)
class LinkStatus:
    """One directed link as its process reports it (``state`` ``down`` when the process
    does not answer; then the settings are the recorded ones and counters are None)."""

    name: str
    source: str
    target: str
    settings: LinkSettings
    state: str  # "up" | "cut" | "down" (the link process does not answer)
    cut_mode: str | None
    pair: str
    control: str
    stall_left_ms: float = 0.0
    connections: int | None = None
    bytes: int | None = None
    loss_stalls: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "target": self.target, **self.settings.to_json(),
                "state": self.state, "cut_mode": self.cut_mode, "pair": self.pair, "control": self.control,
                "stall_left_ms": self.stall_left_ms, "connections": self.connections, "bytes": self.bytes,
                "loss_stalls": self.loss_stalls}


def control_request(address: str, request: dict[str, Any], *, timeout_s: float = CONTROL_TIMEOUT_S) -> dict:
    """Send one request to a link's control port; its answer. OSError/ValueError when it
    does not answer (refused, timed out, garbled)."""
    host, port = split_host_port(address)
    deadline = time.monotonic() + timeout_s
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = sock.recv(65536)
            if not chunk or len(data) > MAX_ANSWER_BYTES:
                raise ValueError(f"the link control port {address} closed without a full answer")
            data += chunk
    answer = json.loads(data)
    if not isinstance(answer, dict):
        raise ValueError(f"the link control port {address} answered {answer!r}")  # noqa: TRY004 - garbled, not a type
    return answer


class Links:
    """The links of the deployment recorded in ``cluster`` (a data directory or its
    cluster.json; default ``.mq``)."""

    def __init__(self, cluster: str | os.PathLike = ".mq", *, timeout_s: float = CONTROL_TIMEOUT_S) -> None:
        path = os.path.abspath(cluster)
        self.data_dir = os.path.dirname(path) if os.path.basename(path) == CLUSTER_FILE else path
        self.timeout_s = timeout_s

    def _deployment(self) -> Deployment:
        state = cluster_state.read_state(self.data_dir)
        if state is None:
            raise LinkError(f"nothing runs under {_shown(self.data_dir)} ({CLUSTER_FILE} not found)",
                            "start a topology with links with `mq up` (or pass --data-dir)")
        deployment = cluster_state.deployment_of(state)
        if not deployment.links:
            raise LinkError(f"the topology under {_shown(self.data_dir)} has no links "
                            f"(regions: {', '.join(deployment.region_names)})",
                            "links join several regions: start a file with regions: and links: "
                            "(regions/default.yaml)")
        return deployment

    def _find(self, deployment: Deployment, source: str, target: str, both: bool) -> list[LinkSpec]:
        names = deployment.region_names
        for region in (source, target):
            if region not in names:
                raise LinkError(f"no region {region!r} here (regions: {', '.join(names)})",
                                "name two regions of the running topology, e.g. `mq link set east west ...`")
        wanted = [(source, target), (target, source)] if both else [(source, target)]
        links = []
        for s, t in wanted:
            link = deployment.link(s, t)
            if link is None:
                have = ", ".join(x.name for x in deployment.links)
                raise LinkError(f"no link {s}->{t} (links: {have})", "see `mq link list`")
            links.append(link)
        return links

    def _ask(self, deployment: Deployment, link: LinkSpec, request: dict[str, Any]) -> dict:
        pair = deployment.pair(link.source, link.target)
        assert pair is not None  # every link has a pair (regions_file)
        try:
            answer = control_request(pair.control, {**request, "link": link.name}, timeout_s=self.timeout_s)
        except (OSError, ValueError) as exc:
            raise LinkError(f"the link process {pair.name} does not answer on {pair.control} ({exc})",
                            f"start it again with `mq up` (its log: {_shown(pair.log_path)})") from None
        if not answer.get("ok"):
            raise LinkError(str(answer.get("error", "refused")), str(answer.get("todo", "see `mq link --help`")))
        return answer

    def list(self) -> list[LinkStatus]:
        """Every link: live from its process, or ``down`` with the recorded settings."""
        deployment = self._deployment()
        out = []
        for pair in deployment.pairs:
            try:
                answer = control_request(pair.control, {"op": "list"}, timeout_s=self.timeout_s)
                live = {x["name"]: x for x in answer.get("links", [])}
            except (OSError, ValueError):
                live = {}
            for link in deployment.links:
                if deployment.pair(link.source, link.target) is pair:
                    out.append(_status(link, pair.name, pair.control, live.get(link.name)))
        order = [x.name for x in deployment.links]
        return sorted(out, key=lambda s: order.index(s.name))

    def set(self, source: str, target: str, *, both: bool = False, **settings: Any) -> list[LinkStatus]:
        """Change latency_ms, jitter_ms, bandwidth_mbit (0: unlimited), loss, loss_stall_ms."""
        if not settings:
            raise LinkError("nothing to set", "pass at least one of --latency-ms, --jitter-ms, --bandwidth-mbit, "
                            "--loss, --loss-stall-ms")
        try:
            problems = LinkSettings().with_changes(**settings).problems()
        except (ValueError, TypeError) as exc:
            problems = [str(exc)]
        if problems:
            raise LinkError(problems[0], "see `mq link set --help`")
        return self._each(source, target, both, {"op": "set", **settings})

    def cut(self, source: str, target: str, *, mode: str = "blackhole", both: bool = False) -> list[LinkStatus]:
        """Cut: ``blackhole`` holds what crosses (delivered on heal), ``refuse`` resets it."""
        return self._each(source, target, both, {"op": "cut", "mode": mode})

    def heal(self, source: str | None = None, target: str | None = None, *, both: bool = False) -> list[LinkStatus]:
        """Heal one link (or both directions), or every link when no region is named."""
        if source is None and target is None:
            deployment = self._deployment()
            return [self._apply(deployment, link, {"op": "heal"}) for link in deployment.links]
        if source is None or target is None:
            raise LinkError("name both regions of the link, or none to heal every link", "e.g. `mq link heal east west`")
        return self._each(source, target, both, {"op": "heal"})

    def reset(self, source: str, target: str, *, both: bool = False) -> list[LinkStatus]:
        """Reset (abort) the open connections crossing the link; it stays up."""
        return self._each(source, target, both, {"op": "reset"})

    def stall(self, source: str, target: str, ms: float, *, both: bool = False) -> list[LinkStatus]:
        """Hold every byte crossing the link for ``ms`` milliseconds from now."""
        return self._each(source, target, both, {"op": "stall", "ms": ms})

    def _each(self, source: str, target: str, both: bool, request: dict[str, Any]) -> list[LinkStatus]:
        deployment = self._deployment()
        return [self._apply(deployment, link, request) for link in self._find(deployment, source, target, both)]

    def _apply(self, deployment: Deployment, link: LinkSpec, request: dict[str, Any]) -> LinkStatus:
        pair = deployment.pair(link.source, link.target)
        assert pair is not None
        live = self._ask(deployment, link, request)["link"]
        if request["op"] in ("set", "cut", "heal"):
            self._record(link.name, LinkSettings.from_json(live), live.get("cut_mode"))
        return _status(link, pair.name, pair.control, live)

    def _record(self, name: str, settings: LinkSettings, cut_mode: str | None) -> None:
        def change(state: dict) -> dict:
            for entry in state.get("links", []):
                if entry.get("name") == name:
                    entry.update(settings.to_json())
                    entry["cut_mode"] = cut_mode
                    entry["state"] = "up" if cut_mode is None else "cut"
            return state

        cluster_state.update_state(self.data_dir, change)


def _status(link: LinkSpec, pair: str, control: str, live: dict | None) -> LinkStatus:
    if live is None:
        return LinkStatus(link.name, link.source, link.target, link.settings, "down", link.cut_mode, pair, control)
    return LinkStatus(link.name, link.source, link.target, LinkSettings.from_json(live), str(live["state"]),
                      live.get("cut_mode"), pair, control, float(live.get("stall_left_ms", 0.0)),
                      live.get("connections"), live.get("bytes"), live.get("loss_stalls"))


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel
