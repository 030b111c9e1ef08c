"""`mq broker` runs one broker in the foreground and stops cleanly on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import time

from mq.deploy.probe import ProbeError, api_versions

from .helpers import base_env, free_listen, mq_command, run_mq


def test_broker_foreground_and_sigterm(tmp_path):
    listen = free_listen()
    proc = subprocess.Popen([*mq_command(), "broker", "--node-id", "1", "--data-dir", str(tmp_path / "b1"),
                             "--listen", listen], env=base_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")
            try:
                api_versions(listen, timeout_s=0.5)
                break
            except ProbeError:
                assert time.monotonic() < deadline, "mq broker did not answer within 30 s"
                time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)  # the same pid: `mq broker` became the broker
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        proc.wait()
    log = proc.stdout.read().decode(errors="replace")
    assert f"listening={listen}" in log and "Traceback" not in log
    assert (tmp_path / "b1" / "__cluster_metadata-0").is_dir()


def test_broker_rejects_bad_config_before_starting(tmp_path):
    result = run_mq("broker", "--node-id", "1", "--data-dir", str(tmp_path / "b"), "--listen", free_listen(),
                    "--config", "log.segment.bytes=tiny", env=base_env())
    assert result.returncode == 2
    [line] = result.stderr.decode().splitlines()
    assert line.startswith("error: bad --config: log.segment.bytes='tiny'") and " — " in line
    assert not (tmp_path / "b").exists()
