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
from mq.cli.output import cell, console, human_bytes, print_fitted, print_json, print_table, table


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

    if getattr(args, "status_bootstrap", None):
        return _status_of_brokers(args.status_bootstrap, as_json=args.json)

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


# ---------------------------------------------------------------------- a region by its brokers


def _status_of_brokers(bootstrap: str, *, as_json: bool) -> int:
    """``mq status --bootstrap HOST:PORT[,...]``: the region those brokers belong to, as
    they tell it — no cluster.json needed (a compose cluster, a region on another host).
    Processes are unknown from here: a broker is alive when it answers Metadata."""
    from mq.deploy import BrokerStatus, probe
    from mq.deploy.cluster_view import describe
    from mq.deploy.topology import BrokerSpec, Topology

    addresses = [a.strip() for a in bootstrap.split(",") if a.strip()]
    view = describe(addresses)
    if view is None:
        raise CliError(f"no broker answered at {bootstrap}", "check the address (a compose cluster publishes its "
                       "brokers on the ports its compose file lists), or start one with `mq up`")
    brokers = []
    for b in view.brokers:
        spec = BrokerSpec(b.node_id, f"{b.host}:{b.port}", "")
        topics = partitions = None
        try:
            meta = probe.metadata(spec.listen, timeout_s=1.0)
            user = [t for t in meta.topics if not t.is_internal and not t.name.startswith("__")]
            topics, partitions = len(user), sum(len(t.partitions) for t in user)
        except probe.ProbeError:
            pass
        answering = topics is not None
        brokers.append(BrokerStatus(spec, None, answering, answering, topics, partitions, 0, None))
    topology = Topology(name="", data_dir="", brokers=tuple(b.spec for b in brokers))
    d = {"topology": topology, "brokers": brokers, "live": [b for b in brokers if b.answering], "view": view}
    if as_json:
        region = _region_json(d)
        print_json({"data_dir": "", "running": bool(d["live"]), "regions": [region], "links": [], "flows": [],
                    "lag_exporter": None,
                    "region": None, **{k: v for k, v in region.items() if k != "name"}})
        return 0
    console().print(f"region of {bootstrap} (cluster {view.cluster_id}), as its brokers tell it")
    t = table("broker", "alive", "fenced", "endpoint", "topics", "partitions")
    for b in brokers:
        t.add_row(b.spec.name, "[green]yes[/]" if b.answering else "[red]no answer[/]",
                  _fenced_cell(b.spec.node_id, view), b.spec.listen, cell(b.topics), cell(b.partitions))
    print_table(t)
    _print_cluster(view, d["live"])
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


# Each table's (header, priority): 0 always shown; on a terminal too narrow for the whole
# table, the highest numbers are left out first (``print_fitted`` says which).
BROKER_COLUMNS = (("broker", 0), ("pid", 1), ("alive", 0), ("fenced", 1), ("endpoint", 0), ("metrics", 3),
                  ("topics", 2), ("partitions", 2), ("log size", 2))
PARTITION_COLUMNS = (("topic", 0), ("partition", 0), ("leader", 0), ("leader epoch", 2), ("replicas", 1),
                     ("isr", 0), ("high watermark", 0), ("under-replicated", 0))
LINK_COLUMNS = (("link", 0), ("state", 0), ("latency", 1), ("jitter", 2), ("bandwidth", 2), ("loss", 2),
                ("connections", 3), ("carried", 3), ("control", 4))


def _print_region(d: dict) -> None:
    view = d["view"]
    rows = []
    for b in d["brokers"]:
        alive = ("[green]yes[/]" if b.answering else "[yellow]paused[/]" if b.paused
                 else "[yellow]starting[/]" if b.alive else "[red]no[/]")
        rows.append([b.spec.name, str(b.pid or "-"), alive, _fenced_cell(b.spec.node_id, view), b.spec.listen,
                     b.spec.metrics_endpoint, cell(b.topics), cell(b.partitions), human_bytes(b.log_bytes)])
    print_fitted(BROKER_COLUMNS, rows)
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
    rows = []
    for p in view.partitions:
        leader = "[red]none[/]" if p.offline else str(p.leader)
        rows.append([p.topic, str(p.partition), leader, str(p.leader_epoch), cell(p.replicas), cell(p.isr),
                     "-" if p.high_watermark is None else str(p.high_watermark),
                     "[red]yes[/]" if p.under_replicated else "no"])
    print_fitted(PARTITION_COLUMNS, rows, title="partitions")


# ---------------------------------------------------------------------- links and flows


def _links(data_dir: str, deployment) -> list[dict]:
    from mq.deploy.links import LinkError, Links

    try:
        return [s.to_json() for s in Links(data_dir, timeout_s=1.0).list()]
    except LinkError:
        return []


def _print_links(links: list[dict]) -> None:
    rows = []
    for x in links:
        state = {"up": "[green]up[/]", "cut": f"[red]cut ({x['cut_mode']})[/]",
                 "down": "[red]process down[/]"}.get(x["state"], x["state"])
        if x["state"] == "up" and x.get("stall_left_ms"):
            state = f"[yellow]stalled {x['stall_left_ms'] / 1000:.1f} s[/]"
        bandwidth = "unlimited" if x["bandwidth_mbit"] is None else f"{x['bandwidth_mbit']:g} Mbit/s"
        loss = f"{x['loss'] * 100:g}%"
        rows.append([x["name"], state, f"{x['latency_ms']:g} ms", f"±{x['jitter_ms']:g} ms", bandwidth, loss,
                     cell(x["connections"]), human_bytes(x["bytes"]), x["control"]])
    print_fitted(LINK_COLUMNS, rows, title="links")


