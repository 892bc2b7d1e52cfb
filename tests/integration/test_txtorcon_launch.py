"""What txtorcon cannot carry for DeadDrop, shown against the real ``tor`` and txtorcon.

docs/tor.md (*txtorcon*) says, need by need, why ``--tor launch`` runs ``tor`` itself instead
of ``txtorcon.launch``, and why the onions go through txtorcon's control protocol rather than
its ``TorConfig`` onion-service objects. Each row there is one test here. If a txtorcon release
lifts a limitation, its test fails: then the row, and perhaps the launcher, can change.

Most tests need no network: the Tor they run has ``DisableNetwork 1``. One needs a Tor that
bootstraps, on the private network of ``tornet.py``.
"""
from __future__ import annotations

import errno
import inspect
import os
import shutil
import signal
import subprocess
import tempfile
import warnings

import txtorcon
from twisted.internet import reactor
from twisted.internet.defer import ensureDeferred, fail
from twisted.internet.endpoints import UNIXClientEndpoint
from twisted.internet.error import ConnectError, ServiceNameUnknownError
from twisted.trial import unittest
from txtorcon import AuthBasic, EphemeralAuthenticatedOnionService, EphemeralOnionService, TorConfig
from txtorcon import TorControlProtocol, TorProtocolError, TorProtocolFactory
from txtorcon.torcontrolprotocol import TorDisconnectError

from deaddrop.tor import _control, keys
from deaddrop.tor._config import ControlEndpoint
from deaddrop.tor.defences import Defences, hidden_service_lines
from tests.integration import tornet
from tests.integration.test_tor_network import sleep, wait_for

_DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "tor.md")


class _Spy(TorControlProtocol):
    """txtorcon's own control protocol, noting every command sent through it."""

    def __init__(self, commands: list[str]) -> None:
        super().__init__()
        self._commands = commands
        self.gone = False

    def connectionLost(self, reason):
        self.gone = True
        super().connectionLost(reason)

    def queue_command(self, cmd, arg=None):
        self._commands.append(cmd.decode() if isinstance(cmd, bytes) else cmd)
        return super().queue_command(cmd, arg)


class _SpyFactory(TorProtocolFactory):
    def __init__(self, commands: list[str], protocols: list) -> None:
        super().__init__()
        self._commands = commands
        self._protocols = protocols

    def buildProtocol(self, addr):
        proto = _Spy(self._commands)
        proto.factory = self
        self._protocols.append(proto)
        return proto


