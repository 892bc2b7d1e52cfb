"""How upload pump slots are shared (pure logic on a Clock: no threads, no reactor)."""
from twisted.internet.task import Clock
from twisted.trial import unittest

from deaddrop.admission.queues import Admission, Busy, KeyBusy
from deaddrop.admission.upload_slots import UploadSlots

KIB = 1024


class Upload:
    """One request's body: its progress, its ticket, and whether it was ended to make room."""

    def __init__(self, slots: UploadSlots, key, circuit=None):
        self.slots = slots
        self.key = key
        self.circuit = circuit
        self.progress = slots.progress()
        self.tickets = []
        self.evicted = 0

    def file(self):
        ticket = self.slots.try_acquire(self.key, self.circuit, self.progress, evict=self._evicted)
        self.tickets.append(ticket)
        return ticket

    def _evicted(self):
        self.evicted += 1
        for t in self.tickets:
            t.release()

    def send(self, n):
        self.progress.received(n)


class UploadSlotTests(unittest.TestCase):
    def setUp(self):
        self.clock = Clock()
        self.admission = Admission(pool=None, slots=4, clock=self.clock.seconds)
        self.slots = UploadSlots(self.admission, per_key=2, per_circuit=3, fair_rate=16 * KIB, grace=30.0,
                                 window=60.0, penalty=600.0)

    def upload(self, key, circuit=None):
        u = Upload(self.slots, key, circuit)
        u.file()
        return u

    def run_for(self, seconds, uploads, rate):
        """``seconds`` pass in 1 s steps, each upload sending ``rate`` bytes a second."""
        for _ in range(int(seconds)):
            self.clock.advance(1.0)
            for u in uploads:
                u.send(rate)

    def test_a_newcomer_ends_the_slowest_upload_past_its_grace(self):
        trickles = [self.upload(f"attacker{i}") for i in range(3)]
        slowest = self.upload("attacker3")
        self.run_for(40, trickles, 3 * KIB)
        for _ in range(40):  # 2 KiB/s, the connection floor
            slowest.send(2 * KIB)
        newcomer = self.upload("source")
        self.assertEqual(slowest.evicted, 1)
        self.assertEqual([u.evicted for u in trickles], [0, 0, 0])
        self.assertEqual(self.admission.running, 4)
        self.assertEqual(self.slots.holding("attacker3"), 0)
        self.assertEqual(self.slots.holding("source"), 1)
        newcomer.tickets[0].release()
        self.assertEqual(self.admission.running, 3)

    def test_uploads_at_a_fair_rate_are_never_ended(self):
        fast = [self.upload(f"s{i}") for i in range(4)]
        self.run_for(120, fast, 20 * KIB)
        self.assertRaises(Busy, self.upload, "newcomer")
        self.assertEqual([u.evicted for u in fast], [0, 0, 0, 0])
        self.assertEqual(self.admission.running, 4)

    def test_uploads_within_their_grace_are_not_ended(self):
        # Under the fair rate, but not a trickle: a slow start is given its grace.
        young = [self.upload(f"s{i}") for i in range(4)]
        self.run_for(29, young, 5 * KIB)
        self.assertRaises(Busy, self.upload, "newcomer")
        self.clock.advance(1.0)
        self.upload("newcomer")
        self.assertEqual(sum(u.evicted for u in young), 1)

    def test_a_trickle_is_ended_within_its_grace_once_it_is_plain(self):
        trickles = [self.upload(f"a{i}") for i in range(4)]
        self.run_for(2, trickles, 2600)
        self.assertRaises(Busy, self.upload, "newcomer")  # too early to tell
        self.run_for(1, trickles, 2600)
        self.upload("newcomer")  # 3 s at 2,600 bytes a second: a trickle, not a slow start
        self.assertEqual(sum(u.evicted for u in trickles), 1)

    def test_a_burst_then_silence_for_a_window_counts_as_stalled(self):
        burst = self.upload("burst")
        burst.send(10 ** 8)
        others = [self.upload(f"s{i}") for i in range(3)]
        self.run_for(61, others, 20 * KIB)
        self.upload("newcomer")
        self.assertEqual(burst.evicted, 1)

    def test_the_rate_is_that_of_the_recent_window(self):
        # Fast at first, then a trickle: its average since the start is high, its recent one not.
        early = self.upload("early")
        others = [self.upload(f"s{i}") for i in range(3)]
        self.run_for(60, [early], 1024 * KIB)
        self.run_for(60, others, 20 * KIB)
        self.run_for(90, others + [early], 0)
        self.run_for(90, others, 20 * KIB)
        self.upload("newcomer")
        self.assertEqual(early.evicted, 1)
        self.assertEqual([u.evicted for u in others], [0, 0, 0])

    def test_a_body_already_complete_is_never_ended(self):
        done = [self.upload(f"s{i}") for i in range(4)]
        self.run_for(60, done, 100)
        for u in done:
            u.progress.ended()  # gpg is finishing them: their sources are about to be thanked
        self.assertRaises(Busy, self.upload, "newcomer")
        self.assertEqual(self.admission.running, 4)

    def test_one_tor_circuit_holds_a_small_share_at_most(self):
        self.upload("a", circuit="circuit 1")
        self.upload("a", circuit="circuit 1")
        self.upload("b", circuit="circuit 1")
        self.assertRaises(Busy, self.upload, "c", "circuit 1")
        self.upload("c", circuit="circuit 2")
        self.assertEqual(self.admission.running, 4)

    def test_connections_without_a_circuit_are_not_capped_together(self):
        # --tor none: every source shares the local bucket; only the identity cap applies.
        for key in ("a", "a", "b", "b"):
            self.upload(key, circuit=None)
        self.assertEqual(self.admission.running, 4)
        self.assertRaises(KeyBusy, self.upload, "a", None)

    def test_the_identity_cap_comes_before_making_room(self):
        slow = [self.upload(f"s{i}") for i in range(3)]
        a = self.upload("a")
        self.run_for(60, slow, 100)
        a.send(10 ** 8)
        self.assertEqual(self.slots.holding("a"), 1)
        Upload(self.slots, "a").file()  # its second: makes room
        self.assertRaises(KeyBusy, Upload(self.slots, "a").file)
        self.assertEqual(sum(u.evicted for u in slow), 1)

    def test_an_identity_whose_upload_was_ended_gets_no_grace_for_a_while(self):
        slow = [self.upload(f"s{i}") for i in range(4)]
        self.run_for(60, slow, 100)
        source = self.upload("source")
        source.send(10 ** 8)
        ended = next(u for u in slow if u.evicted)
        # It comes straight back with a new trickle (ending another slow one to get in), and
        # the next newcomer, a second later, ends that trickle although it is 1 s old.
        again = self.upload(ended.key)
        self.clock.advance(1.0)
        source_2 = self.upload("source 2")
        self.assertEqual(again.evicted, 1)
        self.assertEqual(source.evicted, 0)
        self.clock.advance(601.0)  # the penalty is over: a fresh upload of it has its grace again
        for t in source.tickets:
            t.release()
        survivors = [u for u in slow if not u.evicted] + [source_2]
        self.run_for(60, survivors, 1024 * KIB)  # the others are fast: only a penalty could end it
        later = self.upload(ended.key)
        self.clock.advance(1.0)
        self.assertRaises(Busy, self.upload, "source 3")
        self.assertEqual(later.evicted, 0)

    def test_trickles_dropped_before_their_grace_cannot_get_a_slow_steady_upload_ended(self):
        # A source on a slow bridge: steady at 10 KiB/s, past its grace.
        source = self.upload("source")
        self.run_for(40, [source], 10 * KIB)
        # An attacker keeps the other slots with trickles it drops and reopens within the grace.
        trickles = [self.upload(f"a{i}", circuit="attacker") for i in range(3)]
        self.run_for(5, trickles + [source], 5 * KIB)
        for t in trickles:
            t.progress.interrupted = True  # what MultipartUpload.abort records
            for ticket in t.tickets:
                ticket.release()
        reopened = [self.upload(f"a{i}", circuit="attacker") for i in range(3)]
        self.run_for(1, reopened, 5 * KIB)
        self.run_for(1, [source], 10 * KIB)
        self.upload("attacker newcomer", circuit="attacker 2")
        self.assertEqual(source.evicted, 0)
        self.assertEqual(sum(u.evicted for u in reopened), 1)

    def test_penalties_are_bounded(self):
        for i in range(200):
            u = self.upload(f"k{i}", circuit=f"c{i}")
            self.clock.advance(31.0)
            self.assertEqual(self.admission.running, min(i + 1, 4))
            del u
        self.assertLessEqual(len(self.slots._penalised), 8 * self.admission.slots)

    def test_released_slots_are_counted_back(self):
        uploads = [self.upload("a", circuit="c") for _ in range(2)]
        for t in uploads[0].tickets + uploads[1].tickets:
            t.release()
            t.release()
        self.assertEqual((self.admission.running, self.slots.holding("a")), (0, 0))
        self.assertEqual(dict(self.slots._per_circuit), {})
        self.assertEqual(len(self.slots._in_flight), 0)


