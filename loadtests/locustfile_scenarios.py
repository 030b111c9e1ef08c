"""The locustfile of ``mq load run``: one named scenario (``loadtests.scenarios``) as a load shape.

    MQ_BOOTSTRAP=127.0.0.1:9092 MQ_LOAD_SCENARIO=spike MQ_LOAD_USERS=50 MQ_LOAD_DURATION_S=60 \\
        locust -f loadtests/locustfile_scenarios.py --headless --csv results/spike ProducerUser GroupConsumerUser

(``mq load run spike --users 50 --duration 60s`` runs exactly this and names the user
classes.) The shape follows the scenario's stages and stops the run at the end; user
classes with a fixed count run that many throughout, the others share the rest by weight.
"""

from __future__ import annotations

import os

from locust import LoadTestShape

from loadtests import locust_users
from loadtests.locust_users import (  # noqa: F401 - locust finds the user classes here
    FanOutConsumerUser,
    GroupConsumerUser,
    ProducerUser,
    SlowConsumerUser,
    SmallProducerUser,
)
from loadtests.scenarios import scenario

SCENARIO = scenario(os.environ.get("MQ_LOAD_SCENARIO", "steady"))
USERS = int(os.environ.get("MQ_LOAD_USERS", "10"))
DURATION_S = float(os.environ.get("MQ_LOAD_DURATION_S", "60"))

for mix in SCENARIO.users:
    user_class = getattr(locust_users, mix.user_class)
    user_class.weight = mix.weight
    user_class.fixed_count = mix.fixed or 0


class ScenarioShape(LoadTestShape):
    stages = SCENARIO.stages(USERS, DURATION_S)

    def tick(self):  # type: ignore[no-untyped-def]
        now = self.get_run_time()
        for stage in self.stages:
            if now < stage.until_s:
                return stage.users, stage.spawn_rate
        return None
