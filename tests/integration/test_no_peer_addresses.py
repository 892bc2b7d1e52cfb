"""No message from either listener carries a peer address (issue 10).

The real ``twistd -n deaddrop`` runs with a lowered file-descriptor limit; clients connect
from 127.0.0.2 (a loopback address nothing else here uses) until accept() fails with EMFILE,
which drives Twisted's out-of-file-descriptors recovery in ``twisted.internet.tcp``: it closes
the pending connections and logs each one. Then twistd's whole log is searched for the
clients' address and source ports.
"""
from __future__ import annotations

import os
import re
import resource
import shutil
import socket
import time

from twisted.internet import defer, protocol, reactor
from twisted.internet.endpoints import TCP4ClientEndpoint, serverFromString
from twisted.trial import unittest

from deaddrop.transport import ca
from tests._process import ServerProcess, free_port
from deaddrop.transport.quiet_ports import hide_peer_addresses
from tests._support import short_tempdir, wait_until

CLIENT_HOST = "127.0.0.2"


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _flood(port: int, count: int) -> list[socket.socket]:
    """``count`` connections from CLIENT_HOST, kept open; -> the sockets (their ports are in the log if leaked)."""
    socks = []
    for _ in range(count):
        s = socket.socket()
        s.bind((CLIENT_HOST, 0))
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        socks.append(s)
    return socks


class PeerAddressTests(unittest.TestCase):
    def setUp(self) -> None:
        workdir = short_tempdir()
        self.addCleanup(shutil.rmtree, workdir, True)
        self.data_dir = os.path.join(workdir, "data")
        ca.init_ca(os.path.join(self.data_dir, "ca"))
        self.journalist_port = free_port()
        self.server = ServerProcess(self.data_dir, extra_args=[
            "--journalist-listen", f"tcp:{self.journalist_port}:interface=127.0.0.1"])
        self.addCleanup(self.server.cleanup)

    def wait_for_log(self, pattern: str, since: int, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.server.log_text()[since:]):
                return
            time.sleep(0.1)
        self.fail(f"no {pattern!r} in twistd's log:\n{self.server.log_text()[since:][-3000:]}")

    def exhaust(self, port: int) -> list[int]:
        """Drive the listener on ``port`` into EMFILE recovery; -> the client ports used."""
        since = len(self.server.log_text())
        socks = _flood(port, 40)
        try:
            self.wait_for_log(r"EMFILE", since)
            # Recovery logs once per closed socket: let it finish.
            time.sleep(0.5)
            return [s.getsockname()[1] for s in socks]
        finally:
            for s in socks:
                s.close()

    def test_fd_exhaustion_on_both_listeners_logs_no_peer_address(self) -> None:
        self.server.start()
        pid = self.server.proc.pid
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (_open_fds(pid) + 6, hard))
        ports = self.exhaust(self.server.port)
        time.sleep(1.0)  # the server sees the clients go and frees its descriptors
        ports += self.exhaust(self.journalist_port)
        log = self.server.log_text()
        self.assertIn("EMFILE", log)
        self.assertFalse(CLIENT_HOST in log, "the clients' address appears in the log")
        # A port as an address part ("host:PORT", "port=PORT", "('host', PORT)"): any five-digit
        # number alone could also be a pid, a byte count or another listener's port.
        leaked = [p for p in ports if re.search(rf"(?:port=|:|,\s?){p}\b", log)]
        self.assertEqual(leaked, [], "client source ports appear in the log")


class LogPrefixTests(unittest.TestCase):
    """Anything logged while a connection is handled is tagged with its log prefix."""

    @defer.inlineCallbacks
    def test_connection_log_prefix_has_no_peer_address(self):
        accepted = []

        class Remember(protocol.Protocol):
            def connectionMade(self):
                accepted.append(self.transport)

        port = yield serverFromString(reactor, "tcp:0:interface=127.0.0.1").listen(
            protocol.Factory.forProtocol(Remember))
        self.addCleanup(port.stopListening)
        hide_peer_addresses(port)
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", port.getHost().port, bindAddress=(CLIENT_HOST, 0))
        client = yield endpoint.connect(protocol.Factory.forProtocol(protocol.Protocol))
        self.addCleanup(client.transport.loseConnection)
        yield wait_until(lambda: accepted)
        transport = accepted[0]
        self.addCleanup(transport.loseConnection)
        self.assertNotIn(CLIENT_HOST, transport.logPrefix())
        self.assertNotIn(str(client.transport.getHost().port), transport.logPrefix())
        self.assertEqual(transport.getPeer().host, CLIENT_HOST)  # still known to code that needs it
