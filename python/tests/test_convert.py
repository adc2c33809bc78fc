"""strata.convert: PyTorch memory snapshots to traces. No PyTorch, GPU or C library needed; the
replay check runs when $STRATA_REPLAY names a strata-replay binary.

Run: PYTHONPATH=python python3 -m unittest discover -s python/tests -p test_convert.py
"""

import contextlib
import copy
import gzip
import io
import json
import os
import pickle
import random
import subprocess
import tempfile
import unittest

from strata import convert
from strata.convert import SnapshotError

MiB = 1 << 20
SIDE = 0x7F3A_0000_1200  # a side stream as PyTorch reports it (a cudaStream_t)


def ev(action, addr, size=0, stream=0):
    return {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": 1,
            "frames": [{"filename": "model.py", "line": 3, "name": "forward"}]}


def freed(addr, size, stream=0):
    return [ev("free_requested", addr, size, stream), ev("free_completed", addr, size, stream)]


def round_trip_snapshot():
    """Device 0: two streams, a pre-recording free, address reuse, a free on the side stream
    that completes later (record_stream), a free never completed, segment events, an oom and an
    unknown action. Device 1: a few events."""
    A, B, C, OLD = 0x1000, 0x2000, 0x3000, 0x5000
    d0 = [
        ev("alloc", A, 1000),                      # a 0 1000 0
        ev("alloc", B, 2000, SIDE),                # a 1 2000 1
        *freed(OLD, 64),                           # allocated before recording: skipped
        *freed(A, 1000),                           # f 0 0
        ev("alloc", A, 500, SIDE),                 # a 2 500 1   (address reuse)
        ev("free_requested", B, 2000, SIDE),       # waits for other work ...
        ev("alloc", C, 3000),                      # a 3 3000 0  (B still held: peak 5500)
        ev("free_completed", B, 2000, SIDE),       # ... f 1 1 here
        ev("oom", 0, 1 << 40),
        ev("segment_alloc", 0x10000, 2 * MiB),
        ev("segment_alloc", 0x20000, 4 * MiB),
        ev("segment_free", 0x10000, 2 * MiB),
        {"action": "some_future_action", "payload": [1, 2]},
        ev("free_requested", C, 3000),             # never completed: f 3 0 here
        ev("snapshot", 0, 0),
    ]
    d1 = [ev("alloc", 0x9000, 77), *freed(0x9000, 77)]
    return {
        "segments": [
            {"device": 0, "address": 0x20000, "total_size": 4 * MiB, "stream": 0,
             "segment_type": "large", "blocks": []},
            {"device": 0, "address": 0x90000, "total_size": 20 * MiB, "stream": 0,
             "segment_type": "large", "blocks": []},
            {"device": 1, "address": 0x90000, "total_size": 2 * MiB, "stream": 0,
             "segment_type": "small", "blocks": []},
        ],
        "device_traces": [d0, d1],
        "allocator_settings": {"expandable_segments": False},
    }


EXPECTED_LINES = ["a 0 1000 0", "a 1 2000 1", "f 0 0", "a 2 500 1", "a 3 3000 0", "f 1 1",
                  "f 3 0"]


