"""The Python package against the emulated device (no GPU): flags, statistics, errors.

Run: STRATA_C_LIB=build/lib/libstrata_c.so PYTHONPATH=python python3 -m unittest discover -s
python/tests (CTest does this in `make test`); pytest collects the same tests.
"""

import ctypes
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import unittest

import strata
import strata.cupy
import strata.torch
from strata._lib import ERROR_BUSY, ERROR_INVALID_ARGUMENT, lib

MiB = 1 << 20


class PackageTest(unittest.TestCase):
    def setUp(self):
        strata.use_emulated_device(1, 1 << 30)

    def tearDown(self):
        strata.use_emulated_device(1, 1 << 30)  # a fresh allocator for the next test

    def test_library_path_honours_the_environment(self):
        self.assertEqual(strata.library_path(), os.environ["STRATA_C_LIB"])

    def test_statistics_have_torch_keys_and_follow_allocations(self):
        p = lib().strata_malloc(3 * MiB, 0, None)
        self.assertTrue(p)
        stats = strata.memory_stats(0)
        self.assertEqual(stats["allocated_bytes.all.current"], 3 * MiB)
        self.assertEqual(stats["allocation.all.current"], 1)
        self.assertGreaterEqual(stats["reserved_bytes.all.current"], 3 * MiB)
        for key in ("requested_bytes.all.peak", "num_device_alloc", "num_host_waits"):
            self.assertIn(key, stats)
        self.assertEqual(strata.live_allocations(), 1)
        self.assertIn("Allocated memory", strata.memory_summary(0))
        lib().strata_free(p, 3 * MiB, 0, None)
        strata.reset_peak_memory_stats(0)
        self.assertEqual(strata.memory_stats(0)["allocated_bytes.all.peak"], 0)
        strata.empty_cache(0)
        self.assertEqual(strata.memory_stats(0)["reserved_bytes.all.current"], 0)
        self.assertEqual(strata.live_allocations(), 0)
        self.assertGreaterEqual(strata.memory_stats(0)["allocation.all.freed"], 1)
        strata.reset_accumulated_memory_stats(0)
        self.assertEqual(strata.memory_stats(0)["allocation.all.freed"], 0)
        with self.assertRaises(strata.StrataError):
            strata.reset_accumulated_memory_stats(-1)

    def test_bad_flags_raise_with_strata_s_message_and_change_nothing(self):
        with self.assertRaises(strata.StrataError) as ctx:
            strata.set_flags("max_split_size_mb:256,no_such_key:1")
        self.assertEqual(ctx.exception.code, ERROR_INVALID_ARGUMENT)
        self.assertIn("no_such_key", str(ctx.exception))
        self.assertEqual(strata.memory_stats(0)["max_split_size"], 0)
        strata.set_flags("max_split_size_mb:64")
        self.assertEqual(strata.memory_stats(0)["max_split_size"], 64 * MiB)
        strata.set_flags("max_split_size_mb:0")

    def test_flags_cannot_change_while_memory_is_live(self):
        p = lib().strata_malloc(MiB, 0, None)
        try:
            with self.assertRaises(strata.StrataError) as ctx:
                strata.set_flags("max_split_size_mb:64")
            self.assertEqual(ctx.exception.code, ERROR_BUSY)
        finally:
            lib().strata_free(p, MiB, 0, None)

    def test_memory_fraction_caps_the_device(self):
        strata.set_memory_fraction(0.25)  # of 1 GiB
        p = lib().strata_malloc(200 * MiB, 0, None)
        self.assertIsNotNone(p)
        try:
            self.assertIsNone(lib().strata_malloc(100 * MiB, 0, None))
            strata.set_memory_fraction(1.0)
            q = lib().strata_malloc(100 * MiB, 0, None)
            self.assertIsNotNone(q)
            lib().strata_free(q, 100 * MiB, 0, None)
        finally:
            lib().strata_free(p, 200 * MiB, 0, None)
        with self.assertRaises(strata.StrataError) as ctx:
            strata.set_memory_fraction(1.5)
        self.assertIn("[0, 1]", str(ctx.exception))

    def test_end_stream_before_a_stream_is_destroyed(self):
        stream = ctypes.c_void_p()
        self.assertEqual(lib().strata_emulated_stream_create(0, ctypes.byref(stream)), 0)
        ptr = lib().strata_malloc(MiB, 0, stream)
        self.assertTrue(ptr)
        strata.end_stream(stream.value, 0)
        self.assertEqual(lib().strata_emulated_stream_destroy(stream), 0)
        lib().strata_free(ptr, MiB, 0, stream)  # freed after its stream is gone
        self.assertEqual(strata.live_allocations(), 0)
        with self.assertRaises(strata.StrataError):
            strata.end_stream(0, 0)  # the default stream is never destroyed
        with self.assertRaises(strata.StrataError):
            strata.end_stream(stream.value, 0)  # already destroyed

    def test_bad_devices_raise(self):
        with self.assertRaises(strata.StrataError):
            strata.memory_stats(7)
        with self.assertRaises(strata.StrataError):
            strata.use_emulated_device(1000, MiB)

    def test_numbers_that_do_not_fit_the_c_types_are_refused_not_wrapped(self):
        strata.set_memory_fraction(1.0)
        for bad in (1 << 32, -(1 << 31) - 1, True):
            with self.assertRaises(strata.StrataError):
                strata.set_memory_fraction(0.01, device=bad)  # 2**32 would have been device 0
        p = lib().strata_malloc(64 * MiB, 0, None)  # device 0 stays uncapped
        self.assertIsNotNone(p)
        lib().strata_free(p, 64 * MiB, 0, None)
        with self.assertRaises(strata.StrataError):
            strata.use_emulated_device(1, (1 << 64) + (1 << 30))
        with self.assertRaises(strata.StrataError):
            strata.end_stream(1 << 64)
        with self.assertRaises(strata.StrataError):
            strata.record_history(0, max_entries=1 << 64)

    def test_text_with_a_nul_is_refused_not_cut_short(self):
        with self.assertRaises(strata.StrataError):
            strata.set_flags("max_split_size_mb:64\0no_such_key:1")
        strata.set_flags("max_split_size_mb:64")


