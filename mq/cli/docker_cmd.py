"""``mq docker compose [FILE]`` and ``mq docker attach [COMPOSE_FILE]``: regions in containers.

``compose`` writes a Docker Compose file for any region file (``mq.deploy.compose``: a
service per broker, a network per region, the link proxies between them, a mirror per
flow, every port moved by ``--port-offset`` and published on 127.0.0.1).
``docker/compose.yaml`` is its output for ``regions/default.yaml``.

``attach`` reads such a file and writes ``<data-dir>/cluster.json`` (default ``./.mq``)
describing the running containers as this host reaches them, so the commands that find
a topology there — ``mq status``, ``mq link``, ``--region NAME``, ``mq mirror failover``
— work on the compose cluster. ``mq up`` and ``mq down`` refuse that directory (Docker
starts and stops these containers).
"""

from __future__ import annotations

import argparse
import os
import sys

from mq.cli.common import EXIT_USAGE, CliError
from mq.cli.output import console

DEFAULT_COMPOSE_FILE = os.path.join("docker", "compose.yaml")


def register(sub: argparse._SubParsersAction) -> None:
    docker = sub.add_parser(
        "docker", help="regions in Docker containers: write a compose file, attach to a running one",
        description="Run the regions of a region file in Docker containers (docs/how-to/run-regions-in-docker.md).")
    verbs = docker.add_subparsers(dest="verb", metavar="VERB", title="verbs", parser_class=type(docker))
    verbs.required = True

    p = verbs.add_parser(
        "compose", help="write a Docker Compose file for a region file",
        description="Write a Docker Compose file (v1 `docker-compose` and `docker compose` both read it) that runs\n"
                    "FILE's regions in containers: per region a network and one container per broker sharing the\n"
                    "region's network namespace, a link container per pair of regions (latency, cuts: `mq link`),\n"
                    "a mirror container per flow. Every port of FILE moves by --port-offset and is published on\n"
                    "127.0.0.1 (brokers, their metrics, link control ports); the header lists them.\n"
                    "Example: mq docker compose regions/default.yaml > docker/compose.yaml")
    p.add_argument("file", nargs="?", metavar="FILE", help="region file (default: regions/default.yaml)")
    p.add_argument("-o", "--output", metavar="PATH", help="write here instead of standard output")
    p.add_argument("--port-offset", type=int, default=10_000, metavar="N",
                   help="added to every port of FILE (default: 10000, so 9092 becomes 19092)")
    p.add_argument("--image", default="mq:dev", metavar="IMAGE",
                   help="the image every container runs (default: mq:dev, from docker/Dockerfile)")
    p.add_argument("--project", default="mq", metavar="NAME",
                   help="container names are NAME-SERVICE, e.g. mq-east-1 (default: mq)")
    p.set_defaults(func=run_compose)

    p = verbs.add_parser(
        "attach", help="let mq status, mq link and --region reach a compose cluster from this host",
        description="Read a compose file written by `mq docker compose` and write DATA_DIR/cluster.json: the\n"
                    "cluster as this host reaches it (brokers and link control ports at their published\n"
                    "addresses). Then `mq status`, `mq link ...`, `mq topic list --region west` and\n"
                    "`mq mirror failover` work on the containers. Run it again after changing the file.")
    p.add_argument("compose_file", nargs="?", metavar="COMPOSE_FILE",
                   help=f"the compose file (default: {DEFAULT_COMPOSE_FILE})")
    p.add_argument("--data-dir", default=".mq", metavar="DIR", help="where cluster.json goes (default: ./.mq)")
    p.set_defaults(func=run_attach)


def run_compose(args: argparse.Namespace) -> int:
    from mq.deploy import DeployError
    from mq.deploy.compose import ComposeOptions, render_compose
    from mq.deploy.region import default_region_file, display_path
    from mq.deploy.regions_file import load_topology

    path = args.file or str(default_region_file())
    try:
        deployment = load_topology(path)
        text = render_compose(deployment, ComposeOptions(image=args.image, project=args.project,
                                                         port_offset=args.port_offset,
                                                         source=display_path(path)))
    except DeployError as exc:
        raise CliError(exc.what, exc.todo, exit_code=EXIT_USAGE) from None
    if args.output:
        tmp = f"{args.output}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, args.output)
        print(f"wrote {args.output}: {text.count(chr(10))} lines", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def run_attach(args: argparse.Namespace) -> int:
    from mq.deploy import DeployError
    from mq.deploy.compose_runtime import attach

    path = args.compose_file or DEFAULT_COMPOSE_FILE
    try:
        written, deployment = attach(path, args.data_dir)
    except DeployError as exc:
        raise CliError(exc.what, exc.todo) from None
    out = console()
    out.print(f"wrote {written}: {', '.join(deployment.region_names)} as reached from this host")
    for region in deployment.regions:
        out.print(f"  {region.name:<10} bootstrap {region.bootstrap}")
    for pair in deployment.pairs:
        out.print(f"  link {pair.name:<10} control {pair.control}")
    flag = "" if os.path.abspath(args.data_dir) == os.path.abspath(".mq") else f" --data-dir {args.data_dir}"
    env = "" if not flag else f"MQ_DATA_DIR={args.data_dir} "
    out.print(f"now: mq status{flag}   mq link list{flag}   {env}mq topic list --region {deployment.region_names[0]}")
    return 0