def _flows(launcher, deployment) -> list[dict]:
    from mq.deploy.compose_runtime import mirror_status
    from mq.deploy.services import mirror_available

    installed = mirror_available() if deployment.flows else False
    _, mirrors = launcher.service_status()
    by_key = {m.service.key: m for m in mirrors}
    out = []
    for flow in deployment.flows:
        proc = by_key.get(f"mirror/{flow.name}")
        status = _read_json(flow.status_path)
        if status is None and proc is not None and proc.alive:  # a mirror container writes it inside
            status = mirror_status(launcher.data_dir, flow.name)
        out.append({"name": flow.name, "source": flow.source, "target": flow.target, "mode": flow.mode,
                    "process": proc.to_json() if proc is not None else None, "mirror_installed": installed,
                    "status_file": flow.status_path, "mirror_status": status})
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


STOPPED_STATES = ("stopped", "failed-over")
FLOW_COLUMNS = (  # (header, priority): 0 always shown, higher numbers left out first on narrow terminals
    ("flow", 0), ("route", 2), ("mode", 4), ("mirror", 1), ("state", 0), ("lag", 0),
    ("lag estimate", 1), ("lag time", 3), ("source heard", 1), ("latency p99", 3), ("updated", 2))


def flow_rows(flows: list[dict], now_ms: float) -> tuple[list[list[str]], list[str]]:
    """The flows table's rows (``FLOW_COLUMNS``) and the lines printed under it: why a
    flow is not running and, while its source is not heard, what is known and since when."""
    rows, notes = [], []
    for f in flows:
        proc = f["process"] or {}
        mirror = (f"[green]pid {proc['pid']}[/]" if proc.get("alive") else "[yellow]not running[/]"
                  if f["mirror_installed"] else "[yellow]not installed[/]")
        s = f["mirror_status"] or {}
        state = str(s.get("state", "-"))
        colour = {"running": "green", "stalled": "red", "blocked": "red"}.get(state, "yellow")
        unheard = bool(s.get("source_unreachable"))
        lag = cell(s.get("lag_records"))
        if unheard and lag != "-":
            lag = f">={lag}"
        at = s.get("updated_at_ms", now_ms) if state in STOPPED_STATES else now_ms
        estimate = estimate_at(s, at)
        rows.append([f["name"], f"{f['source']}->{f['target']}", f["mode"], mirror, f"[{colour}]{state}[/]", lag,
                     f"~{estimate}" if unheard and estimate is not None else "-", _ms(s.get("lag_ms")),
                     _ago(s.get("source_heard_at_ms"), now_ms), _ms(s.get("replication_latency_p99_ms")),
                     _ago(s.get("updated_at_ms"), now_ms)])
        if s.get("error") or (state in STOPPED_STATES and s.get("reason")):
            notes.append(f"{f['name']}: {state}: {s.get('error') or s['reason']}")
        if unheard:
            # A flow that no longer runs: what it knew when it stopped, not extrapolated to now.
            when = f"when the flow stopped ({_clock(at)}): " if state in STOPPED_STATES else ""
            notes.append(f"{f['name']}: {when}{unheard_line(s, f['source'], at)}")
    return rows, notes


def estimate_at(s: dict, at_ms: float) -> int | None:
    """The flow's lag estimate at ``at_ms`` from its partitions (each silent one: its lower
    bound + its last known rate x its silence; the others: their lag), as the mirror
    computes it (the file's figure is as of its writing). None when the source is heard."""
    if not s.get("source_unreachable"):
        return None
    parts = s.get("partitions") or []
    if not parts:
        return s.get("lag_records_estimate")
    total = 0
    for p in parts:
        lag = p.get("lag_records")
        if lag is None:
            return None
        if p.get("source_unreachable"):
            rate, seen = p.get("source_rate_per_s"), p.get("source_seen_wall_ms")
            if rate is None or seen is None:
                return None
            lag += round(rate * max(0.0, at_ms - seen) / 1000)
        total += lag
    return total


def unheard_line(s: dict, source: str, at_ms: float) -> str:
    """What a flow knows while its source is not heard: lower bound, as of when, estimate."""
    heard, as_of = s.get("source_heard_at_ms"), s.get("lag_as_of_ms")
    silent = max(0.0, at_ms - heard) / 1000 if isinstance(heard, (int, float)) else None
    text = (f"source {source} not heard for {silent:.0f} s (last answer at {_clock(heard)})"
            if silent is not None else f"source {source} never heard")
    if s.get("lag_records") is not None:
        text += (f"; lag >= {s['lag_records']} records as of {_clock(as_of)} (a lower bound: "
                 f"{source} may have taken more since)")
    rate, estimate = s.get("source_rate_per_s"), estimate_at(s, at_ms)
    if estimate is not None and rate is not None and silent is not None:
        text += f"; estimate ~{estimate} records (last known rate {rate:g} rec/s x {silent:.0f} s)"
    else:
        text += "; no estimate (the produce rate was not measured before the source went silent)"
    return text


def _print_flows(flows: list[dict]) -> None:
    rows, notes = flow_rows(flows, time.time() * 1000)
    print_fitted(FLOW_COLUMNS, rows, title="mirror flows")
    out = console()
    for line in notes:  # on a terminal, words wrap at its width; piped, one line each
        out.print(line, markup=False, soft_wrap=not out.is_terminal)


def _ago(ms, now_ms: float) -> str:
    return f"{max(0.0, now_ms - ms) / 1000:.0f} s ago" if isinstance(ms, (int, float)) and not isinstance(ms, bool) \
        else "-"


def _clock(ms) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000)) if isinstance(ms, (int, float)) else "unknown"


def _ms(value) -> str:
    return f"{value:g} ms" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path