class _Lines:
    """A ``stdout=`` for ``txtorcon.launch``: it wants ``write(str)``."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text


class _Launch:
    """One ``txtorcon.launch`` of the real tor, as DeadDrop would call it, and its cleanup.

    ``connect`` is launch's ``connection_creator``: "retry" connects to the control socket as
    DeadDrop does (again every 0.1 s until it answers), "fail_first" fails its first call as a
    connect that comes too early does, None keeps txtorcon's own. Through the first two, every
    command txtorcon sends is noted in ``commands``.
    """

    def __init__(self, case: unittest.TestCase, data_dir: str, options: list[tuple[str, object]],
                 connect: str | None = "retry", **launch_kw) -> None:
        self._case = case
        self.data_dir = data_dir
        self.socket = os.path.join(data_dir, "control.socket")  # launch's own choice
        self.pid_file = os.path.join(os.path.dirname(data_dir), "tor.pid")
        self.commands: list[str] = []
        self.protocols: list = []
        self.connect_calls = 0
        self._connect_mode = connect
        config = TorConfig()
        for key, value in options + [("PidFile", self.pid_file)]:
            setattr(config, key, value)
        self.result: list = []
        self.launched = txtorcon.launch(
            reactor, data_directory=data_dir, socks_port=0, _tor_config=config, kill_on_stderr=False,
            connection_creator=self._connect if connect else None, **launch_kw,
        )
        self.launched.addBoth(self.result.append)  # a failure is looked at, never left unhandled
        case.addCleanup(lambda: ensureDeferred(self.stop()))

    def _connect(self):
        self.connect_calls += 1
        if self._connect_mode == "fail_first" and self.connect_calls == 1:
            return fail(ConnectError(errno.ENOENT, "No such file or directory"))
        return ensureDeferred(self._connect_retrying())

    async def _connect_retrying(self):
        endpoint = UNIXClientEndpoint(reactor, self.socket)
        for _ in range(100):
            try:
                return await endpoint.connect(_SpyFactory(self.commands, self.protocols))
            except ConnectError:
                await sleep(0.1)
        raise AssertionError("the control socket never answered")

    def pid(self) -> int | None:
        try:
            with open(self.pid_file) as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    async def control(self):
        """An authenticated control connection of our own to this Tor."""
        await wait_for(lambda: os.path.exists(self.socket), 30, "the control socket")
        return await _control.connect_control(reactor, ControlEndpoint("unix", path=self.socket))

    async def stop(self) -> None:
        """Kill this Tor (if it still runs) and wait until txtorcon saw it end."""
        if "TAKEOWNERSHIP" in self.commands and not self.protocols[0].gone:
            # Killed while txtorcon reads its configuration, txtorcon raises a TypeError.
            await wait_for(lambda: "GETINFO onions/detached" in self.commands, 60, "txtorcon's TorConfig")
        pid = self.pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proto in self.protocols:
            if proto.transport is not None:
                proto.transport.loseConnection()
        if self.result and isinstance(self.result[0], txtorcon.Tor):
            await self.result[0].process.quit()  # launch had fired: fires once Tor is gone
            await sleep(0.2)  # processEnded follows processExited once the pipes close
        else:
            await wait_for(lambda: self.result, 30, "txtorcon to see its Tor end")
        self._case.flushLoggedErrors(RuntimeError)  # txtorcon logs every end of Tor as an error


class _Base(unittest.TestCase):
    timeout = 90

    def setUp(self):
        reason = tornet.TorNetwork.available()
        if reason:
            raise unittest.SkipTest(reason)

    def short_dir(self) -> str:
        path = tempfile.mkdtemp(prefix="dd-txl-")
        self.addCleanup(shutil.rmtree, path, True)
        return path

    def offline(self, **kw) -> _Launch:
        options = kw.pop("options", [])
        data_dir = kw.pop("data_dir", None) or os.path.join(self.short_dir(), "tor")
        return _Launch(self, data_dir, [("DisableNetwork", 1)] + options, **kw)


class LaunchTests(_Base):
    """``txtorcon.launch``: what it does that DeadDrop's launch must not, or cannot do."""

    async def test_it_sends_resetconf_which_configures_every_torrc_onion_anew(self):
        # DeadDrop never sends SETCONF or RESETCONF: Tor then configures its torrc onion services
        # anew, PoW state included (docs/tor.md). launch sends one to every Tor it starts.
        hs_dir = os.path.join(self.short_dir(), "source")
        keys.load_or_create_onion_key(hs_dir)
        stdout = _Lines()
        launch = self.offline(stdout=stdout, options=[
            ("HiddenServiceDir", hs_dir), ("HiddenServicePort", "80 127.0.0.1:9"),
            ("HiddenServicePoWDefensesEnabled", 1), ("Log", "info stdout"),
        ])
        warnings.filterwarnings("ignore", "Ignoring unknown HiddenService option", RuntimeWarning)
        self.addCleanup(warnings.resetwarnings)
        await wait_for(lambda: "RESETCONF __OwningControllerProcess" in launch.commands, 30, "RESETCONF")
        self.assertEqual(launch.commands[launch.commands.index("TAKEOWNERSHIP") + 1],
                         "RESETCONF __OwningControllerProcess")
        configuring = f'config_generic_service(): HiddenServiceDir="{hs_dir}". Configuring...'

        def reconfigured() -> bool:
            _, opened, after = stdout.text.partition("New control connection opened")
            return bool(opened) and configuring in after

        await wait_for(reconfigured, 15, "Tor to configure the onion service again")
        self.assertIn("Service PoW defenses are enabled", stdout.text.split("New control connection opened")[1])

    async def test_its_deferred_fires_only_at_100_percent(self):
        # DeadDrop needs the control connection before bootstrap: the stall explanation (after
        # 60 s without progress) quotes Tor's own warning, and TAKEOWNERSHIP comes first.
        launch = self.offline()
        await wait_for(lambda: "TAKEOWNERSHIP" in launch.commands, 30, "txtorcon to connect")
        control = await launch.control()
        self.addCleanup(control.transport.loseConnection)
        phase = await control.get_info_raw("status/bootstrap-phase")
        self.assertIn("PROGRESS=0 ", phase)
        await sleep(3)
        self.assertEqual(launch.result, [])  # no Tor object, no control protocol for the caller

    async def test_a_first_connect_that_fails_is_never_tried_again(self):
        # txtorcon connects once, when Tor prints "Opening Control listener", before the socket
        # is there (txtorcon issue 349): ENOENT or ECONNREFUSED in 4 runs of 10 here. Nothing
        # tries again, and launch hangs (forever, or until its timeout kills a healthy Tor).
        launch = self.offline(connect="fail_first")
        control = await launch.control()  # the socket answers: a retry would have worked
        self.addCleanup(control.transport.loseConnection)
        await sleep(3)
        self.assertEqual(launch.connect_calls, 1)
        self.assertEqual(launch.result, [])
        self.flushLoggedErrors(ConnectError)

    async def test_a_clean_end_of_tor_is_logged_as_an_error(self):
        # Tor ends cleanly when its owning control connection closes (DeadDrop's stop); txtorcon
        # writes that to twistd's log as an error all the same.
        launch = self.offline()
        await wait_for(lambda: "GETINFO onions/detached" in launch.commands, 60, "txtorcon's TorConfig")
        launch.protocols[0].transport.loseConnection()
        await wait_for(lambda: launch.result, 30, "Tor to end")
        logged = [f.getErrorMessage() for f in self.flushLoggedErrors(RuntimeError)]
        self.assertEqual(logged, ["Tor exited with error-code 0"])

    async def test_a_byte_that_is_not_ascii_on_tors_stdout_kills_tor(self):
        # DeadDrop reads Tor's stdout to count its lines; launch hands it to stdout= only after
        # data.decode("ascii"). Here the byte is in the data directory's name, which Tor prints.
        launch = self.offline(data_dir=os.path.join(self.short_dir(), "tör"), connect=None, stdout=_Lines())
        await wait_for(lambda: launch.result, 30, "launch to fail")
        self.assertEqual(launch.result[0].getErrorMessage(), f"Tor was killed ({int(signal.SIGPIPE)}).")
        self.assertEqual(len(self.flushLoggedErrors(UnicodeDecodeError)), 1)

    async def test_a_long_data_dir_leaves_launch_no_control_port(self):
        # DeadDrop falls back to "ControlPort 127.0.0.1:auto" when DATA/tor/control.sock would
        # not fit in a socket address. launch's own socket path fails there, and it cannot
        # connect to a port Tor picks.
        deep = os.path.join(self.short_dir(), "d" * 90, "tor")
        os.makedirs(os.path.dirname(deep))
        long_path = self.offline(data_dir=deep, connect=None)
        await wait_for(lambda: long_path.result, 30, "launch to fail")
        self.assertEqual(long_path.result[0].getErrorMessage(), "Tor exited with error-code 1")

        auto = self.offline(connect=None, control_port="auto")
        await wait_for(lambda: self.flushLoggedErrors(ServiceNameUnknownError), 30, "the connect to fail")
        self.assertFalse(auto.result and isinstance(auto.result[0], txtorcon.Tor))


