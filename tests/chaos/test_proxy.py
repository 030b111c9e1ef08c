"""The link proxy with plain sockets: forwarding per directed link, cuts that abort
open connections and blackhole or refuse new ones, heals, isolation, partitions.

Each "node" is a tiny echo server that prefixes its answers with its id, so a test
sees which node a link really reached. No broker is involved.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from .harness.proxy import LinkProxy

WAIT_S = 5.0


class EchoNode:
    """A threaded TCP server answering each chunk with ``b"<id>:" + chunk``."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._clients: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self._clients.append(conn)
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        try:
            while data := conn.recv(65536):
                conn.sendall(f"{self.node_id}:".encode() + data)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        try:  # wakes the accept() blocked in the server thread; close() alone would not
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        for conn in self._clients:
            try:
                conn.close()
            except OSError:
                pass


@pytest.fixture
def cluster():
    nodes = {n: EchoNode(n) for n in (1, 2, 3)}
    proxy = LinkProxy({n: ("127.0.0.1", e.port) for n, e in nodes.items()}).start()
    try:
        yield proxy, nodes
    finally:
        proxy.close()
        for node in nodes.values():
            node.close()


def connect(proxy: LinkProxy, src: int, dst: int) -> socket.socket:
    return socket.create_connection(proxy.address(src, dst), timeout=WAIT_S)


def roundtrip(sock: socket.socket, payload: bytes = b"ping", *, timeout_s: float = WAIT_S) -> bytes:
    sock.settimeout(timeout_s)
    sock.sendall(payload)
    return sock.recv(65536)


def reaches(proxy: LinkProxy, src: int, dst: int) -> bool:
    """A new connection over the link gets an answer from ``dst`` (within 0.5 s)."""
    try:
        with connect(proxy, src, dst) as s:
            return roundtrip(s, timeout_s=0.5) == f"{dst}:ping".encode()
    except OSError:
        return False


def closed_by_proxy(sock: socket.socket, *, timeout_s: float = WAIT_S) -> bool:
    """The socket sees EOF or a reset (not just silence) within the timeout."""
    sock.settimeout(timeout_s)
    try:
        return sock.recv(65536) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_each_directed_link_forwards_to_its_destination(cluster):
    proxy, _nodes = cluster
    assert len(proxy.links()) == 6 and len({proxy.port(s, d) for s, d in proxy.links()}) == 6
    for src, dst in proxy.links():
        with connect(proxy, src, dst) as s:
            assert roundtrip(s) == f"{dst}:ping".encode()
            big = bytes(range(256)) * 4096  # 1 MiB both ways, in order
            s.sendall(big)
            got = b""
            while len(got) < len(big):
                chunk = s.recv(1 << 20)
                assert chunk
                got += chunk.replace(f"{dst}:".encode(), b"")
            assert got == big
    assert proxy.stats(1, 2).accepted == 1 and proxy.stats(1, 2).forwarded_bytes > 2 * len(big)


def test_voters_string_keeps_the_own_address_and_proxies_the_others(cluster):
    proxy, nodes = cluster
    voters = proxy.voters_for(2)
    assert voters == (f"1@127.0.0.1:{proxy.port(2, 1)},2@127.0.0.1:{nodes[2].port},"
                      f"3@127.0.0.1:{proxy.port(2, 3)}")


def test_cut_aborts_open_connections_and_blackholes_new_ones(cluster):
    proxy, _ = cluster
    existing = connect(proxy, 1, 2)
    assert roundtrip(existing) == b"2:ping"
    proxy.cut(1, 2)
    assert proxy.is_cut(1, 2) and not proxy.is_cut(2, 1)
    assert closed_by_proxy(existing)
    existing.close()
    # New connections are accepted (no error for the sender) but nothing comes back.
    held = connect(proxy, 1, 2)
    held.sendall(b"into the void")
    held.settimeout(0.5)
    with pytest.raises(TimeoutError):
        held.recv(100)
    # The reverse direction and the other links are untouched.
    assert reaches(proxy, 2, 1) and reaches(proxy, 1, 3) and reaches(proxy, 3, 2)
    stats = proxy.stats(1, 2)
    assert stats.aborted == 1 and stats.blackholed == 1
    # Healing aborts the blackholed connection (so the sender reconnects) and forwards again.
    proxy.heal(1, 2)
    assert closed_by_proxy(held)
    held.close()
    assert reaches(proxy, 1, 2)


def test_refuse_mode_resets_new_connections_at_once(cluster):
    proxy, _ = cluster
    proxy.cut(3, 1, mode="refuse")
    start = time.monotonic()
    try:
        with connect(proxy, 3, 1) as s:
            assert closed_by_proxy(s, timeout_s=2.0)
    except ConnectionError:
        pass  # reset before the connect call returned: refused just as well
    assert time.monotonic() - start < 2.0
    assert proxy.stats(3, 1).refused == 1
    assert reaches(proxy, 1, 3)


def test_isolate_partition_and_heal_all(cluster):
    proxy, _ = cluster
    proxy.isolate(1)
    assert proxy.cut_links() == [(1, 2), (1, 3), (2, 1), (3, 1)]
    assert not reaches(proxy, 1, 2) and not reaches(proxy, 3, 1)
    assert reaches(proxy, 2, 3) and reaches(proxy, 3, 2)
    proxy.heal_all()
    assert proxy.cut_links() == []
    assert all(reaches(proxy, s, d) for s, d in proxy.links())
    proxy.partition([[1, 2], [3]])
    assert proxy.cut_links() == [(1, 3), (2, 3), (3, 1), (3, 2)]
    assert reaches(proxy, 1, 2) and reaches(proxy, 2, 1) and not reaches(proxy, 2, 3)
    proxy.heal_all()
    proxy.partition([[2]])  # nodes in no group are each alone
    assert proxy.cut_links() == [link for link in proxy.links()]
    proxy.heal_all()
    proxy.cut_both(1, 3)  # a "ring": everyone still reaches a majority
    assert proxy.cut_links() == [(1, 3), (3, 1)]
    with pytest.raises(ValueError):
        proxy.partition([[1], [1, 2]])
    with pytest.raises(KeyError):
        proxy.cut(1, 9)


def test_a_down_target_resets_the_sender(cluster):
    proxy, nodes = cluster
    nodes[3].close()
    try:
        with connect(proxy, 1, 3) as s:
            assert closed_by_proxy(s, timeout_s=3.0)
    except ConnectionError:
        pass
    deadline = time.monotonic() + WAIT_S
    while proxy.stats(1, 3).upstream_failures < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_close_releases_the_ports_and_the_thread():
    node = EchoNode(1)
    other = EchoNode(2)
    proxy = LinkProxy({1: ("127.0.0.1", node.port), 2: ("127.0.0.1", other.port)}).start()
    port = proxy.port(1, 2)
    open_conn = connect(proxy, 1, 2)
    assert roundtrip(open_conn) == b"2:ping"
    proxy.close()
    proxy.close()  # idempotent
    assert closed_by_proxy(open_conn)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert not any(t.name == "chaos-link-proxy" and t.is_alive() for t in threading.enumerate())
    node.close()
    other.close()
