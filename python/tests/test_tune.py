"""strata-tune: the sweep, the table and the recommendation. The replays need a strata-replay
binary named by $STRATA_REPLAY (those tests skip without one); no PyTorch, GPU or C library.

Run: STRATA_REPLAY=build/bin/strata-replay PYTHONPATH=python python3 -m unittest discover -s
python/tests -p test_tune.py
"""

import contextlib
import io
import json
import os
import pickle
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import strata
from strata import tune as tune_module
from strata.tune import Setting, TuneError

HERE = os.path.dirname(os.path.abspath(__file__))
RESNET = os.path.join(HERE, "..", "..", "tools", "traces", "resnet50_train.trace.gz")
REPLAY = os.environ.get("STRATA_REPLAY")
HAVE_REPLAY = bool(REPLAY) and os.access(REPLAY, os.X_OK)
NO_REPLAY = "no strata-replay binary: set STRATA_REPLAY to its path"


def fake_row(name, peak, steady, calls=10, error=None):
    return {"setting": name, "conf": name, "flags": [], "recommended": False, "error": error,
            "peak_reserved_bytes": peak, "steady_state_device_calls": steady,
            "device_calls": calls}


def lowest_peak_without_steady_calls(rows):
    ok = [r for r in rows if r["error"] is None and r["steady_state_device_calls"] == 0]
    return min(r["peak_reserved_bytes"] for r in ok)


class RecommendTest(unittest.TestCase):
    """The choice and the settings, without replays."""

    def test_lowest_peak_among_rows_without_steady_state_calls(self):
        rows = [fake_row("a", 300, 0), fake_row("b", 100, 5), fake_row("c", 200, 0),
                fake_row("d", 50, 0, error="exit status 1: boom"), fake_row("e", 200, 0, calls=3)]
        self.assertEqual(tune_module.recommend(rows)["setting"], "e")  # ties: fewer calls

    def test_fewest_steady_state_calls_when_none_has_zero(self):
        rows = [fake_row("a", 100, 7), fake_row("b", 300, 2), fake_row("c", 200, 2)]
        self.assertEqual(tune_module.recommend(rows)["setting"], "c")
        self.assertIsNone(tune_module.recommend([fake_row("x", 1, 0, error="failed")]))

    def test_settings_map_to_flags(self):
        self.assertEqual(Setting("").flags(), [])
        self.assertEqual(Setting("").name, "default")
        self.assertEqual(Setting("expandable_segments:True").flags(),
                         ["--use_virtual_memory_auto_growth=true"])
        self.assertEqual(Setting("max_split_size_mb:256,roundup_power2_divisions:4").flags(),
                         ["--max_split_size_mb=256", "--roundup_power2_divisions=4"])
        lines = tune_module.recommendation_lines({"conf": "max_split_size_mb:256",
                                                  "flags": ["--max_split_size_mb=256"]})
        self.assertEqual(lines[0], "STRATA_ALLOC_CONF=max_split_size_mb:256")

    def test_no_replay_binary_is_a_clear_error(self):
        with mock.patch.dict(os.environ, {"PATH": "", "STRATA_REPLAY": ""}):
            with self.assertRaises(TuneError) as ctx:
                tune_module.find_replay()
            self.assertIn("no strata-replay found", str(ctx.exception))
            with self.assertRaises(TuneError) as ctx:
                tune_module.find_replay("/nonexistent/strata-replay")
            self.assertIn("not an executable file", str(ctx.exception))

    def test_bad_arguments_are_clear_errors_that_never_block(self):
        # Any executable passes find_replay: each case fails before a replay would run.
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "t.trace")
            with open(trace, "w") as f:
                f.write("a 1 4096 0\nf 1 0\n")
            for kwargs in ({"settings": ["max_split_size_mb:64"]}, {"jobs": 1.5}, {"jobs": -1},
                           {"jobs": True}):
                with self.assertRaises(TuneError, msg=str(kwargs)):
                    strata.tune(trace, replay=sys.executable, **kwargs)
            fifo = os.path.join(tmp, "fifo")
            os.mkfifo(fifo)
            with self.assertRaises(TuneError) as ctx:
                strata.tune(fifo, replay=sys.executable)
            self.assertIn("not a regular file", str(ctx.exception))

    def test_package_exposes_tune(self):
        self.assertIs(strata.tune, tune_module)
        self.assertTrue(callable(strata.tune))


