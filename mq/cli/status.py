"""``mq status``: every region ``mq up`` started, the links between them, the mirror flows.

Per region: the brokers as processes (``mq.deploy.Launcher.status``) and as the
controller sees them, the active controller and every partition
(``mq.deploy.cluster_view``). Then each link, live from its link process
(``mq.deploy.links.Links``), the lag exporter (its process and status file), and each
mirror flow: its process, and what the mirror
itself reports in ``<data_dir>/mirror-<flow>/status.json`` when it writes one (``state``,
``lag_records``, ``lag_ms``, ``replication_latency_p99_ms``, ``updated_at_ms``, ``error``
are shown when present; ``--json`` includes the whole file).

``--json`` prints one document: ``regions`` (one entry per region) plus ``links`` and
``flows``; with one region the region's keys also sit at the top level, as before regions.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from mq.cli.common import CliError
from mq.cli.output import cell, console, human_bytes, print_json, print_table, table


def run_status(args: argparse.Namespace) -> int:
    if args.watch is None or args.json:
        return _status_once(args)
    if args.watch <= 0:
        raise CliError(f"--watch {args.watch:g} is not a positive number of seconds", "try --watch 1")
    out = console()
    try:
        while True:
            out.clear()
            out.print(f"[dim]{time.strftime('%H:%M:%S')} — every {args.watch:g} s, Ctrl-C to stop[/]")
            try:
                _status_once(args)
            except CliError as err:  # the region may be down for a moment: keep watching
                out.print(f"[red]{err}[/]")
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return 0


def _status_once(args: argparse.Namespace) -> int:
    from mq.deploy import Launcher

    launcher = Launcher(args.data_dir)
    deployment = launcher.recorded()
    brokers = launcher.status()
    running = any(b.alive for b in brokers)
    regions = [_region_doc(r, [b for b in brokers if b.region == r.name]) for r in deployment.regions] \
        if deployment is not None else []
    links = _links(launcher.data_dir, deployment) if deployment is not None and deployment.links else []
    flows = _flows(launcher, deployment) if deployment is not None else []
    lag = _lag_exporter(launcher)
    if args.json:
        doc = {"data_dir": launcher.data_dir, "running": running,
               "regions": [_region_json(d) for d in regions], "links": links, "flows": flows, "lag_exporter": lag}
        if len(regions) <= 1:  # one region: its keys at the top too, as before regions
            one = _region_json(regions[0]) if regions else {
                "name": None, "bootstrap": None, "voters": [], "brokers": [], "answered": False,
                "controller": None, "partitions": []}
            doc.update({"region": one["name"], **{k: v for k, v in one.items() if k != "name"}})
        print_json(doc)
        return 0 if running else 1
    if not brokers:
        raise CliError(f"no broker runs under {_shown(launcher.data_dir)}", "start one with `mq up`")
    several = len(regions) > 1
    for d in regions:
        if several:
            console().print(f"[bold]region {d['topology'].name}[/]  bootstrap {d['topology'].bootstrap}")
        _print_region(d)
    if not running:
        raise CliError("no broker is running (cluster.json is stale)",
                       f"see {_shown(brokers[0].spec.log_path)}; start again with `mq up` "
                       "(or one broker with `mq broker restart ID`)")
    if links:
        _print_links(links)
    if flows:
        _print_flows(flows)
    if lag is not None:
        _print_lag_exporter(lag)
    return 0


# ---------------------------------------------------------------------- regions


def _region_doc(topology, brokers) -> dict:
    from mq.deploy.cluster_view import describe

    live = [b for b in brokers if b.alive and not b.paused]
    view = describe([b.spec.listen for b in live], skip=[b.spec.node_id for b in brokers if b not in live]) \
        if live else None
    return {"topology": topology, "brokers": brokers, "live": live, "view": view}


def _region_json(d: dict) -> dict:
    topology, view = d["topology"], d["view"]
    return {"name": topology.name, "bootstrap": topology.bootstrap, "voters": list(topology.voters),
            "brokers": [_broker_json(b, view) for b in d["brokers"]], "answered": view is not None,
            "controller": ({"id": view.controller_id, "epoch": view.controller_epoch}
                           if view is not None and view.controller_id >= 0 else None),
            "partitions": [p.to_json() for p in view.partitions] if view is not None else []}


def _broker_json(b, view) -> dict:
    doc = b.to_json()
    seen = view.broker(b.spec.node_id) if view is not None else None
    doc["registered"] = None if view is None else seen is not None
    doc["fenced"] = None if seen is None else seen.fenced
    doc["state"] = "alive" if b.answering else "paused" if b.paused else "starting" if b.alive else "down"
    return doc


def _print_region(d: dict) -> None:
    view = d["view"]
    t = table("broker", "pid", "alive", "fenced", "endpoint", "metrics", "topics", "partitions", "log size")
    for b in d["brokers"]:
        alive = ("[green]yes[/]" if b.answering else "[yellow]paused[/]" if b.paused
                 else "[yellow]starting[/]" if b.alive else "[red]no[/]")
        t.add_row(b.spec.name, str(b.pid or "-"), alive, _fenced_cell(b.spec.node_id, view), b.spec.listen,
                  b.spec.metrics_endpoint, cell(b.topics), cell(b.partitions), human_bytes(b.log_bytes))
    print_table(t)
    if any(b.alive for b in d["brokers"]):
        _print_cluster(view, d["live"])


def _fenced_cell(node_id: int, view) -> str:
    if view is None:
        return "-"
    seen = view.broker(node_id)
    if seen is None:
        return "[yellow]unregistered[/]"
    return "[red]yes[/]" if seen.fenced else "no"


def _print_cluster(view, live) -> None:
    out = console()
    if view is None:
        asked = ", ".join(b.spec.name for b in live) or "none is alive and unpaused"
        out.print(f"[yellow]no broker answered a Metadata request[/] (asked: {asked}): "
                  "controller and partitions unknown")
        return
    if view.controller_id >= 0:
        epoch = f", epoch {view.controller_epoch}" if view.controller_epoch >= 0 else ""
        out.print(f"active controller: broker {view.controller_id}{epoch}")
    else:
        out.print("[yellow]active controller: none[/] (no quorum: a majority of the voters must run)")
    if not view.partitions:
        out.print("partitions: none (create a topic with `mq topic create`)")
        return
    t = table("topic", "partition", "leader", "leader epoch", "replicas", "isr", "high watermark",
              "under-replicated", title="partitions")
    for p in view.partitions:
        leader = "[red]none[/]" if p.offline else str(p.leader)
        t.add_row(p.topic, str(p.partition), leader, str(p.leader_epoch), cell(p.replicas), cell(p.isr),
                  "-" if p.high_watermark is None else str(p.high_watermark),
                  "[red]yes[/]" if p.under_replicated else "no")
    print_table(t)


# ---------------------------------------------------------------------- links and flows


def _links(data_dir: str, deployment) -> list[dict]:
    from mq.deploy.links import LinkError, Links

    try:
        return [s.to_json() for s in Links(data_dir, timeout_s=1.0).list()]
    except LinkError:
        return []


def _print_links(links: list[dict]) -> None:
    t = table("link", "state", "latency", "jitter", "bandwidth", "loss", "connections", "carried",
              "control", title="links")
    for x in links:
        state = {"up": "[green]up[/]", "cut": f"[red]cut ({x['cut_mode']})[/]",
                 "down": "[red]process down[/]"}.get(x["state"], x["state"])
        if x["state"] == "up" and x.get("stall_left_ms"):
            state = f"[yellow]stalled {x['stall_left_ms'] / 1000:.1f} s[/]"
        bandwidth = "unlimited" if x["bandwidth_mbit"] is None else f"{x['bandwidth_mbit']:g} Mbit/s"
        loss = f"{x['loss'] * 100:g}%"
        t.add_row(x["name"], state, f"{x['latency_ms']:g} ms", f"±{x['jitter_ms']:g} ms", bandwidth, loss,
                  cell(x["connections"]), human_bytes(x["bytes"]), x["control"])
    print_table(t)


def _flows(launcher, deployment) -> list[dict]:
    from mq.deploy.services import mirror_available

    installed = mirror_available() if deployment.flows else False
    _, mirrors = launcher.service_status()
    by_key = {m.service.key: m for m in mirrors}
    out = []
    for flow in deployment.flows:
        proc = by_key.get(f"mirror/{flow.name}")
        out.append({"name": flow.name, "source": flow.source, "target": flow.target, "mode": flow.mode,
                    "process": proc.to_json() if proc is not None else None, "mirror_installed": installed,
                    "status_file": flow.status_path, "mirror_status": _read_json(flow.status_path)})
    return out


def _lag_exporter(launcher) -> dict | None:
    """The lag exporter `mq up` started (None: it started none), and its status file."""
    lag = launcher.lag_exporter_status()
    if lag is None:
        return None
    status = _read_json(os.path.join(lag.service.data_dir, "status.json"))
    return {**lag.to_json(), "metrics": (status or {}).get("metrics") or None, "status": status}


def _print_lag_exporter(lag: dict) -> None:
    if not lag["alive"]:
        console().print(f"lag exporter: [yellow]not running[/] (see {_shown(lag['log'])})")
        return
    status = lag["status"] or {}
    rounds = sum(int(r.get("rounds") or 0) for r in (status.get("regions") or {}).values())
    updated = status.get("updated_ms")
    age = f", updated {max(0.0, time.time() * 1000 - updated) / 1000:.1f} s ago" if updated else ""
    console().print(f"lag exporter: pid {lag['pid']}, {rounds} rounds to {status.get('topic', '__lag_snapshots')}"
                    f"{age}, /metrics at http://{lag['metrics'] or '-'}/metrics (`mq lag status`)")


def _read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _print_flows(flows: list[dict]) -> None:
    t = table("flow", "from", "to", "mode", "mirror", "state", "lag (records)", "lag", "latency p99", "updated",
              title="mirror flows")
    now_ms = time.time() * 1000
    for f in flows:
        proc = f["process"] or {}
        mirror = (f"[green]pid {proc['pid']}[/]" if proc.get("alive") else "[yellow]not running[/]"
                  if f["mirror_installed"] else "[yellow]not installed[/]")
        s = f["mirror_status"] or {}
        updated = s.get("updated_at_ms")
        age = f"{max(0.0, now_ms - updated) / 1000:.0f} s ago" if isinstance(updated, (int, float)) else "-"
        state = str(s.get("state", "-"))
        if s.get("error"):
            state = f"[red]{state}: {s['error']}[/]"
        t.add_row(f["name"], f["source"], f["target"], f["mode"], mirror, state, cell(s.get("lag_records")),
                  _ms(s.get("lag_ms")), _ms(s.get("replication_latency_p99_ms")), age)
    print_table(t)


def _ms(value) -> str:
    return f"{value:g} ms" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path
