"""The link process: ``python -m mq.deploy.link --cluster CLUSTER_JSON --pair east-west``.

``mq up`` starts one per pair of regions joined by a link. It carries both directions
(east->west and west->east, each a ``Direction``: shaper plus cut state) and listens
once per broker of each region: clients in west reach east's broker 1 only through its
listener there (``source_address_map`` in cluster.json), so bytes flowing east->west on
any such connection take the east->west direction. Traffic inside a region never comes
here.

Run-time changes come over a control port, one JSON object per line each way
(``mq link``, ``mq.deploy.links.Links``)::

    {"op": "list"}                                   -> {"ok": true, "pair": "east-west", "links": [LINK, ...]}
    {"op": "set", "link": "east->west", "latency_ms": 80, "jitter_ms": 10,
     "bandwidth_mbit": 50, "loss": 0.01, "loss_stall_ms": 200}      -> {"ok": true, "link": LINK}
    {"op": "cut", "link": "east->west", "mode": "blackhole"}        -> {"ok": true, "link": LINK, "reset": N}
    {"op": "heal", "link": "east->west"}                            -> {"ok": true, "link": LINK}
    {"op": "reset", "link": "east->west"}                           -> {"ok": true, "link": LINK, "reset": N}
    {"op": "stall", "link": "east->west", "ms": 3000}               -> {"ok": true, "link": LINK}
    anything wrong                                   -> {"ok": false, "error": "...", "todo": "..."}

``LINK`` is the link's name, source, target, settings (``mq.deploy.shaping``), ``state``
(``up``/``cut``), ``cut_mode``, ``stall_left_ms``, open ``connections``, and the
``bytes``, ``chunks`` and ``loss_stalls`` it carried. Omitted settings keep their value;
``bandwidth_mbit`` 0 means unlimited. ``reset`` aborts the open connections crossing
the link (both ends see a reset) and leaves it up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Sequence
from typing import Any

from mq.core.rng import Rng
from mq.deploy.link_proxy import CUT_MODES, Direction, LinkListener
from mq.deploy.shaping import SETTING_NAMES, LinkSettings
from mq.deploy.topology import Deployment, LinkPair, load_cluster, split_host_port

MAX_CONTROL_LINE = 64 * 1024
log = logging.getLogger("mq.link")


class LinkControlError(Exception):
    def __init__(self, what: str, todo: str) -> None:
        self.what = what
        self.todo = todo
        super().__init__(what)


class LinkPairState:
    """The two directions of a pair and what the control port may do to them."""

    def __init__(self, deployment: Deployment, pair: LinkPair, *, seed: int = 0) -> None:
        self.pair = pair
        a, b = pair.regions
        self.directions: dict[str, Direction] = {}
        rng = Rng(seed)
        for source, target in ((a, b), (b, a)):
            spec = deployment.link(source, target)
            settings = spec.settings if spec is not None else LinkSettings()
            direction = Direction(f"{source}->{target}", settings, rng=rng.fork("link", source, target))
            if spec is not None and spec.cut_mode is not None:
                direction.cut(spec.cut_mode)
            self.directions[direction.name] = direction
        self.listeners: list[LinkListener] = []
        for route in pair.routes:
            client = b if route.region == a else a
            host, port = split_host_port(route.listen)
            self.listeners.append(LinkListener(
                split_host_port(route.target), self.directions[f"{client}->{route.region}"],
                self.directions[f"{route.region}->{client}"], host=host, port=port))

    def link_json(self, direction: Direction, now_ms: float) -> dict[str, Any]:
        source, _, target = direction.name.partition("->")
        shaper = direction.shaper
        return {"name": direction.name, "source": source, "target": target, **shaper.settings.to_json(),
                "state": "up" if direction.is_up else "cut", "cut_mode": direction.cut_mode,
                "stall_left_ms": round(shaper.stall_left_ms(now_ms), 1),
                "connections": direction.open_connections(), "bytes": shaper.bytes, "chunks": shaper.chunks,
                "loss_stalls": shaper.loss_stalls}

    def handle(self, request: Any, now_ms: float) -> dict[str, Any]:
        """One control request -> its answer; never raises for a bad request."""
        try:
            return self._handle(request, now_ms)
        except LinkControlError as exc:
            return {"ok": False, "error": exc.what, "todo": exc.todo}

    def _direction(self, request: dict) -> Direction:
        name = request.get("link")
        if name not in self.directions:
            raise LinkControlError(f"no link {name!r} in the link process {self.pair.name}",
                                   f"use one of: {', '.join(self.directions)}")
        return self.directions[name]

    def _handle(self, request: Any, now_ms: float) -> dict[str, Any]:
        if not isinstance(request, dict) or not isinstance(request.get("op"), str):
            raise LinkControlError("a control request is a JSON object with an op", 'send {"op": "list"}')
        op = request["op"]
        if op == "list":
            return {"ok": True, "pair": self.pair.name,
                    "links": [self.link_json(d, now_ms) for d in self.directions.values()]}
        if op not in ("set", "cut", "heal", "reset", "stall"):
            raise LinkControlError(f"unknown op {op!r}", "use list, set, cut, heal, reset or stall")
        direction = self._direction(request)
        answer: dict[str, Any] = {"ok": True}
        if op == "set":
            changes = {k: request[k] for k in SETTING_NAMES if k in request}
            unknown = sorted(set(request) - {"op", "link", *SETTING_NAMES})
            if unknown:
                raise LinkControlError(f"unknown link setting {unknown[0]!r}", f"use {', '.join(SETTING_NAMES)}")
            try:
                settings = direction.shaper.settings.with_changes(**changes)
                direction.shaper.update(settings)
            except (ValueError, TypeError) as exc:
                raise LinkControlError(str(exc), "see `mq link set --help`") from None
            log.info("link set link=%s %s", direction.name,
                     " ".join(f"{k}={v}" for k, v in settings.to_json().items()))
        elif op == "cut":
            mode = request.get("mode", "blackhole")
            if mode not in CUT_MODES:
                raise LinkControlError(f"{mode!r} is not a cut mode", f"use one of: {', '.join(CUT_MODES)}")
            answer["reset"] = direction.cut(mode)
            log.warning("link cut link=%s mode=%s reset=%d", direction.name, mode, answer["reset"])
        elif op == "heal":
            direction.heal()
            log.warning("link healed link=%s", direction.name)
        elif op == "reset":
            answer["reset"] = sum(listener.abort_connections() for listener in self.listeners
                                  if direction in (listener.forward, listener.backward))
            log.warning("link reset link=%s connections=%d", direction.name, answer["reset"])
        else:
            ms = request.get("ms")
            if isinstance(ms, bool) or not isinstance(ms, (int, float)) or ms < 0:
                raise LinkControlError(f"a stall needs ms >= 0, not {ms!r}", 'send {"op": "stall", "ms": 3000}')
            direction.shaper.stall(now_ms, float(ms))
            log.warning("link stalled link=%s ms=%s", direction.name, ms)
        answer["link"] = self.link_json(direction, now_ms)
        return answer


async def _control(state: LinkPairState, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    loop = asyncio.get_running_loop()
    try:
        while line := await reader.readline():
            if len(line) > MAX_CONTROL_LINE:
                break
            try:
                request = json.loads(line)
            except ValueError:
                answer = {"ok": False, "error": "a control line must be JSON", "todo": 'send {"op": "list"}'}
            else:
                answer = state.handle(request, loop.time() * 1000)
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
    except (OSError, ValueError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def serve(deployment: Deployment, pair: LinkPair) -> None:
    """Run the pair's listeners and control port until SIGTERM or SIGINT."""
    state = LinkPairState(deployment, pair)
    for listener in state.listeners:
        await listener.start()
    host, port = split_host_port(pair.control)
    control = await asyncio.start_server(lambda r, w: _control(state, r, w), host, port, reuse_address=True,
                                         limit=MAX_CONTROL_LINE)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    for route, listener in zip(pair.routes, state.listeners, strict=True):
        log.info("link route listen=%s:%d region=%s node_id=%d target=%s", listener.host, listener.port,
                 route.region, route.node_id, route.target)
    log.info("link ready pair=%s control=%s %s", pair.name, pair.control,
             " ".join(f"{n}=[{d.shaper.settings.latency_ms:g}ms,{'up' if d.is_up else 'cut'}]"
                      for n, d in state.directions.items()))
    try:
        await stop.wait()
    finally:
        control.close()
        await asyncio.gather(*(listener.close() for listener in state.listeners))
        log.info("link stopped pair=%s", pair.name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mq.deploy.link",
                                     description="Run the WAN link between two regions of a cluster.json.")
    parser.add_argument("--cluster", required=True, help="the cluster.json `mq up` wrote")
    parser.add_argument("--pair", required=True, help="the link pair, e.g. east-west")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        deployment = load_cluster(args.cluster)
    except (OSError, ValueError) as exc:
        log.error("link cannot read cluster=%s error=%s", args.cluster, exc)
        return 2
    pair = next((p for p in deployment.pairs if p.name == args.pair), None)
    if pair is None:
        log.error("link unknown pair=%s known=%s", args.pair, ",".join(p.name for p in deployment.pairs))
        return 2
    try:
        asyncio.run(serve(deployment, pair))
    except OSError as exc:  # a port taken between `mq up`'s check and the bind
        log.error("link cannot listen pair=%s error=%s", pair.name, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
