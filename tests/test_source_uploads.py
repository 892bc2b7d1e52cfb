"""What one upload body holds while it arrives (``UploadHold``), on a Clock: no threads, no disk."""
from twisted.internet.task import Clock
from twisted.trial import unittest

from deaddrop.crypto.admission import Admission, KeyBusy
from deaddrop.crypto.upload_slots import UploadSlots
from deaddrop.daily_report import SourceActivity
from deaddrop.source_uploads import UploadHold


class UploadHoldTests(unittest.TestCase):
    def setUp(self):
        self.clock = Clock()
        self.slots = UploadSlots(Admission(pool=None, slots=4, clock=self.clock.seconds), per_key=2, per_circuit=4)

    def hold(self, source_id):
        return UploadHold(self.slots, None, SourceActivity(self.clock.seconds), source_id, None, evict=lambda: None)

    def test_a_body_takes_one_slot_however_many_files_it_carries(self):
        # Issue 27: each file of one body took another of the source's two slots, and the
        # third file was refused as "another submission ... still being received".
        body = self.hold(7)
        for _ in range(10):
            body.admit(1000)
        self.assertEqual((self.slots.holding(7), self.slots.admission.running), (1, 1))
        second = self.hold(7)
        second.admit(1000)
        self.assertRaises(KeyBusy, self.hold(7).admit, 1000)  # a third submission at once: truly busy
        body.release()
        second.release()
        self.assertEqual((self.slots.holding(7), self.slots.admission.running), (0, 0))