@unittest.skipUnless(HAVE_REPLAY, NO_REPLAY)
class TuneReplayTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rows = strata.tune(RESNET, replay=REPLAY, jobs=os.cpu_count())

    def test_every_setting_replays(self):
        self.assertEqual([r["setting"] for r in self.rows],
                         [s.name for s in tune_module.SETTINGS])
        for r in self.rows:
            self.assertIsNone(r["error"], r["setting"])
            self.assertEqual(r["replay"]["events"], 7101)
            self.assertEqual(r["peak_requested_bytes"], 3192592912)
            self.assertEqual(r["torch_peak_reserved_bytes"], 3797942272)  # the header's figure
            self.assertGreaterEqual(r["peak_reserved_bytes"], r["peak_requested_bytes"])
            self.assertEqual(r["lag_replay"]["device_lag"], 64)
            self.assertEqual(r["lag_replay"]["repeat"], 3)

    def test_recommendation_is_the_leanest_without_steady_state_calls(self):
        recommended = [r for r in self.rows if r["recommended"]]
        self.assertEqual(len(recommended), 1)
        best = recommended[0]
        self.assertEqual(best["steady_state_device_calls"], 0)
        self.assertEqual(best["peak_reserved_bytes"], lowest_peak_without_steady_calls(self.rows))

    def test_recommended_conf_and_flags_replay_alike(self):
        best = next(r for r in self.rows if r["recommended"])
        env = {k: v for k, v in os.environ.items()
               if k != "STRATA_ALLOC_CONF" and not k.startswith("FLAGS_")}
        by_flags = subprocess.run([REPLAY, f"--trace={RESNET}", "--json", *best["flags"]],
                                  capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(by_flags.returncode, 0, by_flags.stderr)
        self.assertEqual(json.loads(by_flags.stdout)["peak_reserved_bytes"],
                         best["peak_reserved_no_lag_bytes"])

    def test_command_line_json_and_table(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = tune_module.main([RESNET, "--json", "--quick", "--jobs", "2", "--replay",
                                   REPLAY])
        self.assertEqual(rc, 0)
        data = json.loads(out.getvalue())
        rows = data["settings"]
        self.assertEqual(len(rows), len(tune_module.QUICK_SETTINGS))
        rec = data["recommendation"]
        self.assertEqual(rec["peak_reserved_bytes"], lowest_peak_without_steady_calls(rows))
        self.assertEqual(rec["strata_alloc_conf"], "STRATA_ALLOC_CONF=" + rec["conf"])
        self.assertEqual([r["setting"] for r in rows if r["recommended"]], [rec["setting"]])

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(tune_module.main([RESNET, "--quick", "--replay", REPLAY]), 0)
        text = out.getvalue()
        self.assertIn("PyTorch (recorded)", text)
        self.assertIn("3.54 GiB", text)  # PyTorch's peak reserved, from the header
        self.assertIn("STRATA_ALLOC_CONF=", text)
        self.assertIn("* " + rec["setting"], text)

    def test_a_snapshot_is_converted_first(self):
        from test_convert import round_trip_snapshot  # the same directory
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "snap.pickle")
            with open(path, "wb") as f:
                pickle.dump(round_trip_snapshot(), f, protocol=4)
            rows = strata.tune(path, replay=REPLAY, quick=True)
        self.assertEqual(rows[0]["peak_requested_bytes"], 5500)
        self.assertEqual(rows[0]["torch_peak_reserved_bytes"], 26 << 20)
        self.assertEqual(sum(r["recommended"] for r in rows), 1)


if __name__ == "__main__":
    unittest.main()
