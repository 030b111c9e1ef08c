"""``kill``, ``pause``, ``resume`` and ``restart`` of one broker that ``mq up`` started.

Mixed into ``mq.deploy.Launcher`` (``mq broker kill|pause|resume|restart`` and ``mq.lab``
call them). A broker is named by its node id and, when several regions run (node ids
repeat across regions), its region.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mq.deploy import process, services
from mq.deploy import state as cluster_state
from mq.deploy.errors import DeployError
from mq.deploy.topology import CLUSTER_FILE, BrokerSpec, Deployment, Topology

if TYPE_CHECKING:
    from mq.deploy.launcher import Launcher

DOWN_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class BrokerAction:
    """What ``kill``/``pause``/``resume``/``restart`` did to one broker."""

    name: str
    node_id: int
    action: str  # "killed" | "paused" | "resumed" | "restarted"
    pid: int | None  # the pid acted on; for "restarted", the new process
    old_pid: int | None = None  # "restarted": the process stopped first, if one ran
    waited_ms: int = 0
    region: str = ""


class BrokerVerbs:
    """The broker verbs of ``Launcher`` (see the module docstring)."""

    def _find(self: Launcher, node_id: int, region: str | None = None) -> tuple[Deployment, Topology, BrokerSpec]:
        """The recorded deployment, region and spec of broker ``node_id``, or a DeployError."""
        state = cluster_state.read_state(self.data_dir)
        shown = _shown(self.state_path)
        if state is None:
            raise DeployError(f"no cluster under {os.path.dirname(shown) or '.'} ({CLUSTER_FILE} not found)",
                              "start one with `mq up`")
        deployment = cluster_state.deployment_of(state)
        names = deployment.region_names
        if region is not None and region not in names:
            raise DeployError(f"no region {region!r} in {shown} (regions: {', '.join(names)})",
                              f"pass --region {' or --region '.join(names)}")
        found = [(r, s) for r in deployment.regions if region in (None, r.name) for s in r.brokers
                 if s.node_id == node_id]
        if not found:
            where = f"region {region} of {shown}" if region else shown
            raise DeployError(f"no broker {node_id} in {where}", "see `mq status`")
        if len(found) > 1:
            having = [r.name for r, _ in found]
            raise DeployError(f"broker {node_id} is in regions {' and '.join(having)}",
                              f"pass --region {' or --region '.join(having)} (or set MQ_REGION)")
        return deployment, found[0][0], found[0][1]

    def _find_running(self: Launcher, node_id: int, region: str | None) -> tuple[str, Topology, BrokerSpec, int]:
        deployment, r, spec = self._find(node_id, region)
        name = self.label(deployment, r, spec)
        pid = self._running_broker(cluster_state.read_state(self.data_dir), r, spec)
        if pid is None:
            flag = f" --region {r.name}" if len(deployment.regions) > 1 else ""
            raise DeployError(f"{name} is not running", f"start it again with `mq broker restart {node_id}{flag}`")
        return name, r, spec, pid

    def _in_container(self: Launcher, node_id: int, region: str | None, verb: str, **options: float):
        """The verb done on the broker's container when ``mq docker attach`` wrote the
        cluster.json (None: processes ``mq up`` started)."""
        from mq.deploy import compose_runtime

        state = cluster_state.read_state(self.data_dir)
        if compose_runtime.docker_section(state) is None:
            return None
        deployment, r, spec = self._find(node_id, region)
        return compose_runtime.broker_verb(state, r, spec, verb, name=self.label(deployment, r, spec), **options)

    def kill(self: Launcher, node_id: int, *, region: str | None = None, timeout_s: float = 5.0) -> BrokerAction:
        """SIGKILL broker ``node_id`` (a crash: no flush, no checkpoint). Its pid file and
        cluster.json entry stay, now stale, so ``status`` shows it dead and ``restart`` knows
        how to start it again. In a compose cluster: ``docker kill`` of its container."""
        if (done := self._in_container(node_id, region, "kill")) is not None:
            return done
        name, r, _, pid = self._find_running(node_id, region)
        started = time.monotonic()
        process.send_signal(pid, signal.SIGKILL)  # also ends a paused process
        if not process.wait_for_exit(pid, timeout_s):
            raise DeployError(f"{name} (pid {pid}) is still alive {timeout_s:g} s after SIGKILL",
                              f"check it with `ps -p {pid}`")
        return BrokerAction(name, node_id, "killed", pid, waited_ms=int((time.monotonic() - started) * 1000),
                            region=r.name)

    def pause(self: Launcher, node_id: int, *, region: str | None = None, timeout_s: float = 5.0) -> BrokerAction:
        """SIGSTOP broker ``node_id``: it keeps its sockets but answers nothing (a hung
        process or a long GC pause, as clients and peers see it) until ``resume``. In a
        compose cluster: ``docker pause`` of its container."""
        if (done := self._in_container(node_id, region, "pause")) is not None:
            return done
        name, r, _, pid = self._find_running(node_id, region)
        if process.is_paused(pid):
            raise DeployError(f"{name} is already paused", f"resume it with `mq broker resume {node_id}`")
        process.send_signal(pid, signal.SIGSTOP)
        if not process.wait_for_state(pid, True, timeout_s):
            raise DeployError(f"{name} (pid {pid}) did not stop after SIGSTOP", f"check it with `ps -p {pid}`")
        return BrokerAction(name, node_id, "paused", pid, region=r.name)

    def resume(self: Launcher, node_id: int, *, region: str | None = None, timeout_s: float = 5.0) -> BrokerAction:
        """SIGCONT a broker stopped by ``pause`` (``docker unpause`` in a compose cluster)."""
        if (done := self._in_container(node_id, region, "resume")) is not None:
            return done
        name, r, _, pid = self._find_running(node_id, region)
        if not process.is_paused(pid):
            raise DeployError(f"{name} is not paused", f"pause it first with `mq broker pause {node_id}`")
        process.send_signal(pid, signal.SIGCONT)
        if not process.wait_for_state(pid, False, timeout_s):
            raise DeployError(f"{name} (pid {pid}) did not continue after SIGCONT", f"check it with `ps -p {pid}`")
        return BrokerAction(name, node_id, "resumed", pid, region=r.name)

    def restart(self: Launcher, node_id: int, *, region: str | None = None, stop_timeout_s: float = DOWN_TIMEOUT_S,
                ready_timeout_s: float = 30.0) -> BrokerAction:
        """Stop broker ``node_id`` gracefully if it runs (SIGTERM, SIGKILL after
        ``stop_timeout_s``), then start it with the arguments recorded in cluster.json and
        wait until it answers and sees an active controller with itself registered and
        unfenced. Also starts a killed broker. In a compose cluster: ``docker stop``, then
        ``docker start`` of its container."""
        from mq.deploy.launcher import _Started

        done = self._in_container(node_id, region, "restart", stop_timeout_s=stop_timeout_s,
                                  ready_timeout_s=ready_timeout_s)
        if done is not None:
            return done

        deployment, r, spec = self._find(node_id, region)
        name = self.label(deployment, r, spec)
        started = time.monotonic()
        old_pid = self._running_broker(cluster_state.read_state(self.data_dir), r, spec)
        if old_pid is not None:
            services.stop_all([(name, old_pid)], stop_timeout_s)  # SIGCONTs a paused broker too
        self._check_free(spec.listen, f"native port of {name}")
        self._check_free(spec.metrics_endpoint, f"metrics port of {name}")
        proc, log_start = self._spawn_broker(spec, reason="mq broker restart")
        key = self.broker_key(r, spec)
        self._record(key, proc, spec.log_path)
        try:
            self._wait_ready(deployment, [_Started(name, proc, spec.log_path, log_start)],
                             [(r, [spec], [node_id])], ready_timeout_s)
        except DeployError as exc:
            if proc.poll() is None and "was not ready" in exc.what:
                raise DeployError(  # it runs and keeps trying to join: leave it to the user
                    exc.what.replace(f"region {r.name}", name, 1),
                    f"it keeps running and trying; {exc.todo}", log_tail=exc.log_tail) from None
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            self._forget([key], [spec.pid_path])
            raise
        return BrokerAction(name, node_id, "restarted", proc.pid, old_pid, int((time.monotonic() - started) * 1000),
                            region=r.name)


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel
