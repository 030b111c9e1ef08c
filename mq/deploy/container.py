"""What a link or mirror container runs: ``python -m mq.deploy.container link|mirror NAME``.

The compose file gives the deployment as the containers see it in ``$MQ_CLUSTER_JSON``
(``mq.deploy.compose``). This writes it to ``<its data_dir>/cluster.json`` (the
container's volume: ``mq mirror status`` run in the container finds it there) and then
replaces itself (exec: same pid, signals go straight to the process) with the link
process of the pair, or the mirror process of the flow, as ``mq up`` would start them.
Bad input exits 2 with one line saying what was wrong.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from mq.deploy.compose import CLUSTER_ENV, CONTAINER_DATA_DIR
from mq.deploy.services import LINK_MODULE, MIRROR_MODULE
from mq.deploy.topology import CLUSTER_FILE

USAGE = "usage: python -m mq.deploy.container link PAIR | mirror FLOW"


class ContainerError(Exception):
    pass


def write_cluster(environ: dict[str, str] | os._Environ) -> tuple[str, dict]:
    """Write ``$MQ_CLUSTER_JSON`` where the processes read it; (path, document)."""
    text = environ.get(CLUSTER_ENV)
    if not text:
        raise ContainerError(f"${CLUSTER_ENV} is not set: it carries the deployment (x-mq-cluster in a compose file "
                             "written by `mq docker compose`)")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ContainerError(f"${CLUSTER_ENV} is not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("data_dir"), str):
        raise ContainerError(f"${CLUSTER_ENV} is not a cluster document (no data_dir)")
    data_dir = doc["data_dir"] or CONTAINER_DATA_DIR
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, CLUSTER_FILE)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    return path, doc


def command(role: str, name: str, path: str, doc: dict) -> list[str]:
    """The process to become: the link of pair ``name`` or the mirror of flow ``name``."""
    if role == "link":
        known = [str(p.get("name")) for p in doc.get("link_pairs", [])]
        if name not in known:
            raise ContainerError(f"no link pair {name!r} in ${CLUSTER_ENV} (pairs: {', '.join(known) or 'none'})")
        return [sys.executable, "-m", LINK_MODULE, "--cluster", path, "--pair", name]
    if role == "mirror":
        known = [str(f.get("name")) for f in doc.get("flows", [])]
        if name not in known:
            raise ContainerError(f"no mirror flow {name!r} in ${CLUSTER_ENV} (flows: {', '.join(known) or 'none'})")
        return [sys.executable, "-m", MIRROR_MODULE, "run", "--cluster", path, "--flow", name]
    raise ContainerError(f"unknown role {role!r}: {USAGE}")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print(f"mq container: {USAGE}", file=sys.stderr)
        return 2
    try:
        path, doc = write_cluster(os.environ)
        argv_next = command(args[0], args[1], path, doc)
    except (ContainerError, OSError) as exc:
        print(f"mq container: {exc}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv_next[0], argv_next)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
