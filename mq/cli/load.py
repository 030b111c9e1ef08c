"""``mq load run SCENARIO`` and ``mq load list``: locust, headless, against a region.

``run`` starts ``python -m locust`` on ``loadtests/locustfile_scenarios.py`` (never imported
here: locust monkey-patches the process it runs in) with the scenario's user classes and
its settings in the environment, and keeps under ``<data dir>/load/<scenario>-<time>/``
(or ``--out``) locust's CSV statistics (``locust_stats.csv``, ``locust_stats_history.csv``,
``locust_failures.csv``, ``locust_exceptions.csv``), its HTML report (``report.html``), its
log and ``run.json`` (what was asked, when, and the totals). It prints the per-request
summary and exits non-zero when a request failed. ``list`` shows the scenarios and the
runs kept under the data directory.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from mq.cli.common import EXIT_USAGE, CliError, data_dir_of_env, duration_ms, require_broker
from mq.cli.output import console, print_table, table

PREFIX = "locust"
LOCUSTFILE = "locustfile_scenarios.py"


def _scenarios():  # type: ignore[no-untyped-def]
    try:
        from loadtests import scenarios
    except ImportError as exc:
        raise CliError(f"the load scenarios are not importable ({exc})",
                       "run from a clone of the mq repository with `pip install -e \".[dev]\"`") from None
    return scenarios


def register(sub: argparse._SubParsersAction) -> None:
    from mq.cli.common import add_bootstrap

    load = sub.add_parser("load", help="run locust load scenarios against a region: `mq load run|list`",
                          description="Named locust scenarios on mq's native protocol, run headless; their\n"
                                      "statistics (CSV) and HTML report are kept under <data dir>/load/.")
    verbs = load.add_subparsers(dest="load_command", metavar="COMMAND", title="commands", parser_class=type(load))
    verbs.required = True
    p = verbs.add_parser("run", help="run one scenario with locust, headless",
                         description="Run SCENARIO (see `mq load list`) with locust, headless, against a region:\n"
                                     "--users at the peak, for --duration; the statistics and the HTML report go\n"
                                     "to <data dir>/load/<scenario>-<time>/ (or --out). Exits 1 if a request failed.")
    p.add_argument("scenario", metavar="SCENARIO", help="steady, spike, many-small-producers, fan-out, slow-consumer")
    add_bootstrap(p)
    p.add_argument("--users", type=int, default=10, metavar="N", help="simulated users at the peak (default: 10)")
    p.add_argument("--duration", type=duration_ms, default="60s", metavar="DURATION",
                   help="how long: 30s, 5m (default: 60s)")
    p.add_argument("--topic", default="load", help="the topic the users write and read (default: load)")
    p.add_argument("--partitions", type=int, default=None, metavar="N",
                   help="partitions of the topic when it is created (default: the scenario's, 6)")
    p.add_argument("--value-bytes", type=int, default=None, metavar="N",
                   help="bytes per record (default: the scenario's: 100, or 20 for many-small-producers)")
    p.add_argument("--group", default=None, metavar="GROUP",
                   help="the consumer group of the scenario's consumers (default: load-SCENARIO)")
    p.add_argument("--acks", choices=("0", "1", "all"), default="1", help="producers' acks (default: 1)")
    p.add_argument("--rate", type=_rate, default=0.0, metavar="N",
                   help="records/s of each producer user (default: 0, back to back)")
    p.add_argument("--hot-key-share", type=_share, default=0.0, metavar="F",
                   help="that share (0..1) of the records carry one key, so one partition gets them (default: 0)")
    p.add_argument("--out", default=None, metavar="DIR", help="where the results go (default: <data dir>/load/...)")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="the data directory for results (default: $MQ_DATA_DIR, else ./.mq)")
    p.set_defaults(func=run_load)

    p = verbs.add_parser("list", help="list the scenarios and the runs kept",
                         description="The scenarios `mq load run` knows, and the runs under <data dir>/load/.")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="the data directory (default: $MQ_DATA_DIR, else ./.mq)")
    p.set_defaults(func=run_list)


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a rate (records/s, 0 or more)")
    return value


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share between 0 and 1")
    return value


def _locustfile() -> str:
    import loadtests

    path = Path(loadtests.__file__).parent / LOCUSTFILE
    if not path.exists():
        raise CliError(f"{path} is missing", "reinstall mq from its repository (loadtests/ ships with it)")
    return str(path)


def run_load(args: argparse.Namespace) -> int:
    scenarios = _scenarios()
    try:
        chosen = scenarios.scenario(args.scenario)
    except KeyError as exc:
        raise CliError(str(exc.args[0]), "see `mq load list`", exit_code=EXIT_USAGE) from None
    if args.users < 1 or args.users < chosen.fixed_users():
        raise CliError(f"--users {args.users}: {chosen.name} needs at least {max(1, chosen.fixed_users())}",
                       "pass more --users", exit_code=EXIT_USAGE)
    require_broker(args.bootstrap)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out or Path(args.data_dir or data_dir_of_env()) / "load" / f"{chosen.name}-{stamp}")
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, MQ_BOOTSTRAP=args.bootstrap, MQ_LOAD_SCENARIO=chosen.name, MQ_LOAD_USERS=str(args.users),
               MQ_LOAD_DURATION_S=str(args.duration / 1000), MQ_LOAD_TOPIC=args.topic,
               MQ_LOAD_PARTITIONS=str(args.partitions or chosen.partitions),
               MQ_LOAD_VALUE_BYTES=str(args.value_bytes or chosen.value_bytes),
               MQ_LOAD_GROUP=args.group or f"load-{chosen.name}", MQ_LOAD_ACKS=args.acks,
               MQ_LOAD_RATE=str(args.rate), MQ_LOAD_HOT_KEY_SHARE=str(args.hot_key_share), **chosen.settings)
    command = [sys.executable, "-m", "locust", "-f", _locustfile(), "--headless", "--csv", str(out / PREFIX),
               "--html", str(out / "report.html"), "--logfile", str(out / "locust.log"), "--only-summary",
               "--stop-timeout", "5", *(u.user_class for u in chosen.users)]
    console().print(f"load {chosen.name}: {args.users} users for {args.duration / 1000:g} s against "
                    f"{args.bootstrap}, topic {args.topic}; results in {out}")
    started_ms = time.time_ns() // 1_000_000
    deadline_s = args.duration / 1000 + 60
    try:
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=deadline_s, check=False)
    except subprocess.TimeoutExpired:
        raise CliError(f"locust did not finish within {deadline_s:g} s", f"see {out / 'locust.log'}") from None
    (out / "locust.out").write_text(result.stdout + result.stderr, encoding="utf-8")
    totals = read_stats(out / f"{PREFIX}_stats.csv")
    doc = {"scenario": chosen.name, "users": args.users, "duration_s": args.duration / 1000,
           "bootstrap": args.bootstrap, "topic": args.topic, "group": env["MQ_LOAD_GROUP"], "acks": args.acks,
           "rate": args.rate, "hot_key_share": args.hot_key_share,
           "started_ms": started_ms, "ended_ms": time.time_ns() // 1_000_000, "exit_code": result.returncode,
           "requests": totals}
    (out / "run.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    if not totals:
        raise CliError(f"locust exited with {result.returncode} and wrote no statistics",
                       f"see {out / 'locust.out'}: {_last_line(result.stderr)}")
    _print_totals(totals)
    failed = sum(t["failures"] for t in totals if t["type"] == "")
    errors = read_exceptions(out / f"{PREFIX}_exceptions.csv")
    if failed:
        raise CliError(f"{failed} of the requests failed (locust exit code {result.returncode})",
                       f"see {out / f'{PREFIX}_failures.csv'} and {out / 'locust.log'}")
    if errors or result.returncode != 0:
        first = errors[0] if errors else _last_line(result.stderr)
        raise CliError(f"the users raised {len(errors)} kind(s) of error (locust exit code {result.returncode}): "
                       f"{first}", f"see {out / f'{PREFIX}_exceptions.csv'} and {out / 'locust.out'}")
    return 0


def read_exceptions(path: Path) -> list[str]:
    """The messages of locust's ``_exceptions.csv`` (errors raised by users outside requests)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return [f"{r['Message']} (x{r['Count']})" for r in csv.DictReader(f)]
    except OSError:
        return []


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