def read_trace(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        text = f.read().splitlines()
    assert text[0].startswith("# {"), text[0]
    return json.loads(text[0][2:]), text[1:]


class ConvertTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def write(self, obj, protocol=4, name="snap.pickle"):
        p = self.path(name)
        with open(p, "wb") as f:
            pickle.dump(obj, f, protocol=protocol)
        return p

    def write_bytes(self, data, name="snap.pickle"):
        p = self.path(name)
        with open(p, "wb") as f:
            f.write(data)
        return p

    def assertRefused(self, data_or_obj, *fragments):
        """convert() raises SnapshotError whose message holds every fragment."""
        p = (self.write_bytes(data_or_obj) if isinstance(data_or_obj, bytes)
             else self.write(data_or_obj))
        with self.assertRaises(SnapshotError) as ctx:
            convert.convert(p, self.path("out.trace.gz"))
        for fragment in fragments:
            self.assertIn(fragment, str(ctx.exception))
        return ctx.exception

    # ---- the round trip ----------------------------------------------------------------------

    def test_round_trip_with_protocols_2_and_4(self):
        for protocol in (2, 4):
            with self.subTest(protocol=protocol):
                snap = self.write(round_trip_snapshot(), protocol)
                out = self.path(f"model_p{protocol}.trace.gz")
                s = convert.convert(snap, out)
                header, lines = read_trace(out)
                self.assertEqual(lines, EXPECTED_LINES)
                self.assertEqual(s["device"], 0)
                self.assertEqual(s["device_choice"], "most events")
                self.assertEqual((s["events"], s["allocs"], s["frees"]), (7, 4, 3))
                self.assertEqual(s["pre_recording_frees"], 1)
                self.assertEqual(s["frees_from_requested"], 1)
                self.assertEqual(s["unfreed"], 1)
                self.assertEqual(s["skipped"], {"oom": 1, "snapshot": 1, "some_future_action": 1})
                self.assertEqual(s["stream_map"], {"0": 0, str(SIDE): 1})
                self.assertFalse(s["truncated"])
                self.assertEqual(header["workload"], f"model_p{protocol}")
                self.assertEqual(header["events"], 7)
                self.assertEqual(header["allocs"], 4)
                self.assertEqual(header["streams"], 2)
                # B is held until its free completes: 2000 + 500 + 3000.
                self.assertEqual(header["torch_peak_requested"], 5500)
                self.assertEqual(header["trace_peak_live"], 5500)
                # 24 MiB reserved at the snapshot, 4 MiB of it from the segment events, whose
                # running peak was 6 MiB: 20 + 6.
                self.assertEqual(header["torch_reserved_at_snapshot"], 24 * MiB)
                self.assertEqual(header["torch_peak_reserved"], 26 * MiB)
                self.assertEqual(header["torch_peak_reserved_source"], "segment events")
                self.assertIs(header["truncated"], False)

    def test_replay_reads_the_converted_trace(self):
        replay = os.environ.get("STRATA_REPLAY")
        if not replay or not os.access(replay, os.X_OK):
            self.skipTest("no strata-replay binary: set STRATA_REPLAY to its path")
        out = self.path("model.trace")  # plain text this time
        convert.convert(self.write(round_trip_snapshot()), out)
        r = subprocess.run([replay, f"--trace={out}", "--json"], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        result = json.loads(r.stdout)
        self.assertEqual(result["peak_requested_bytes"], 5500)
        self.assertEqual(result["events"], 7)
        self.assertEqual(result["torch_peak_reserved_bytes"], 26 * MiB)

    def test_other_device_and_all_devices(self):
        snap = self.write(round_trip_snapshot())
        s = convert.convert(snap, self.path("d1.trace.gz"), device=1)
        self.assertEqual((s["device"], s["device_choice"]), (1, "given"))
        header, lines = read_trace(self.path("d1.trace.gz"))
        self.assertEqual(lines, ["a 0 77 0", "f 0 0"])
        self.assertEqual(header["torch_reserved_at_snapshot"], 2 * MiB)
        self.assertEqual(header["torch_peak_reserved"], 2 * MiB)
        self.assertEqual(header["torch_peak_reserved_source"], "segments at snapshot time")
        summaries = convert.convert_all(snap, self.path("all.trace.gz"))
        self.assertEqual([x["out"] for x in summaries],
                         [self.path("all.dev0.trace.gz"), self.path("all.dev1.trace.gz")])
        self.assertEqual(read_trace(self.path("all.dev0.trace.gz"))[1], EXPECTED_LINES)
        with self.assertRaises(SnapshotError) as ctx:
            convert.convert(snap, self.path("x.trace.gz"), device=5)
        self.assertIn("unknown device 5", str(ctx.exception))
        self.assertIn("0: 17, 1: 3", str(ctx.exception))
        snap = round_trip_snapshot()
        snap["device_traces"].append([])
        with self.assertRaises(SnapshotError) as ctx:
            convert.convert(self.write(snap), self.path("x.trace.gz"), device=2)
        self.assertIn("device 2 has no events", str(ctx.exception))

    def test_expandable_segments_map_and_unmap(self):
        events = [ev("segment_map", 0x100000, 2 * MiB), ev("alloc", 0x100000, MiB),
                  ev("segment_map", 0x300000, 2 * MiB), ev("alloc", 0x300000, 3 * MiB),
                  *freed(0x300000, 3 * MiB), ev("segment_unmap", 0x300000, 2 * MiB)]
        snap = {"segments": [{"device": 0, "total_size": 2 * MiB, "is_expandable": True}],
                "device_traces": [events]}
        s = convert.convert(self.write(snap), self.path("exp.trace.gz"))
        self.assertEqual(s["segment_events"], 3)
        self.assertEqual((s["torch_reserved_at_snapshot"], s["torch_peak_reserved"]),
                         (2 * MiB, 4 * MiB))
        self.assertEqual(s["torch_peak_requested"], 4 * MiB)
        self.assertFalse(s["truncated"])

    def test_truncation_is_reported(self):
        # The first event frees a block the trace never saw: the ring dropped the oldest.
        snap = round_trip_snapshot()
        snap["device_traces"][0].insert(0, ev("free_completed", 0x7777, 10))
        s = convert.convert(self.write(snap), self.path("t1.trace.gz"))
        self.assertTrue(s["truncated"])
        self.assertIn("never allocated", s["truncated_reasons"][0])
        self.assertIs(read_trace(self.path("t1.trace.gz"))[0]["truncated"], True)
        # A full ring: a power-of-two count of events.
        events = []
        for i in range(256):
            events += [ev("alloc", 0x1000 * i, 8), *freed(0x1000 * i, 8),
                       ev("segment_alloc", 0, 0)]
        self.assertEqual(len(events), 1024)
        s = convert.convert(self.write({"segments": [], "device_traces": [events]}),
                            self.path("t2.trace.gz"))
        self.assertTrue(s["truncated"])
        self.assertIn("power of two", s["truncated_reasons"][0])
        # Marked by the snapshot.
        snap = round_trip_snapshot()
        snap["truncated"] = True
        s = convert.convert(self.write(snap), self.path("t3.trace.gz"))
        self.assertEqual(s["truncated_reasons"], ["the snapshot is marked truncated"])

    def test_command_line(self):
        from strata.convert import main
        snap = self.write(round_trip_snapshot())
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            self.assertEqual(main([snap, self.path("cli.trace.gz"), "--device", "0"]), 0)
            self.assertEqual(main([self.path("missing.pickle"), self.path("cli.trace.gz")]), 2)
        self.assertEqual(read_trace(self.path("cli.trace.gz"))[1], EXPECTED_LINES)
        self.assertIn("device 0 (given", out.getvalue())
        self.assertIn("peak requested 5.4 KiB", out.getvalue())
        self.assertIn("1 frees of blocks allocated before recording", out.getvalue())
        self.assertIn("missing.pickle: cannot read", err.getvalue())

    # ---- malformed and hostile input ---------------------------------------------------------

    def test_truncated_pickle(self):
        data = pickle.dumps(round_trip_snapshot(), protocol=4)
        for cut in (1, 5, len(data) // 2, len(data) - 1):
            with self.subTest(cut=cut):
                self.assertRefused(data[:cut], "truncated")
        self.assertRefused(b"", "empty")

    def test_not_a_pickle(self):
        self.assertRefused(b"a 0 10 0\n", "not a pickle")
        self.assertRefused(gzip.compress(b"a 0 10 0\n"), "gzip")

    def test_globals_are_refused_and_never_called(self):
        marker = self.path("pwned")

        class Evil:
            def __reduce__(self):
                return (os.system, (f"touch {marker}",))

        for protocol in (2, 4):
            data = pickle.dumps({"segments": [], "device_traces": [[Evil()]]}, protocol=protocol)
            err = self.assertRefused(data, "references the global", "system")
            self.assertIn("refused", str(err))
        self.assertRefused(pickle.dumps(ConvertTest, protocol=2), "test_convert.ConvertTest")
        self.assertRefused(pickle.dumps(1j, protocol=4), "builtins.complex")
        self.assertFalse(os.path.exists(marker))

    def test_wrong_structure_and_missing_keys(self):
        good = round_trip_snapshot()
        self.assertRefused([1, 2], "holds a list")
        self.assertRefused({"segments": []}, "no 'device_traces'")
        self.assertRefused({"device_traces": [[]]}, "no 'segments'")
        self.assertRefused({"segments": {}, "device_traces": [[]]}, "'segments' is a dict")
        self.assertRefused({"segments": [], "device_traces": {0: []}}, "'device_traces' is a dict")
        self.assertRefused({"segments": [], "device_traces": [7]}, "device_traces[0] is a int")
        self.assertRefused({"segments": [], "device_traces": []}, "no device traces")
        self.assertRefused({"segments": [], "device_traces": [[]]}, "every device trace is empty")

        def mutated(edit):
            snap = copy.deepcopy(good)
            edit(snap)
            return snap

        d0 = lambda s: s["device_traces"][0]  # noqa: E731
        self.assertRefused(mutated(lambda s: d0(s).__setitem__(1, "alloc")), "event 1 is a str")
        self.assertRefused(mutated(lambda s: d0(s)[1].pop("action")), "event 1 has no 'action'")
        self.assertRefused(mutated(lambda s: d0(s)[1].pop("addr")), "event 1", "no 'addr'")
        self.assertRefused(mutated(lambda s: d0(s)[1].pop("stream")), "no 'stream'")
        self.assertRefused(mutated(lambda s: d0(s)[1].__setitem__("size", "2000")),
                           "'size' is str", "expected an integer")
        self.assertRefused(mutated(lambda s: d0(s)[1].__setitem__("size", 2000.0)), "float")
        self.assertRefused(mutated(lambda s: d0(s)[1].__setitem__("addr", True)), "bool")
        self.assertRefused(mutated(lambda s: s["segments"][0].pop("total_size")),
                           "segments[0] has no 'total_size'")
        self.assertRefused(mutated(lambda s: s["segments"].append("seg")), "segments[3] is a str")

    def test_huge_and_negative_numbers(self):
        snap = round_trip_snapshot()
        snap["device_traces"][0][0]["size"] = 1 << 60
        self.assertRefused(snap, "device 0 event 0", "more than 256 TiB")
        snap = round_trip_snapshot()
        snap["device_traces"][0][0]["size"] = -5
        self.assertRefused(snap, "negative (-5)")
        snap = round_trip_snapshot()
        snap["device_traces"][0][11]["size"] = 1 << 70  # a segment event
        self.assertRefused(snap, "event 11", "'size' is 1180591620717411303424")
        snap = round_trip_snapshot()
        snap["device_traces"][0][0]["addr"] = 1 << 64
        self.assertRefused(snap, "'addr' is 18446744073709551616")

    def test_hostile_memo_index_is_a_memory_error_not_an_exhausted_machine(self):
        # LONG_BINPUT 3,000,000,000 makes the C unpickler grow its memo to 48 GB.
        self.assertRefused(b"\x80\x02N" + b"r" + (3_000_000_000).to_bytes(4, "little") + b".",
                           "more memory")

    def test_fuzzed_pickles_raise_only_snapshot_error(self):
        rng = random.Random(33)
        seeds = [pickle.dumps(round_trip_snapshot(), protocol=p) for p in (2, 4)]
        out = self.path("fuzz.trace.gz")
        outcomes = {"ok": 0, "refused": 0}
        for i in range(400):
            data = bytearray(seeds[i % 2])
            for _ in range(rng.randint(1, 4)):
                kind = rng.randrange(5)
                at = rng.randrange(len(data))
                if kind == 0:  # flip a byte
                    data[at] = rng.randrange(256)
                elif kind == 1:  # cut the tail
                    del data[at:]
                elif kind == 2:  # delete a slice
                    del data[at:at + rng.randint(1, 16)]
                elif kind == 3:  # insert junk
                    data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
                else:  # duplicate a slice
                    data[at:at] = data[at:at + rng.randint(1, 32)]
                if not data:
                    data = bytearray(b"\x80")
            p = self.write_bytes(bytes(data), "fuzz.pickle")
            try:
                convert.convert(p, out)
                outcomes["ok"] += 1
            except SnapshotError:
                outcomes["refused"] += 1
            except Exception as e:  # noqa: BLE001: the point of the test
                self.fail(f"mutation {i} raised {type(e).__name__}: {e}")
        self.assertGreater(outcomes["refused"], 100)


if __name__ == "__main__":
    unittest.main()
