"""``<data-dir>/cluster.json``: what ``mq up`` started, read and written safely.

The file is the ``Deployment`` (``Deployment.to_json``: regions, links, link pairs,
flows; schema in docs/reference/regions.md) plus ``processes``: for every process
started, keyed ``<region>/broker-<id>``, ``link/<pair>`` or ``mirror/<flow>``, its pid,
start time, command line and log. ``mq status``, ``mq down``, ``mq broker``, ``mq link``
and the mirror processes read it; ``mq up``, ``mq broker restart`` and ``mq link``
change it, each under an exclusive lock (``.cluster.lock``) and by atomic rename, so a
reader never sees half a file and two writers never lose each other's change.

``<data-dir>/topology.json`` stays after ``mq down``: it says which topology the data
directory's brokers belong to, so a later ``mq up`` of another topology on the same
directory is refused instead of starting brokers on foreign metadata logs.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from mq.deploy.errors import DeployError
from mq.deploy.topology import CLUSTER_FILE, Deployment

LOCK_FILE = ".cluster.lock"
MARKER_FILE = "topology.json"


def state_path(data_dir: str) -> str:
    return os.path.join(data_dir, CLUSTER_FILE)


@contextmanager
def locked(data_dir: str) -> Iterator[None]:
    """Hold the data directory's cluster.json lock (blocking)."""
    os.makedirs(data_dir, exist_ok=True)
    with open(os.path.join(data_dir, LOCK_FILE), "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def read_state(data_dir: str) -> dict | None:
    """The state, or None when nothing was started here (or by an mq too old to read)."""
    path = state_path(data_dir)
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise DeployError(f"cannot read {path}: {exc}",
                          "remove it after checking that no mq process runs (`ps aux | grep mq`)") from None
    if not isinstance(state, dict) or state.get("format") not in (1, 2):
        return None
    if state.get("format") == 1:  # before regions: processes were keyed broker-<id>
        region = state["topology"]["name"]
        state = {**Deployment.from_json(state).to_json(),
                 "processes": {f"{region}/{k}": v for k, v in state.get("processes", {}).items()}}
    return state


def write_state(data_dir: str, deployment: Deployment, processes: dict[str, dict]) -> None:
    _write_json(state_path(data_dir), {**deployment.to_json(), "processes": processes})


def update_state(data_dir: str, change: Callable[[dict], dict | None]) -> dict | None:
    """Under the lock: read the state, let ``change`` return the new one (None: remove the
    file), write it. Returns what was written. Nothing happens when there is no state."""
    with locked(data_dir):
        state = read_state(data_dir)
        if state is None:
            return None
        new = change(state)
        if new is None:
            remove_state(data_dir)
        else:
            _write_json(state_path(data_dir), new)
        return new


def remove_state(data_dir: str) -> None:
    try:
        os.remove(state_path(data_dir))
    except FileNotFoundError:
        pass


def deployment_of(state: dict) -> Deployment:
    return Deployment.from_json(state)


def _write_json(path: str, doc: Any) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------------- the data's topology


def fingerprint(deployment: Deployment) -> dict[str, Any]:
    """What must stay the same for brokers to restart on their data: per region, its
    name, data directory, broker ids and voters. Addresses and configs may change."""
    regions = []
    for r in deployment.regions:
        voters = list(r.voters) or [b.node_id for b in r.brokers]  # a lone broker is its own quorum
        regions.append({"name": r.name, "data_dir": r.data_dir, "brokers": sorted(b.node_id for b in r.brokers),
                        "voters": sorted(voters)})
    return {"regions": regions}


def describe_fingerprint(doc: dict[str, Any]) -> str:
    """``region local (brokers 1; voters 1)``, one clause per region."""
    parts = []
    for r in doc.get("regions", []):
        brokers = ", ".join(str(b) for b in r.get("brokers", []))
        parts.append(f"region {r.get('name')} (broker{'s' if len(r.get('brokers', [])) != 1 else ''} {brokers}; "
                     f"voters {', '.join(str(v) for v in r.get('voters', []))})")
    return ", ".join(parts) or "no region"


def read_marker(data_dir: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(data_dir, MARKER_FILE), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def write_marker(data_dir: str, deployment: Deployment) -> None:
    os.makedirs(data_dir, exist_ok=True)
    _write_json(os.path.join(data_dir, MARKER_FILE), {"format": 1, **fingerprint(deployment)})


def broker_dirs(data_dir: str) -> list[str]:
    """Broker data directories under ``data_dir`` (``broker-N`` directly, or one level
    down for regions), as absolute paths, sorted."""
    found = []
    for parent in [data_dir, *_subdirs(data_dir)]:
        found += [os.path.join(parent, d) for d in _subdirs(parent, full=False) if d.startswith("broker-")]
    return sorted(found)


def _subdirs(path: str, *, full: bool = True) -> list[str]:
    try:
        names = sorted(e.name for e in os.scandir(path) if e.is_dir())
    except OSError:
        return []
    return [os.path.join(path, n) for n in names] if full else names


def foreign_data(data_dir: str, deployment: Deployment) -> str | None:
    """Why ``data_dir`` holds another topology than ``deployment`` (None: it is free or
    the same one). The marker decides; without one (an older mq), broker directories
    that ``deployment`` would not use do."""
    marker = read_marker(data_dir)
    if marker is not None:
        recorded = {"regions": marker.get("regions", [])}
        if recorded != fingerprint(deployment):
            return describe_fingerprint(recorded)
        return None
    mine = {b.data_dir for r in deployment.regions for b in r.brokers}
    found = broker_dirs(data_dir)
    stray = [d for d in found if d not in mine]
    if stray:
        shown = ", ".join(os.path.relpath(d, data_dir) for d in stray[:4])
        return f"broker data ({shown}) that this topology does not use"
    for region in deployment.regions:  # some brokers of a region have data, others none: a smaller region's
        have = [b for b in region.brokers if b.data_dir in found]
        if have and len(have) < len(region.brokers):
            shown = ", ".join(os.path.relpath(b.data_dir, data_dir) for b in have)
            return f"data of {shown} only, not of the other brokers of region {region.name} (a smaller region?)"
    return None
