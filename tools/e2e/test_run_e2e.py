"""run_e2e's tables from results (standard library only: no PyTorch, no GPU)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import run_e2e  # noqa: E402


def run(allocator, steps, probes, kernel_ms=None):
    r = {"workload": "w", "allocator": allocator, "ok": True, "step_ms": steps,
         "host_probe_ns": probes}
    if kernel_ms is not None:
        r["kernel_ms"] = kernel_ms
    return r


class PhaseTableTest(unittest.TestCase):
    def test_without_profiled_steps_there_is_no_device_time_column(self):
        runs = [run("a", [10.0, 10.0], [50, 50, 50]), run("b", [12.0, 12.0], [50, 50, 50])]
        lines = run_e2e.make_phase_table(runs, ["w"], ["a", "b"], 1.25).splitlines()
        self.assertNotIn("device ms", lines[0])
        self.assertEqual(lines[2], "| w | a | 10.0 | 2 of 2 | 1.00 |")
        self.assertEqual(lines[3], "| w | b | 12.0 | 2 of 2 | 1.20 |")

    def test_profiled_steps_give_the_median_device_time_of_the_rounds(self):
        runs = [run("a", [10.0], [50, 50], kernel_ms=5.0), run("a", [10.0], [50, 50], kernel_ms=7.0),
                run("a", [10.0], [50, 50], kernel_ms=6.5), run("b", [12.0], [50, 50])]
        lines = run_e2e.make_phase_table(runs, ["w"], ["a", "b"], 1.25).splitlines()
        self.assertTrue(lines[0].endswith("| device ms of a step (kernels) |"), lines[0])
        self.assertEqual(lines[1].count("|"), 7)
        self.assertEqual(lines[2], "| w | a | 10.0 | 3 of 3 | 1.00 | 6.5 |")
        self.assertEqual(lines[3], "| w | b | 12.0 | 1 of 1 | 1.20 |  |")  # b was not profiled

    def test_kernel_ms_ignores_runs_without_a_profile(self):
        self.assertIsNone(run_e2e.kernel_ms([{"kernel_ms": None}, {}]))
        self.assertEqual(run_e2e.kernel_ms([{"kernel_ms": 2.0}, {}, {"kernel_ms": 4.0}]), 3.0)


if __name__ == "__main__":
    unittest.main()
