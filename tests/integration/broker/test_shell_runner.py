"""The broker process (``python -m mq.aio.runner``) in a quorum: readiness, the ready
timeout and the controlled shutdown on SIGTERM, over real sockets."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mq.protocol.messages import MetadataRequest

from ..conftest import READY, REPO, BrokerProcess, broker_command, free_port
from .raw import RawClient


def voters(ports: dict[int, int]) -> str:
    return ",".join(f"{node_id}@127.0.0.1:{port}" for node_id, port in sorted(ports.items()))


def test_broker_without_a_quorum_is_never_ready_and_exits_1(tmp_path: Path):
    ports = {1: free_port(), 2: free_port(), 3: free_port()}  # 2 and 3 never start
    cmd = broker_command(1, tmp_path / "b1", "127.0.0.1", ports[1],
                         {"controller.quorum.voters": voters(ports)}) + ["--ready-timeout", "2"]
    started = time.monotonic()
    done = subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert time.monotonic() - started < 30
    assert not READY.search(done.stderr)
    assert "broker_not_ready" in done.stderr and "controller.quorum.voters" in done.stderr
    assert "Traceback" not in done.stderr
    assert "broker_stopped" in done.stderr  # closed its logs on the way out


def test_three_voters_become_ready_and_a_sigterm_is_a_controlled_shutdown(tmp_path: Path):
    ports = {1: free_port(), 2: free_port(), 3: free_port()}
    configs = {"controller.quorum.voters": voters(ports)}
    brokers = [BrokerProcess(tmp_path / f"broker-{n}", ports[n], node_id=n, configs=configs) for n in sorted(ports)]
    try:
        # No broker is ready before a majority runs: start them together.
        with ThreadPoolExecutor(len(brokers)) as pool:
            list(pool.map(lambda b: b.start(timeout_s=60), brokers))
        with RawClient.to(brokers[0]) as raw:
            deadline = time.monotonic() + 20
            while True:
                metadata = raw.request(MetadataRequest([]))
                if metadata.controller_id in ports and len(metadata.brokers) == 3:
                    break
                assert time.monotonic() < deadline, metadata
                time.sleep(0.05)  # polling the cluster's state, with a deadline
        stopping = brokers[2]
        started = time.monotonic()
        assert stopping.stop(timeout_s=30) == 0
        assert time.monotonic() - started < 15
        text = stopping.stderr_text()
        assert "broker_controlled_shutdown_complete" in text, text[-3000:]
        assert "Traceback" not in text
        for other in brokers[:2]:
            assert other.running and "Traceback" not in other.stderr_text()
    finally:
        for b in brokers:
            b.stop()


def test_a_broker_listening_on_every_interface_advertises_advertised_listeners(tmp_path: Path):
    """As in a container: listen on 0.0.0.0, tell clients and peers another address."""
    port = free_port()
    broker = BrokerProcess(tmp_path / "b1", port, host="0.0.0.0",
                           configs={"advertised.listeners": f"127.0.0.1:{port}"})
    try:
        broker.start(timeout_s=60)
        with RawClient.to(broker) as raw:
            metadata = raw.request(MetadataRequest([]))
        assert [(b.node_id, b.host, b.port) for b in metadata.brokers] == [(1, "127.0.0.1", port)]
        # What a container's healthcheck asks: the broker itself, not the port.
        with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/ready", timeout=5) as answer:
            assert answer.status == 200 and answer.read().decode().startswith("ready node_id=1")
    finally:
        broker.stop()


def test_ready_answers_503_with_the_reason_while_the_quorum_has_not_formed(tmp_path: Path):
    ports = {1: free_port(), 2: free_port(), 3: free_port()}  # 2 and 3 never start
    metrics = free_port()
    cmd = broker_command(1, tmp_path / "b1", "127.0.0.1", ports[1], {"controller.quorum.voters": voters(ports)})
    cmd[cmd.index("--metrics-listen") + 1] = f"127.0.0.1:{metrics}"
    proc = subprocess.Popen(cmd + ["--ready-timeout", "30"], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{metrics}/ready", timeout=2)
                raise AssertionError("a broker without a quorum answered /ready with 200")
            except urllib.error.HTTPError as exc:
                assert exc.code == 503
                text = exc.read().decode()
                break
            except OSError:  # not listening yet
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)
        assert text.startswith("not ready node_id=1") and "fenced=True" in text and "controller=-1" in text
    finally:
        proc.kill()
        proc.wait()


def test_an_advertised_wildcard_address_is_refused_with_what_to_write(tmp_path: Path):
    port = free_port()
    cmd = broker_command(1, tmp_path / "b1", "0.0.0.0", port, {"advertised.listeners": f"0.0.0.0:{port}"})
    done = subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "advertised.listeners" in done.stderr and "127.0.0.1:19092" in done.stderr
    assert "Traceback" not in done.stderr