class HistoryTest(unittest.TestCase):
    """Recording, snapshots and out-of-memory observers (docs/HISTORY.md)."""

    def setUp(self):
        strata.use_emulated_device(1, 64 * MiB)

    def tearDown(self):
        strata.use_emulated_device(1, 1 << 30)

    def test_recording_carries_python_stacks_and_replays(self):
        strata.record_history(0, context=True)
        p = lib().strata_malloc(4096, 0, None)  # this line's stack is the allocation's context
        lib().strata_free(p, 4096, 0, None)
        path = os.path.join(tempfile.mkdtemp(), "recording.trace")
        strata.stop_history(path)
        with open(path) as f:
            lines = f.read().splitlines()
        self.assertTrue(lines[0].startswith("# {"))
        self.assertTrue(any(line.startswith("a 0 4096 0 ") and " c=1" in line for line in lines))
        self.assertTrue(any(line.startswith("f 0 0 ") for line in lines))
        contexts = [json.loads(line.split(" ", 2)[2]) for line in lines if line.startswith("ctx ")]
        self.assertEqual(len(contexts), 1)
        self.assertIn("test_recording_carries_python_stacks_and_replays", contexts[0])
        with self.assertRaises(strata.StrataError):
            strata.stop_history(path)  # not recording any more

    def test_a_path_that_cannot_be_written_leaves_the_recording_running(self):
        strata.record_history(0, context=lambda: "ctx")
        p = lib().strata_malloc(4096, 0, None)
        lib().strata_free(p, 4096, 0, None)
        with self.assertRaises(strata.StrataError):
            strata.stop_history("/nonexistent-dir/x.trace")
        with self.assertRaises(strata.StrataError):
            strata.stop_history(os.path.join(tempfile.mkdtemp(), "a\0b.trace"))
        with self.assertRaises(strata.StrataError):
            strata.stop_history(None)
        path = pathlib.Path(tempfile.mkdtemp()) / "kept.trace"
        strata.stop_history(path)  # a path object; the recording was still there
        with open(path) as f:
            self.assertTrue(any(line.startswith("a 0 4096 0 ") for line in f))

    def test_bad_callbacks_are_refused_when_given(self):
        with self.assertRaises(TypeError):
            strata.on_oom(None)
        with self.assertRaises(TypeError):
            strata.record_history(0, context="abc")

    def test_an_observer_id_from_before_a_reconfiguration_removes_nothing_new(self):
        seen = []
        old = strata.on_oom(lambda *args: seen.append("old"))
        strata.use_emulated_device(1, 64 * MiB)
        new = strata.on_oom(lambda *args: seen.append("new"))
        self.assertNotEqual(old, new)
        with self.assertRaises(strata.StrataError):
            strata.remove_oom_observer(old)
        self.assertIsNone(lib().strata_malloc(100 * MiB, 0, None))
        self.assertEqual(seen, ["new"])
        strata.remove_oom_observer(new)

    def test_daemon_threads_calling_back_at_exit_end_cleanly(self):
        # Python ends daemon threads that call back into it at exit by unwinding them through
        # strata: neither a context nor an observer may turn that into an abort.
        script = textwrap.dedent("""
            import threading, time, strata
            from strata._lib import lib
            strata.use_emulated_device(1, 16 << 20)
            strata.record_history(0, context=True)
            strata.on_oom(lambda *args: None)
            def churn(size):
                while True:
                    p = lib().strata_malloc(size, 0, None)
                    if p:
                        lib().strata_free(p, size, 0, None)
            for size in (4096, 4096, 1 << 30, 1 << 30):
                threading.Thread(target=churn, args=(size,), daemon=True).start()
            time.sleep(0.2)
        """)
        for _ in range(3):
            done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
            self.assertEqual(done.returncode, 0, done.stderr.decode(errors="replace")[-2000:])

    def test_snapshot_lists_blocks(self):
        p = lib().strata_malloc(1000, 0, None)
        snap = strata.snapshot(0)
        blocks = [b for s in snap["segments"] for b in s["blocks"] if b["state"] == "allocated"]
        self.assertEqual([(b["address"], b["requested_size"]) for b in blocks], [(p, 1000)])
        self.assertEqual(snap["stats"]["allocated_bytes.all.current"], 1024)
        lib().strata_free(p, 1000, 0, None)

    def test_oom_observer_is_called_once_per_failure(self):
        seen = []
        observer = strata.on_oom(lambda *args: seen.append(args), with_snapshot=True)
        self.assertIsNone(lib().strata_malloc(100 * MiB, 0, None))
        self.assertEqual(len(seen), 1)
        device, requested, stats, snap = seen[0]
        self.assertEqual((device, requested), (0, 100 * MiB))
        self.assertEqual(stats["num_ooms"], 1)
        self.assertIn("segments", snap)
        strata.remove_oom_observer(observer)
        self.assertIsNone(lib().strata_malloc(100 * MiB, 0, None))
        self.assertEqual(len(seen), 1)
        with self.assertRaises(strata.StrataError):
            strata.remove_oom_observer(observer)


class FrameworkHookupTest(unittest.TestCase):
    def test_enable_without_the_framework_says_so(self):
        for module, name in ((strata.torch, "torch"), (strata.cupy, "cupy")):
            try:
                __import__(name)
            except ImportError:
                with self.assertRaises(strata.StrataError) as ctx:
                    module.enable()
                self.assertIn(name, str(ctx.exception).lower())


if __name__ == "__main__":
    unittest.main()