def read_stats(path: Path) -> list[dict]:
    """locust's ``_stats.csv``: one dict per request type and name (the total has type "")."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return []

    def number(value: str) -> float:
        try:
            return float(value)
        except (TypeError, ValueError):
            return 0.0

    return [{"type": r["Type"], "name": r["Name"], "requests": int(number(r["Request Count"])),
             "failures": int(number(r["Failure Count"])), "rps": number(r["Requests/s"]),
             "p50_ms": number(r["50%"]), "p95_ms": number(r["95%"]), "p99_ms": number(r["99%"]),
             "max_ms": number(r["Max Response Time"]), "avg_bytes": number(r["Average Content Size"])}
            for r in rows]


def _print_totals(totals: list[dict]) -> None:
    t = table("type", "name", "requests", "failures", "req/s", "p50 ms", "p95 ms", "p99 ms", "max ms")
    for r in totals:
        t.add_row(r["type"] or "total", r["name"], str(r["requests"]), str(r["failures"]), f"{r['rps']:.1f}",
                  f"{r['p50_ms']:g}", f"{r['p95_ms']:g}", f"{r['p99_ms']:g}", f"{r['max_ms']:.0f}")
    print_table(t)


def run_list(args: argparse.Namespace) -> int:
    scenarios = _scenarios()
    t = table("scenario", "users", "description")
    for s in scenarios.SCENARIOS.values():
        users = ", ".join(f"{u.user_class}" + (f" x{u.fixed}" if u.fixed else f" (weight {u.weight})")
                          for u in s.users)
        t.add_row(s.name, users, s.description)
    print_table(t)
    root = Path(args.data_dir or data_dir_of_env()) / "load"
    runs = sorted(root.glob("*/run.json"))
    if not runs:
        console().print(f"no runs under {root} yet: `mq load run steady --users 10 --duration 30s`")
        return 0
    t = table("run", "scenario", "users", "duration s", "requests", "failures", "req/s", "p99 ms")
    for path in runs:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        total = next((r for r in doc.get("requests", []) if r["type"] == ""), {})
        t.add_row(path.parent.name, doc.get("scenario", "?"), str(doc.get("users")), f"{doc.get('duration_s', 0):g}",
                  str(total.get("requests", 0)), str(total.get("failures", 0)), f"{total.get('rps', 0):.1f}",
                  f"{total.get('p99_ms', 0):g}")
    print_table(t)
    return 0
