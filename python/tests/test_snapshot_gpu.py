"""A real PyTorch memory snapshot converts to a trace that strata-replay replays (skipped without
PyTorch with a CUDA device; the replay part also needs strata-replay, named by $STRATA_REPLAY).

The snapshot comes from PyTorch's own allocator (`torch.cuda.memory._record_memory_history` and
`_dump_snapshot`) over a few training steps of a small model on two streams, so the converter
meets the format as PyTorch writes it, not as the tests of test_convert.py build it.
"""

import gzip
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)
sys.path.insert(0, PACKAGE_ROOT)

from strata import convert  # noqa: E402


def cuda_torch():
    if importlib.util.find_spec("torch") is None:
        return False
    r = subprocess.run([sys.executable, "-c",
                        "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"],
                       capture_output=True, timeout=300)
    return r.returncode == 0


RECORD = """
import sys, torch
torch.manual_seed(0)
torch.cuda.memory._record_memory_history(max_entries=100000)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.AdamW(model.parameters())
side = torch.cuda.Stream()
for step in range(4):
    x = torch.randn(64 * (step + 1), 1024, device="cuda")
    with torch.cuda.stream(side):
        y = torch.randn_like(x)          # made on the side stream, used on the main one
    torch.cuda.current_stream().wait_stream(side)
    y.record_stream(torch.cuda.current_stream())
    loss = (model(x) - y).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del x, y, loss
torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(sys.argv[1])
print(torch.cuda.memory_stats()["reserved_bytes.all.peak"])
"""


@unittest.skipUnless(cuda_torch(), "needs PyTorch with a CUDA device")
class SnapshotGpuTest(unittest.TestCase):
    def test_a_real_snapshot_converts_and_replays(self):
        with tempfile.TemporaryDirectory() as tmp:
            snap = os.path.join(tmp, "snap.pickle")
            r = subprocess.run([sys.executable, "-c", textwrap.dedent(RECORD), snap],
                               capture_output=True, text=True, timeout=600)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            torch_peak_reserved = int(r.stdout.split()[-1])
            out = os.path.join(tmp, "snap.trace.gz")
            summary = convert.convert(snap, out)
            with gzip.open(out, "rt") as f:
                header = json.loads(f.readline()[2:])
                events = [line.split() for line in f if line[0] in "af"]
            allocs = [e for e in events if e[0] == "a"]
            self.assertGreater(len(allocs), 20, summary)
            self.assertEqual({e[3] for e in allocs} >= {"0"}, True)
            self.assertGreater(len({e[-1] for e in events}), 1, "two streams were used")
            self.assertEqual(header["torch_peak_reserved"], torch_peak_reserved, header)
            replay = os.environ.get("STRATA_REPLAY")
            if not replay:
                self.skipTest("the replay needs $STRATA_REPLAY (strata-replay)")
            r = subprocess.run([replay, f"--trace={out}", "--json"], capture_output=True,
                               text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            result = json.loads(r.stdout)
            self.assertEqual(result["ooms"], 0, result)
            self.assertEqual(result["peak_requested_bytes"], header["torch_peak_requested"],
                             (result, header))


if __name__ == "__main__":
    unittest.main()
