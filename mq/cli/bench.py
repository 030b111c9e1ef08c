"""``mq bench ...``: the benchmarks of ``loadtests/bench.py``, with peers side by side.

Every argument after ``bench`` is handed to ``loadtests.bench.main(argv)`` untouched
(``mq bench --help`` shows the benchmark's own options). The region workloads — P3
(RF=3 acks=all throughput), P4 (end-to-end latency at 10,000 rec/s) and ``failover``
(leader SIGKILL to the first acks=all ack) — start three brokers of their own:
``mq bench --only P3,P4,failover`` hands every argument to ``loadtests.bench_region``
(``mq bench --only P3 --help`` lists its options). The consumer group workloads —
``rebalance`` (eager vs cooperative pause), ``group-throughput`` (1 vs N consumers)
and ``coordinator-failover`` — likewise go to ``loadtests.bench_groups``:
``mq bench --only rebalance,group-throughput,coordinator-failover``. The geo
workloads — ``P7`` (mirror throughput through a 50 ms link), ``P7-latency``
(replication latency at 50,000 rec/s) and ``geo-failover`` (fail-over time, records at
risk) — start two regions, the link and the mirror: ``loadtests.bench_geo``.
"""

from __future__ import annotations

import argparse

from mq.cli.common import CliError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench", help="run the throughput and latency benchmarks (loadtests.bench; P3/P4/failover: "
        "a three-broker region; rebalance/group-throughput/coordinator-failover: consumer groups)", add_help=False,
        description="Run loadtests.bench with the remaining arguments; `mq bench --help` lists them.",
    )
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="arguments for loadtests.bench (see `mq bench --help`)")
    p.set_defaults(func=lambda args: run_bench_argv(args.args))


def run_bench_argv(argv: list[str]) -> int:
    try:
        from loadtests import bench
    except ImportError as exc:
        raise CliError(
            f"the benchmarks are not importable ({exc})",
            "run from a clone of the mq repository with `pip install -e \".[dev]\"` "
            "(loadtests/ ships with the source, not with every install)",
        ) from None
    return int(bench.main(list(argv)) or 0)
