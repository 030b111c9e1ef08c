"""Seeds for simulation tests, and the message that replays a failing one.

``MQ_SEED=<n>`` runs only seed n; ``MQ_SIM_ITERATIONS=<n>`` scales how many seeds a
test runs (the nightly variants). A failing seed is printed with the exact command
that replays it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping


class SimulationFailure(AssertionError):
    pass


def seeds(count: int, *, first: int = 0, env: Mapping[str, str] = os.environ) -> list[int]:
    """``count`` seeds from ``first`` (``MQ_SIM_ITERATIONS`` overrides the count), or
    just ``MQ_SEED`` when it is set."""
    if env.get("MQ_SEED"):
        return [int(env["MQ_SEED"])]
    return list(range(first, first + int(env.get("MQ_SIM_ITERATIONS", count))))


def replay_command(seed: int, test_id: str) -> str:
    return f"MQ_SEED={seed} .venv/bin/pytest {test_id}"


def run_seeds(scenario: Callable[[int], object], seed_list: Iterable[int], *, test_id: str
              ) -> list[object]:
    """Run ``scenario(seed)`` for each seed; on the first failure print the seed and the
    replay command and raise ``SimulationFailure`` chained to the original error."""
    results = []
    for seed in seed_list:
        try:
            results.append(scenario(seed))
        except Exception as exc:
            command = replay_command(seed, test_id)
            print(f"\nsimulation failed with seed {seed}: {exc!r}\nreplay: {command}")
            raise SimulationFailure(f"seed {seed}: {exc}\nreplay with: {command}") from exc
    return results