class OnionObjectTests(_Base):
    """txtorcon's onion-service objects and ``TorConfig`` on a Tor running DeadDrop's torrc."""

    async def start_tor(self, extra: list[str]):
        base = self.short_dir()
        data = os.path.join(base, "tor")
        os.mkdir(data, 0o700)
        sock = os.path.join(data, "control.sock")
        torrc = os.path.join(data, "torrc")
        with open(torrc, "w") as f:
            f.write("\n".join([f"DataDirectory {data}", f'ControlPort unix:"{sock}"', "CookieAuthentication 1",
                               "SocksPort 0", "DisableNetwork 1"] + extra) + "\n")
        proc = subprocess.Popen(["tor", "-f", torrc, "--defaults-torrc", os.path.join(data, "none")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def stop():
            proc.kill()
            proc.wait()

        self.addCleanup(stop)
        await wait_for(lambda: os.path.exists(sock), 30, "the control socket")
        control = await _control.connect_control(reactor, ControlEndpoint("unix", path=sock))
        self.addCleanup(control.transport.loseConnection)
        return base, control

    async def test_torconfig_drops_the_source_onions_defences(self):
        base = self.short_dir()
        hs_dir = os.path.join(base, "source")
        keys.load_or_create_onion_key(hs_dir)
        lines = hidden_service_lines(hs_dir, "127.0.0.1:9", Defences(), pow_available=True)
        _, control = await self.start_tor(lines)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            config = await TorConfig.from_protocol(control)
        # What a config.save() would send back (a SETCONF): the directory and the port only.
        self.assertEqual(config.HiddenServices[0].config_attributes(),
                         [("HiddenServiceDir", hs_dir), ("HiddenServicePort", "80 127.0.0.1:9")])
        ignored = sorted(str(w.message).split(": ", 1)[1].split("=")[0] for w in caught)
        self.assertEqual(ignored, sorted(line.split(" ")[0] for line in lines[2:]))

    async def test_ephemeral_onions_have_no_v3_client_auth_and_no_defences(self):
        base, control = await self.start_tor([])
        config = await TorConfig.from_protocol(control)
        key, _ = keys.load_or_create_onion_key(os.path.join(base, "journalist"))
        with self.assertRaises(TorProtocolError) as refused:
            await EphemeralAuthenticatedOnionService.create(
                reactor, config, ["80 127.0.0.1:9"], private_key=key.control_blob(), version=3,
                auth=AuthBasic(["alice"]),
            )
        self.assertIn('"BasicAuth"', str(refused.exception))  # v2's; Tor wants V3Auth + ClientAuthV3
        # No keyword for PoWDefensesEnabled, PoWQueueRate/Burst, MaxStreams or its close flag.
        for create in (EphemeralOnionService.create, EphemeralAuthenticatedOnionService.create):
            words = set(inspect.signature(create).parameters)
            self.assertFalse({w for w in words if "pow" in w.lower() or "stream" in w.lower()}, words)


class SupervisionTests(_Base):
    """A launched Tor that ends: what txtorcon tells its caller."""

    timeout = tornet.BRING_UP_SECONDS + 90

    async def test_a_tors_end_is_an_error_in_the_log_not_an_exit_status(self):
        # DeadDrop's tor.exited says how Tor ended (reason=signal_9, exit_1) and quotes Tor's
        # last error; txtorcon logs every end as a RuntimeError, a clean one too, and tells the
        # caller nothing but the lost control connection.
        net = tornet.shared_network()
        data = os.path.join(self.short_dir(), "tor")
        net.seed_data_dir(data)
        options = {}
        for key, value in net.tor_options:
            options.setdefault(key, []).append(value)
        launch = _Launch(self, data, [(k, v if len(v) > 1 else v[0]) for k, v in options.items()],
                         tor_binary=net.wrapper)
        await wait_for(lambda: launch.result, 60, "launch to fire")
        tor = launch.result[0]
        self.assertIsInstance(tor, txtorcon.Tor)
        lost = tor.protocol.when_disconnected()
        os.kill(launch.pid(), signal.SIGKILL)
        with self.assertRaises(TorDisconnectError):  # all the caller hears
            await lost
        await tor.process.quit()
        await sleep(0.2)
        logged = [f.getErrorMessage() for f in self.flushLoggedErrors(RuntimeError)]
        self.assertEqual(logged, ["Tor was killed (9)."])


class DocsTests(unittest.TestCase):
    def test_the_table_names_the_txtorcon_in_use(self):
        # A new txtorcon may lift a limitation: re-run this module and re-read the table.
        with open(_DOCS, encoding="utf-8") as f:
            self.assertIn(f"txtorcon {txtorcon.__version__}", f.read())
