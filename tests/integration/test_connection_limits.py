"""Connection limits against the real ``twistd -n deaddrop`` under a low file-descriptor limit.

The attack measured on main: 1,010 idle sockets under ``ulimit -n 1024`` and every legitimate
connection was reset while it lasted. Here the same shape at a quarter of the scale: the server
runs with 256 descriptors (RLIMIT_NOFILE soft = hard), 300 sockets hold the source listener
with a half-sent request line, and a source and a journalist must still be served.
"""
from __future__ import annotations

import os
import shutil
import socket
import ssl
import time

from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.transport import ca
from tests._process import ServerProcess, free_port
from tests._support import client_pems, short_tempdir

FD_LIMIT = 256


class _LimitedServer(ServerProcess):
    def argv(self, port: int) -> list[str]:
        # prlimit execs twistd in place: the limit holds from the first line of start-up.
        return ["prlimit", f"--nofile={FD_LIMIT}:{FD_LIMIT}", "--"] + super().argv(port)


def _hold(port: int, count: int) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(b"G")  # a request line that never finishes
        except OSError:
            s.close()
            continue
        socks.append(s)
    return socks


def _source_get(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return _read_all(s)


def _journalist_get(port: int, server_cert: str, client: tuple[str, str]) -> bytes:
    context = ssl.create_default_context(cafile=server_cert)
    context.check_hostname = False
    context.load_cert_chain(client[1], client[0])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw) as s:
            s.sendall(b"GET /login HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return _read_all(s)


def _read_all(s: socket.socket) -> bytes:
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk


class FdReserveTests(unittest.TestCase):
    timeout = 180

    def setUp(self) -> None:
        workdir = short_tempdir()
        self.addCleanup(shutil.rmtree, workdir, True)
        self.data_dir = os.path.join(workdir, "data")
        ca_dir = os.path.join(self.data_dir, "ca")
        ca.init_ca(ca_dir)
        r = ca.issue_client_cert(ca_dir, "alice", os.path.join(workdir, "alice.p12"), b"pw")
        self.client = client_pems(r["p12"], b"pw")
        self.journalist_port = free_port()
        self.server = _LimitedServer(self.data_dir, extra_args=[
            "--journalist-listen", f"tcp:{self.journalist_port}:interface=127.0.0.1"])
        self.addCleanup(self.server.cleanup)

    def _attack(self) -> dict:
        self.server.start()
        server_cert = os.path.join(self.data_dir, "tls", "server.pem")
        held = _hold(self.server.port, 300)
        results = {"source": [], "journalist": []}
        try:
            for _ in range(5):
                for name, call in (("source", lambda: _source_get(self.server.port)),
                                   ("journalist", lambda: _journalist_get(self.journalist_port, server_cert,
                                                                          self.client))):
                    try:
                        results[name].append(call()[:12])
                    except OSError as e:
                        results[name].append(type(e).__name__.encode())
                held += _hold(self.server.port, 50)  # the attacker keeps coming back
                time.sleep(0.2)
        finally:
            for s in held:
                s.close()
        results["log"] = self.server.log_text()
        return results

    def test_an_idle_flood_under_a_low_fd_limit_locks_out_no_one(self):
        d = deferToThread(self._attack)

        def check(results: dict) -> None:
            self.assertEqual(results["journalist"], [b"HTTP/1.1 200"] * 5)
            self.assertEqual(results["source"], [b"HTTP/1.1 200"] * 5)
            self.assertNotIn("EMFILE", results["log"])
            self.assertNotIn("Too many open files", results["log"])

        return d.addCallback(check)
