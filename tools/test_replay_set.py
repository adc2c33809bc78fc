"""replay_set: cells, geometric means, the table, and a run over this build's strata-replay
($STRATA_REPLAY; that part skips without it)."""

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

import replay_set  # noqa: E402


class CellTest(unittest.TestCase):
    def test_one_pass_has_no_steady_state_calls(self):
        c = replay_set.cell({"fragmentation": 1.25, "device_mallocs": 9})
        self.assertEqual(c, {"fragmentation": 1.25, "calls": None, "oom": False})
        self.assertEqual(replay_set.format_cell(c), "1.2500")

    def test_repeated_passes_sum_the_last_passs_calls(self):
        c = replay_set.cell({"fragmentation": 1.0, "repeat": 3, "device_mallocs": 100,
                             "last_pass": {"device_mallocs": 1, "device_frees": 2,
                                           "num_device_map": 3, "num_device_unmap": 4,
                                           "num_stream_waits": 50}})
        self.assertEqual(c["calls"], 10)  # stream waits are no device memory calls
        self.assertEqual(replay_set.format_cell(c), "1.0000 / 10")

    def test_a_tail_counts_its_own_calls(self):
        c = replay_set.cell({"fragmentation": 1.5, "device_mallocs": 900,
                             "tail": {"device_mallocs": 1, "num_device_map": 5,
                                      "num_device_unmap": 4, "num_stream_waits": 70}})
        self.assertEqual(c["calls"], 10)
        self.assertEqual(replay_set.format_cell(c), "1.5000 / 10")

    def test_an_out_of_memory_replay_says_so(self):
        c = replay_set.cell({"fragmentation": 1.0, "oom_message": "out of memory"})
        self.assertIn("out of memory", replay_set.format_cell(c))

    def test_a_result_without_fragmentation_is_refused(self):
        with self.assertRaises(ValueError):
            replay_set.cell({"trace": "x"})


class TableTest(unittest.TestCase):
    def test_geomean(self):
        self.assertAlmostEqual(replay_set.geomean([1.0, 4.0]), 2.0)
        self.assertIsNone(replay_set.geomean([]))
        with self.assertRaises(ValueError):
            replay_set.geomean([1.0, 0.0])

    def test_the_last_row_covers_the_traces_whose_replays_all_ran(self):
        ok = {"fragmentation": 1.21, "calls": 2, "oom": False}
        one = {"fragmentation": 1.0, "calls": None, "oom": False}
        text = replay_set.table(["a", "b"], ["1 pass", "3 passes"],
                                [[one, ok], [one, None]])
        lines = text.splitlines()
        self.assertEqual(lines[0], "| trace | 1 pass | 3 passes |")
        self.assertEqual(lines[3], "| b | 1.0000 | error |")
        self.assertEqual(lines[4], "| geometric mean (1 traces) | 1.0000 | 1.2100 / 2 |")


@unittest.skipUnless(os.environ.get("STRATA_REPLAY"), "set STRATA_REPLAY to a strata-replay")
class RunTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        shutil.copy(os.path.join(HERE, "traces", "resnet50_train.trace.gz"), self.dir)

    def tearDown(self):
        shutil.rmtree(self.dir)

    def run_main(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = replay_set.main(["--trace-dir", self.dir, *args])
        return rc, out.getvalue(), err.getvalue()

    def test_the_bundled_trace_reaches_a_steady_state(self):
        path = os.path.join(self.dir, "out.json")
        rc, out, _ = self.run_main("--json", path)
        self.assertEqual(rc, 0)
        self.assertIn("| resnet50_train | ", out)
        with open(path) as f:
            cells = json.load(f)["traces"]["resnet50_train"]
        self.assertEqual(len(cells), 3)
        self.assertIsNone(cells[0]["calls"])
        self.assertEqual([cells[1]["calls"], cells[2]["calls"]], [0, 0])
        self.assertLess(cells[0]["fragmentation"], 1.1)

    def test_a_tail_replays_once_at_two_lags(self):
        path = os.path.join(self.dir, "out.json")
        rc, out, _ = self.run_main("--tail", "50", "--lag", "8", "--json", path)
        self.assertEqual(rc, 0)
        self.assertIn("| trace | 1 pass, last 50 % | 1 pass, last 50 %, lag 8 |", out)
        with open(path) as f:
            cells = json.load(f)["traces"]["resnet50_train"]
        self.assertEqual(len(cells), 2)
        # The trace's second half maps nothing: its first half grew what it needs.
        self.assertEqual([cells[0]["calls"], cells[1]["calls"]], [0, 0])

    def test_a_tail_outside_a_percentage_is_refused(self):
        with self.assertRaises(SystemExit) as e, redirect_stderr(io.StringIO()):
            replay_set.main(["--trace-dir", self.dir, "--tail", "100"])
        self.assertEqual(e.exception.code, 2)

    def test_a_replay_that_fails_marks_its_cells_and_the_exit_status(self):
        with gzip.open(os.path.join(self.dir, "broken.trace.gz"), "wt") as f:
            f.write("a 0 100 0\nf 7 0\n")  # frees an allocation that was never made
        rc, out, err = self.run_main()
        self.assertEqual(rc, 1)
        self.assertIn("| broken | error | error | error |", out)
        self.assertIn("broken, 1 pass:", err)
        self.assertIn("geometric mean (1 traces)", out)  # resnet50_train alone

    def test_flags_after_the_separator_reach_every_replay(self):
        rc, _, err = self.run_main("--", "--no_such_flag=1")
        self.assertEqual(rc, 1)
        self.assertIn("no_such_flag", err)


if __name__ == "__main__":
    unittest.main()
