"""host_phase: which steps count as taken at the host's full speed (standard library only)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import host_phase  # noqa: E402


class FastStepsTest(unittest.TestCase):
    def test_a_step_counts_when_the_probes_on_both_sides_are_fast(self):
        steps = [10.0, 20.0, 11.0, 12.0]
        probes = [70, 72, 140, 71, 74]  # slow between steps 1 and 2
        self.assertEqual(host_phase.fast_steps(steps, probes, 70, 1.25), [10.0, 12.0])

    def test_the_tolerance_is_inclusive(self):
        self.assertEqual(host_phase.fast_steps([5.0], [100, 125], 100, 1.25), [5.0])
        self.assertEqual(host_phase.fast_steps([5.0], [100, 126], 100, 1.25), [])

    def test_probes_must_bracket_every_step(self):
        with self.assertRaises(ValueError):
            host_phase.fast_steps([1.0, 2.0], [70, 70], 70)
        with self.assertRaises(ValueError):
            host_phase.fast_steps([1.0], [70, 70], 0)
        with self.assertRaises(ValueError):
            host_phase.fast_steps([1.0], [70, 70], 70, 0.9)


class FastPhaseMediansTest(unittest.TestCase):
    def test_the_reference_is_the_fastest_probe_of_every_run(self):
        runs = [
            # Ran entirely in a slow phase: none of its steps count.
            {"allocator": "a", "step_ms": [20.0, 21.0], "host_probe_ns": [140, 141, 139]},
            {"allocator": "b", "step_ms": [12.0, 30.0, 13.0], "host_probe_ns": [70, 71, 150, 72]},
        ]
        med = host_phase.fast_phase_medians(runs, 1.25)
        self.assertEqual(med["a"], (None, 0, 2))
        self.assertEqual(med["b"], (12.0, 1, 3))

    def test_rounds_pool_their_steps(self):
        runs = [
            {"allocator": "a", "step_ms": [10.0], "host_probe_ns": [70, 70]},
            {"allocator": "a", "step_ms": [14.0, 12.0], "host_probe_ns": [71, 72, 73]},
        ]
        self.assertEqual(host_phase.fast_phase_medians(runs), {"a": (12.0, 3, 3)})

    def test_runs_without_probes_are_left_out(self):
        self.assertEqual(host_phase.fast_phase_medians([{"allocator": "a", "step_ms": [1.0]}]), {})
        runs = [{"allocator": "a", "step_ms": [1.0]},
                {"allocator": "b", "step_ms": [2.0], "host_probe_ns": [70, 70]}]
        self.assertEqual(host_phase.fast_phase_medians(runs), {"b": (2.0, 1, 1)})


class ProbeTest(unittest.TestCase):
    def test_the_probe_measures_a_positive_time(self):
        self.assertGreater(host_phase.probe(), 0)


if __name__ == "__main__":
    unittest.main()
