"""The named load scenarios of ``mq load run``, as data: which locust users, how many, when.

A scenario is a load shape over ``duration_s`` for ``users`` (the command's ``--users``):
a list of stages ``(until_fraction, fraction_of_users)`` — for instance the spike runs a
quarter of the users, then all of them, then a quarter again — and the user classes of
``loadtests.locust_users`` it runs, each with a weight (shares of the users) or a fixed
count (``fixed``: that many whatever the stage). The locustfile
(``loadtests/locustfile_scenarios.py``) turns this into a locust ``LoadTestShape``; the
command line reads it to list and check scenarios without importing locust (which
monkey-patches the process).

HTTP users (locust's ``FastHttpUser`` against the gateway) arrive with the HTTP gateway:
they are one more user class a scenario can name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class UserMix:
    user_class: str
    weight: int = 1
    fixed: int | None = None  # a fixed number of users of this class (None: a share by weight)


@dataclass(frozen=True)
class Stage:
    until_s: float
    users: int
    spawn_rate: float


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    users: tuple[UserMix, ...]
    shape: tuple[tuple[float, float], ...] = ((1.0, 1.0),)  # (until fraction of the run, fraction of users)
    partitions: int = 6
    value_bytes: int = 100
    settings: dict[str, str] = field(default_factory=dict)  # environment for the users (MQ_LOAD_...)

    def fixed_users(self) -> int:
        return sum(u.fixed or 0 for u in self.users)

    def stages(self, users: int, duration_s: float) -> list[Stage]:
        """The locust stages for ``users`` at the peak over ``duration_s``: the fixed users
        always, the others by the shape (at least one while a stage has any)."""
        fixed = self.fixed_users()
        out = []
        for until, fraction in self.shape:
            weighted = max(0, users - fixed)
            count = fixed + (max(1, math.ceil(weighted * fraction)) if weighted and fraction > 0 else 0)
            out.append(Stage(round(until * duration_s, 3), count, spawn_rate=max(1.0, count)))
        return out


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("steady", "constant load: producers and one consumer group reading what they write",
             (UserMix("ProducerUser", 3), UserMix("GroupConsumerUser", 1))),
    Scenario("spike", "a quarter of the producers, all of them for the middle third, a quarter again; "
                      "a fixed consumer group throughout",
             (UserMix("ProducerUser", 1), UserMix("GroupConsumerUser", fixed=2)),
             shape=((0.3, 0.25), (0.65, 1.0), (1.0, 0.25))),
    Scenario("many-small-producers", "every user a producer of its own, one small record per second each "
                                     "(connections and per-request cost, as P9)",
             (UserMix("SmallProducerUser", 1),), value_bytes=20),
    Scenario("fan-out", "two producers; every other user a consumer in a group of its own, each reading "
                        "everything",
             (UserMix("ProducerUser", fixed=2), UserMix("FanOutConsumerUser", 1))),
    Scenario("slow-consumer", "producers at full speed and one consumer group whose members read 20 records "
                              "every 200 ms: lag builds",
             (UserMix("ProducerUser", 1), UserMix("SlowConsumerUser", fixed=1))),
)}


def scenario(name: str) -> Scenario:
    """The scenario called ``name``; KeyError naming the known ones."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})") from None