class DiskRoomTests(unittest.TestCase):
    """``make_room``: the disk shared by the pump slots' rule (slots are plenty here)."""

    def setUp(self):
        self.clock = Clock()
        self.admission = Admission(pool=None, slots=64, clock=self.clock.seconds)
        self.slots = UploadSlots(self.admission, per_key=2, per_circuit=3, fair_rate=16 * KIB, grace=30.0,
                                 window=60.0, penalty=600.0)

    def test_the_slowest_holders_below_the_fair_rate_are_ended_until_the_room_is_made(self):
        holds = {}
        uploads = {}
        for name, rate, held in [("fast", 20 * KIB, 900), ("slow", 3 * KIB, 300), ("slower", 2 * KIB, 300),
                                 ("empty", 1 * KIB, 0)]:
            u = Upload(self.slots, name)
            u.file()
            uploads[name], holds[u.progress] = (u, rate), held
        for _ in range(40):
            self.clock.advance(1.0)
            for u, rate in uploads.values():
                u.send(rate)
        # More than the trickles hold: nothing is ended for nothing (the fast one is never counted).
        self.assertFalse(self.slots.make_room(601, holds.get))
        self.assertEqual([u.evicted for u, _ in uploads.values()], [0, 0, 0, 0])
        # The slowest that holds space goes first, and only as many as needed.
        self.assertTrue(self.slots.make_room(200, holds.get))
        self.assertEqual({n: u.evicted for n, (u, _) in uploads.items()},
                         {"fast": 0, "slow": 0, "slower": 1, "empty": 0})
        self.assertEqual(self.slots.holding("slower"), 0)
