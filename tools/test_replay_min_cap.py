"""replay_min_cap: the bisection, and a run over this build's strata-replay ($STRATA_REPLAY; that
part skips without it)."""

import gzip
import io
import json
import os
import shutil
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import replay_min_cap  # noqa: E402


class SmallestCapTest(unittest.TestCase):
    def test_finds_the_first_cap_that_fits(self):
        tried = []

        def fits(cap):
            tried.append(cap)
            return cap >= 37

        self.assertEqual(replay_min_cap.smallest_cap(fits, 10, 100), 37)
        self.assertLess(len(tried), 10)

    def test_the_bounds_themselves(self):
        self.assertEqual(replay_min_cap.smallest_cap(lambda c: True, 10, 100), 10)
        self.assertEqual(replay_min_cap.smallest_cap(lambda c: c >= 100, 10, 100), 100)
        self.assertIsNone(replay_min_cap.smallest_cap(lambda c: False, 10, 100))
        with self.assertRaises(ValueError):
            replay_min_cap.smallest_cap(lambda c: True, 5, 4)

    def test_an_out_of_memory_result_did_not_run_to_the_end(self):
        self.assertTrue(replay_min_cap.ran_to_the_end({"ooms": 0}))
        self.assertFalse(replay_min_cap.ran_to_the_end({"ooms": 1}))
        self.assertFalse(replay_min_cap.ran_to_the_end({"ooms": 0, "oom_message": "out of"}))


@unittest.skipUnless(os.environ.get("STRATA_REPLAY"), "set STRATA_REPLAY to a strata-replay")
class RunTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def run_main(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = replay_min_cap.main(["--trace-dir", self.dir, *args])
        return rc, out.getvalue(), err.getvalue()

    def test_a_small_trace_gets_a_cap_that_fits_and_one_below_that_does_not(self):
        # Three blocks of 10 MiB live at the peak: no cap below 30 MiB can hold them.
        mib = 1 << 20
        lines = ["a 0 %d 0" % (10 * mib), "a 1 %d 0" % (10 * mib), "f 0 0",
                 "a 2 %d 0" % (6 * mib), "a 3 %d 0" % (10 * mib), "a 4 %d 0" % (4 * mib),
                 "f 1 0", "f 2 0", "f 3 0", "f 4 0"]
        with gzip.open(os.path.join(self.dir, "small.trace.gz"), "wt") as f:
            f.write("\n".join(lines) + "\n")
        path = os.path.join(self.dir, "out.json")
        rc, out, err = self.run_main("--json", path)
        self.assertEqual(rc, 0, err)
        self.assertIn("| small | 30.00 | ", out)
        with open(path) as f:
            cells = json.load(f)["traces"]["small"]
        self.assertEqual(len(cells), 2)
        for c in cells:
            self.assertGreaterEqual(c["cap_mib"], 30)
            self.assertLessEqual(c["cap_mib"], 39)

    def test_a_bad_lag_is_refused(self):
        with self.assertRaises(SystemExit) as e:
            self.run_main("--lag", "0")
        self.assertEqual(e.exception.code, 2)


if __name__ == "__main__":
    unittest.main()
