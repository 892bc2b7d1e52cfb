"""StreamEncryption against the real gpg: ciphertext only, bounded buffering, clean aborts."""
import os
import zlib

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.crypto._gzip import GzipFramer
from deaddrop.crypto.gpg import prepare_homedir
from deaddrop.crypto.pool import WorkerPool
from deaddrop.crypto.streaming import EncryptionFailed, EncryptionTarget, StreamEncryption
from tests._support import kill_gpg_agent, short_tempdir, test_svs


class StreamEncryptionTests(unittest.TestCase):
    def setUp(self):
        self.dir = short_tempdir()
        home = os.path.join(self.dir, "g")
        prepare_homedir(home)
        self.addCleanup(kill_gpg_agent, home)
        self.target = EncryptionTarget("gpg", home, test_svs().public_key_path)
        self.pool = WorkerPool(reactor, "test-stream", max_threads=4)
        self.addCleanup(self.pool.stop)

    def stream(self, **kw):
        return StreamEncryption(reactor, self.pool, self.target, os.path.join(self.dir, "out.gpg"), **kw)

    @inlineCallbacks
    def test_gzip_stream_decrypts_to_the_input_with_its_name(self):
        data = os.urandom(3 * 1024 * 1024 + 17)
        stream = self.stream(gzip_name="résumé.pdf")
        for i in range(0, len(data), 65536):
            stream.write(data[i:i + 65536])
        size = yield stream.finish()
        with open(stream.out_path, "rb") as f:
            blob = f.read()
        self.assertEqual(size, len(blob))
        self.assertNotIn(data[:4096], blob)
        plain = test_svs().decrypt(blob)
        end = plain.index(b"\x00", 10)
        self.assertEqual(plain[10:end].decode(), "résumé.pdf")
        self.assertEqual(zlib.decompress(plain[end + 1:], -zlib.MAX_WBITS), data)
        self.assertEqual(stream.plaintext_size, len(data))

    @inlineCallbacks
    def test_producer_is_paused_above_high_water_and_resumed_after_draining(self):
        events = []
        stream = self.stream(on_pause=lambda: events.append("pause"), on_resume=lambda: events.append("resume"),
                             high_water=256 * 1024, low_water=64 * 1024)
        chunk = os.urandom(64 * 1024)
        for _ in range(64):  # 4 MiB written at once: far past the high-water mark
            stream.write(chunk)
        self.assertEqual(events, ["pause"])
        yield stream.finish()
        self.assertEqual(events, ["pause", "resume"])

    @inlineCallbacks
    def test_abort_leaves_no_file(self):
        stream = self.stream()
        stream.write(os.urandom(100_000))
        stream.abort()
        with self.assertRaises(EncryptionFailed):
            yield stream.finish()
        self.assertFalse(os.path.exists(stream.out_path))

    @inlineCallbacks
    def test_aborts_leave_no_gpg_lock_files_in_the_home(self):
        # A killed gpg leaves its dot-lock files (".#lk0x...", with host name and pid, and an
        # exact mtime) in the home: one per aborted upload, an anonymous way to grow the
        # directory and to date each abort on a seized disk.
        for _ in range(5):
            stream = self.stream()
            stream.write(os.urandom(100_000))
            yield self.pool.run(lambda: __import__("time").sleep(0.2))  # gpg is up and reading
            stream.abort()
            with self.assertRaises(EncryptionFailed):
                yield stream.finish()
        leftovers = [n for n in os.listdir(self.target.homedir) if n.startswith(".#lk") or n.endswith(".lock")]
        self.assertEqual(leftovers, [])

    @inlineCallbacks
    def test_gpg_failure_is_reported_and_leaves_no_file(self):
        self.target = EncryptionTarget("gpg", self.target.homedir, os.path.join(self.dir, "missing.asc"))
        stream = self.stream()
        stream.write(b"x" * 1000)
        with self.assertRaises(EncryptionFailed):
            yield stream.finish()
        self.assertFalse(os.path.exists(stream.out_path))


class GzipFramerTests(unittest.TestCase):
    def frame(self, name, chunks):
        framer = GzipFramer(name)
        return framer.header() + b"".join(bytes(b) for c in chunks for b in framer.frame(c)) + framer.trailer()

    def test_python_gzip_reads_our_stream(self):
        import gzip

        data = os.urandom(3 * 65535 + 100)  # chunks across, on and inside the 64 KiB block limit
        blob = self.frame("a.txt", [data[:100], data[100:100 + 2 * 65535], data[100 + 2 * 65535:], b""])
        self.assertEqual(gzip.decompress(blob), data)

    def test_stored_blocks_carry_the_chunk_without_a_copy(self):
        chunk = os.urandom(200_000)
        pieces = GzipFramer("a").frame(chunk)
        views = [p for p in pieces if isinstance(p, memoryview)]
        self.assertEqual(b"".join(views), chunk)
        self.assertTrue(all(v.obj is chunk for v in views))

    def test_svs_reader_gets_name_and_bytes_back(self):
        import io

        from deaddrop.svs._gzip import GzipReader

        data = os.urandom(300_000)
        reader = GzipReader(io.BytesIO(self.frame("résumé.pdf", [data[:70_000], data[70_000:]])))
        self.assertEqual(reader.read_header(), "résumé.pdf".encode())
        self.assertEqual(b"".join(reader.chunks()), data)


class ShutdownTests(unittest.TestCase):
    @inlineCallbacks
    def test_stopping_the_service_ends_an_upload_in_flight(self):
        """A pump thread blocked on an unfinished upload must not hang the process at exit."""
        from tests._support import start_server

        server = yield start_server(self)
        newsroom = server.service.newsroom
        stream = newsroom.submissions.encrypt_stream(gzip_name="x", compress=False, on_pause=lambda: None,
                                                     on_resume=lambda: None)
        stream.write(b"half an upload")
        from twisted.internet.task import deferLater

        yield deferLater(reactor, 0.2, lambda: None)
        yield server.stop()  # would block forever in ThreadPool.stop() without abort_streams()
        self.assertFalse(os.path.exists(stream.out_path))
