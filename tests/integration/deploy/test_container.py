"""What link and mirror containers run (mq.deploy.container) and the image's healthcheck
(docker/healthcheck.py), without Docker: the same code on this host."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from mq.deploy.compose import ComposeOptions, container_cluster
from mq.deploy.container import ContainerError, command, write_cluster
from mq.deploy.regions_file import load_topology

REPO = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("healthcheck", REPO / "docker" / "healthcheck.py")
healthcheck = importlib.util.module_from_spec(spec)
spec.loader.exec_module(healthcheck)


def cluster_json(data_dir: Path) -> str:
    doc = container_cluster(load_topology(REPO / "regions" / "default.yaml"), ComposeOptions())
    return json.dumps({**doc, "data_dir": str(data_dir)})


def test_the_cluster_document_is_written_where_the_processes_read_it(tmp_path: Path):
    path, doc = write_cluster({"MQ_CLUSTER_JSON": cluster_json(tmp_path / "state")})
    assert path == str(tmp_path / "state" / "cluster.json")
    assert json.loads(Path(path).read_text()) == doc
    assert command("link", "east-west", path, doc)[1:] == ["-m", "mq.deploy.link", "--cluster", path,
                                                           "--pair", "east-west"]
    assert command("mirror", "east-to-west", path, doc)[1:] == ["-m", "mirror", "run", "--cluster", path,
                                                               "--flow", "east-to-west"]


@pytest.mark.parametrize(("environ", "role", "name", "words"), [
    ({}, "link", "east-west", "$MQ_CLUSTER_JSON is not set"),
    ({"MQ_CLUSTER_JSON": "{nope"}, "link", "east-west", "$MQ_CLUSTER_JSON is not JSON"),
    (None, "link", "east-south", "no link pair 'east-south' in $MQ_CLUSTER_JSON (pairs: east-west)"),
    (None, "mirror", "west-to-east", "no mirror flow 'west-to-east' in $MQ_CLUSTER_JSON (flows: east-to-west)"),
    (None, "gateway", "x", "unknown role 'gateway'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, environ, role, name, words):
    env = {k: v for k, v in os.environ.items() if k != "MQ_CLUSTER_JSON"}
    env.update(environ if environ is not None else {"MQ_CLUSTER_JSON": cluster_json(tmp_path)})
    done = subprocess.run([sys.executable, "-m", "mq.deploy.container", role, name], env=env, cwd=REPO, check=False,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("mq container: ") and words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    with pytest.raises(ContainerError):
        path, doc = write_cluster(env)
        command(role, name, path, doc)


def _http_server(status: int, body: str) -> HTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            assert self.path == "/ready"
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_the_broker_check_asks_ready_and_reports_the_reason():
    for status, body, healthy in ((200, "ready node_id=1 controller=2\n", True),
                                  (503, "not ready node_id=1 fenced=True\n", False)):
        server = _http_server(status, body)
        try:
            assert healthcheck.broker(f"127.0.0.1:{server.server_port}") == (healthy, body.strip())
        finally:
            server.shutdown()
            server.server_close()


def test_the_link_check_asks_the_control_port():
    listener = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            assert json.loads(conn.makefile().readline()) == {"op": "list"}
            conn.sendall(b'{"ok": true, "pair": "east-west", "links": [{"name": "east->west", "state": "cut"}]}\n')

    threading.Thread(target=answer, daemon=True).start()
    try:
        assert healthcheck.link(f"127.0.0.1:{listener.getsockname()[1]}") == (True, "link east-west: east->west cut")
    finally:
        listener.close()


def test_the_mirror_check_wants_a_fresh_status_that_is_not_blocked(tmp_path: Path):
    path = tmp_path / "status.json"
    path.write_text(json.dumps({"state": "stalled", "reason": "link cut"}))
    now = os.path.getmtime(path)
    assert healthcheck.mirror(str(path), now_s=now + 1) == (True, "stalled link cut")
    assert healthcheck.mirror(str(path), now_s=now + 60)[0] is False
    path.write_text(json.dumps({"state": "blocked", "reason": "mode"}))
    assert healthcheck.mirror(str(path), now_s=os.path.getmtime(path)) == (False, "blocked: mode")


def test_nothing_listening_is_unhealthy_with_one_line(tmp_path: Path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run([sys.executable, "-I", "-S", str(REPO / "docker" / "healthcheck.py"), "broker",
                           f"127.0.0.1:{port}"], check=False, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "ConnectionRefusedError" in done.stdout and done.stdout.count("\n") == 1
    missing = subprocess.run([sys.executable, "-I", "-S", str(REPO / "docker" / "healthcheck.py"), "mirror",
                              str(tmp_path / "none.json")], check=False, capture_output=True, text=True, timeout=30)
    assert missing.returncode == 1 and "FileNotFoundError" in missing.stdout
