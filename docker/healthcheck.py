"""The image's healthcheck: ``python -I -S /opt/mq/healthcheck.py broker|link|mirror WHERE``.

It asks the process itself, not just its port, and stays cheap (standard library only,
no ``site``: a few milliseconds) because Docker runs it every few seconds per container.

- ``broker HOST:PORT`` (the metrics port): ``GET /ready`` answers 200 once the broker is
  registered, unfenced and caught up with the metadata log; 503 says why not.
- ``link HOST:PORT`` (the control port): ``{"op": "list"}`` answers ``"ok": true``.
- ``mirror PATH`` (its status.json): rewritten by the mirror every second, so healthy
  while fresh (within ``MAX_STATUS_AGE_S``) and not ``blocked``.

Exit 0 healthy, 1 unhealthy, with one line saying why (``docker inspect`` shows it).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

TIMEOUT_S = 2.5
MAX_STATUS_AGE_S = 15.0


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def broker(address: str) -> tuple[bool, str]:
    with socket.create_connection(_split(address), timeout=TIMEOUT_S) as sock:
        sock.sendall(f"GET /ready HTTP/1.0\r\nHost: {address}\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1:2]
    return status == [b"200"], body.decode(errors="replace").strip() or head.decode(errors="replace")


def link(address: str) -> tuple[bool, str]:
    with socket.create_connection(_split(address), timeout=TIMEOUT_S) as sock:
        sock.sendall(b'{"op": "list"}\n')
        answer = b""
        while not answer.endswith(b"\n") and (chunk := sock.recv(65536)):
            answer += chunk
    doc = json.loads(answer)
    if not doc.get("ok"):
        return False, f"link control answered {doc.get('error', doc)}"
    states = ", ".join(f"{x.get('name')} {x.get('state')}" for x in doc.get("links", []))
    return True, f"link {doc.get('pair')}: {states}"


def mirror(path: str, *, now_s: float | None = None) -> tuple[bool, str]:
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    age_s = (now_s if now_s is not None else time.time()) - os.path.getmtime(path)
    state = doc.get("state")
    if age_s > MAX_STATUS_AGE_S:
        return False, f"status.json not rewritten for {age_s:.0f} s (state was {state})"
    if state == "blocked":
        return False, f"blocked: {doc.get('reason', '')}"
    return True, f"{state} {doc.get('reason', '')}".strip()


CHECKS = {"broker": broker, "link": link, "mirror": mirror}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in CHECKS:
        print("usage: healthcheck.py broker METRICS_HOST:PORT | link CONTROL_HOST:PORT | mirror STATUS_JSON")
        return 2
    try:
        healthy, why = CHECKS[argv[0]](argv[1])
    except (OSError, ValueError) as exc:
        healthy, why = False, f"{argv[0]} at {argv[1]}: {exc.__class__.__name__}: {exc}"
    print(why)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
