"""strata.torch on a real GPU with PyTorch (skipped without PyTorch or a CUDA device).

Each case runs in a fresh interpreter: the allocator must be installed before the process's first
CUDA allocation, and the emulated-device tests of this suite share the library.
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)


def run(script, env_extra=None):
    env = dict(os.environ)
    env.update(env_extra or {})
    env["PYTHONPATH"] = PACKAGE_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("STRATA_C_DEVICE", None)  # the real device
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=600)


def cuda_torch():
    if importlib.util.find_spec("torch") is None:
        return False
    r = run("import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)")
    return r.returncode == 0


@unittest.skipUnless(cuda_torch(), "needs PyTorch with a CUDA device")
class TorchGpuTest(unittest.TestCase):
    # The environment of every case's interpreter: NativeTorchGpuTest runs them all again with
    # strata's own C++ allocator for PyTorch instead of the pluggable wrapper.
    env_extra: dict = {}

    def check(self, script):
        r = run(script, self.env_extra)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout

    def test_training_statistics_and_empty_cache(self):
        out = self.check("""
            import torch, strata.torch
            strata.torch.enable("max_split_size_mb:0")
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                                        torch.nn.Linear(1024, 10)).cuda()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            for _ in range(20):
                x = torch.randn(256, 512, device="cuda")
                loss = model(x).square().mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            assert torch.isfinite(loss).item()
            stats = strata.torch.memory_stats(0)
            assert stats["allocated_bytes.all.current"] > 0, stats
            assert stats["num_host_waits"] >= 0
            del model, opt, x, loss
            big = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
            del big
            torch.cuda.synchronize()
            before = strata.torch.memory_stats(0)["reserved_bytes.all.current"]
            torch.cuda.empty_cache()  # reaches strata through the reset hook
            after = strata.torch.memory_stats(0)["reserved_bytes.all.current"]
            assert before - after >= 256 << 20, (before, after)
            print("ok", before, after)
        """)
        self.assertIn("ok", out)

    def test_set_per_process_memory_fraction_caps_strata(self):
        out = self.check("""
            import torch, strata.torch
            strata.torch.enable()
            total = torch.cuda.get_device_properties(0).total_memory
            torch.cuda.set_per_process_memory_fraction(0.1, 0)  # reaches strata's hook
            a = torch.empty(int(total * 0.06), dtype=torch.uint8, device="cuda")
            try:
                b = torch.empty(int(total * 0.06), dtype=torch.uint8, device="cuda")
                raise SystemExit("0.12 of the device fit under a fraction of 0.1")
            except RuntimeError as e:  # strata's message, through strata_malloc_or_throw
                assert "out of memory" in str(e) and "limit" in str(e), e
            torch.cuda.set_per_process_memory_fraction(1.0, 0)
            b = torch.empty(int(total * 0.06), dtype=torch.uint8, device="cuda")
            print("ok", strata.torch.memory_stats(0)["reserved_bytes.all.current"])
        """)
        self.assertIn("ok", out)

    def test_cuda_graph_replays_match_eager_and_deleting_the_graph_frees_its_pool(self):
        out = self.check("""
            import torch, strata.torch
            strata.torch.enable()
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                        torch.nn.Linear(1024, 256)).cuda()
            static_x = torch.randn(512, 256, device="cuda")
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up, as PyTorch's docs do
                for _ in range(3):
                    model(static_x)
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                static_y = model(static_x) * 2
            for i in range(5):
                x = torch.randn(512, 256, device="cuda")
                static_x.copy_(x)
                g.replay()
                eager = model(x) * 2
                assert torch.allclose(static_y, eager, atol=1e-5), i
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            before = strata.torch.memory_stats(0)["reserved_bytes.all.current"]
            del g, static_y
            # PyTorch keeps a cuBLAS workspace per (handle, stream); the capture stream's came from
            # the graph's pool and keeps that pool alive until it is cleared (with either pool).
            torch._C._cuda_clearCublasWorkspaces()
            torch.cuda.empty_cache()
            after = strata.torch.memory_stats(0)["reserved_bytes.all.current"]
            pools = {s["pool"] for s in strata.snapshot(0)["segments"]}
            assert after < before, (before, after)
            assert not any(p.startswith("graph") for p in pools), pools
            print("ok", before, after)
        """)
        self.assertIn("ok", out)

    def same_losses_as_pytorchs_allocator(self, script):
        """Runs `script` under strata and under PyTorch's own allocator; the LOSSES lines must
        be equal (a graph's replay does the same arithmetic on whatever addresses it got)."""
        results = {}
        for mode in ("strata", "torch"):
            prologue = "import sys\n" + ("import strata.torch\nstrata.torch.enable()\n"
                                         if mode == "strata" else "")
            r = run(prologue + textwrap.dedent(script), self.env_extra)
            self.assertEqual(r.returncode, 0, f"{mode}: " + r.stdout + r.stderr[-3000:])
            results[mode] = [l for l in r.stdout.splitlines() if l.startswith("LOSSES")]
            self.assertTrue(results[mode], r.stdout)
        self.assertEqual(results["strata"], results["torch"])

    def test_make_graphed_callables_trains_as_with_pytorchs_allocator(self):
        self.same_losses_as_pytorchs_allocator("""
            import torch
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(),
                                        torch.nn.Linear(512, 10)).cuda()
            xs = [torch.randn(64, 128, device="cuda") for _ in range(12)]
            ys = [torch.randint(0, 10, (64,), device="cuda") for _ in range(12)]
            model = torch.cuda.make_graphed_callables(model, (xs[0].clone(),))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            losses = []
            for x, y in zip(xs, ys):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=False)
                loss.backward()
                opt.step()
                losses.append(round(loss.item(), 5))
            print("LOSSES", losses)
        """)

    def test_compile_reduce_overhead_trains_as_with_pytorchs_allocator(self):
        script = """
            import torch
            torch.manual_seed(0)
            block = torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True).cuda()
            opt = torch.optim.SGD(block.parameters(), lr=0.01)
            step = torch.compile(lambda x: block(x).square().mean(), mode="reduce-overhead")
            g = torch.Generator(device="cuda").manual_seed(1)
            losses = []
            for _ in range(20):
                x = torch.randn(8, 64, 256, device="cuda", generator=g)
                loss = step(x)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(round(loss.item(), 5))
            print("LOSSES", losses)
        """
        probe = run("import strata.torch\nstrata.torch.enable()\n" + textwrap.dedent(script),
                    self.env_extra)
        if "does not yet support checkPoolLiveAllocations" in probe.stderr:
            # PyTorch's CUDA graph trees (mode="reduce-overhead") ask the allocator which blocks
            # of a pool are live; CUDAPluggableAllocator has no hook for it (PyTorch 2.11), and
            # inductor's path without graph trees crashes under PyTorch's own allocator too.
            self.skipTest("PyTorch's CUDA graph trees need checkPoolLiveAllocations, which "
                          "CUDAPluggableAllocator does not support")
        self.same_losses_as_pytorchs_allocator(script)

    def test_ddp_on_two_gpus_trains_as_with_pytorchs_allocator(self):
        r = run("import torch, sys; sys.exit(0 if torch.cuda.device_count() >= 2 else 1)")
        if r.returncode != 0:
            self.skipTest("needs two GPUs")
        results = {}
        for mode in ("strata", "torch"):
            env = dict(os.environ)
            env["PYTHONPATH"] = PACKAGE_ROOT + os.pathsep + env.get("PYTHONPATH", "")
            env.pop("STRATA_C_DEVICE", None)
            env.update(self.env_extra)
            r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                                os.path.join(HERE, "ddp_train.py"), mode],
                               env=env, capture_output=True, text=True, timeout=600)
            self.assertEqual(r.returncode, 0, f"{mode}: " + r.stdout + r.stderr[-3000:])
            ranks = [json.loads(l.split(" ", 1)[1]) for l in r.stdout.splitlines()
                     if l.startswith("RESULT ")]
            self.assertEqual(sorted(x["rank"] for x in ranks), [0, 1], r.stdout)
            results[mode] = {x["rank"]: x for x in ranks}
            for x in ranks:
                print(f"DDP {mode} rank {x['rank']}: peak reserved {x['peak_reserved']} B, "
                      f"last loss {x['losses'][-1]}")
        for rank in (0, 1):
            self.assertGreater(results["strata"][rank]["peak_reserved"], 0)
            self.assertEqual(results["strata"][rank]["losses"], results["torch"][rank]["losses"])

    def test_record_stream_keeps_a_block_from_reuse_until_the_side_work_ends(self):
        self.check("""
            import torch, strata.torch
            strata.torch.enable()
            n = 1 << 20
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):  # the side pool grows here, not below
                a = torch.randn(4096, 4096, device="cuda")
                (a @ a).sum()
            x = torch.ones(n, device="cuda")  # main's pool: a chunk with room for another x
            ptr = x.data_ptr()
            side.wait_stream(torch.cuda.current_stream())
            torch.cuda.synchronize()
            with torch.cuda.stream(side):
                for _ in range(200):  # long work queued on the side stream
                    a = (a @ a).div_(4096.0)
            x.record_stream(side)
            del x
            assert not side.query(), "the side stream finished too early for the test"
            stats = strata.torch.memory_stats(0)
            # x is held for the side stream: active (pending included) exceeds allocated.
            assert stats["active_bytes.all.current"] > stats["allocated_bytes.all.current"], stats
            z = torch.empty(n, device="cuda")  # same size and stream: best fit would be x's block
            assert z.data_ptr() != ptr, "x's block was handed out while the side stream ran"
            torch.cuda.synchronize()
        """)

    def test_history_snapshot_and_oom_observer_on_a_training_loop(self):
        out = self.check("""
            import gzip, json, os, tempfile, torch, strata, strata.torch
            strata.torch.enable("expandable_segments:True")
            model = torch.nn.Linear(1024, 1024).cuda()
            strata.record_history(0, context=True)
            def train_step():
                loss = model(torch.randn(512, 1024, device="cuda")).square().mean()
                loss.backward()
            for _ in range(3):
                train_step()
            torch.cuda.synchronize()
            path = os.path.join(tempfile.mkdtemp(), "run.trace.gz")
            strata.stop_history(path)
            lines = gzip.open(path, "rt").read().splitlines()
            header = json.loads(lines[0][2:])
            assert header["recorded_by"] == "strata" and header["allocs"] > 0, header
            ctx = [json.loads(l.split(" ", 2)[2]) for l in lines if l.startswith("ctx ")]
            assert any("train_step" in c for c in ctx), ctx[:3]
            assert any(l.startswith("seg map ") for l in lines), "no device maps recorded"
            snap = strata.snapshot(0)
            live = sum(b["size"] for s in snap["segments"] for b in s["blocks"]
                       if b["state"] == "allocated")
            assert live == snap["stats"]["allocated_bytes.all.current"], (live, snap["stats"])
            seen = []
            strata.on_oom(lambda *a: seen.append(a), with_snapshot=True)
            try:
                torch.empty(1 << 45, dtype=torch.uint8, device="cuda")
            except Exception as e:  # PyTorch raises its out-of-memory error
                print("raised", type(e).__name__)
            assert len(seen) == 1 and seen[0][1] == 1 << 45, [x[:2] for x in seen]
            print("ok", header["allocs"], len(ctx), len(snap["segments"]))
        """)
        self.assertIn("ok", out)

    def test_enable_after_the_first_allocation_is_refused(self):
        out = self.check("""
            import torch, strata, strata.torch
            t = torch.ones(1, device="cuda")
            try:
                strata.torch.enable()
            except strata.StrataError as e:
                print("refused:", e)
        """)
        self.assertIn("refused:", out)


class NativeTorchGpuTest(TorchGpuTest):
    """The same cases through strata's own C++ allocator for PyTorch (native/torch_allocator.cc),
    and what only it answers: PyTorch's own statistics functions and OOM type."""

    env_extra = {"STRATA_TORCH_NATIVE": "1"}

    def test_pytorchs_statistics_functions_read_strata(self):
        out = self.check("""
            import torch, strata.torch
            assert strata.torch.enable() == "native"
            MiB = 1 << 20
            a = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
            b = torch.empty(3 * MiB + 5, dtype=torch.uint8, device="cuda")
            ours = strata.torch.memory_stats(0)
            theirs = torch.cuda.memory_stats(0)
            for key in ("allocated_bytes.all.current", "reserved_bytes.all.current",
                        "allocation.all.current", "requested_bytes.all.current",
                        "segment.all.current", "num_ooms"):
                assert theirs[key] == ours[key], (key, theirs[key], ours[key])
            assert torch.cuda.memory_allocated(0) == ours["allocated_bytes.all.current"]
            assert torch.cuda.memory_reserved(0) == ours["reserved_bytes.all.current"]
            del a
            assert torch.cuda.max_memory_allocated(0) >= 67 * MiB
            torch.cuda.reset_peak_memory_stats(0)
            assert torch.cuda.max_memory_allocated(0) == torch.cuda.memory_allocated(0)
            torch.cuda.reset_accumulated_memory_stats(0)
            assert torch.cuda.memory_stats(0)["allocation.all.allocated"] == 0
            seen = []
            torch._C._cuda_attach_out_of_memory_observer(
                lambda device, alloc, total, free: seen.append((device, alloc, total)))
            total = torch.cuda.get_device_properties(0).total_memory
            try:
                torch.empty(2 * total, dtype=torch.uint8, device="cuda")
                raise SystemExit("twice the device was allocated")
            except torch.OutOfMemoryError as e:
                assert "out of memory" in str(e), e
            assert seen and seen[0][0] == 0 and seen[0][2] == total, seen
            assert torch.cuda.memory_stats(0)["num_ooms"] == 1
            print("ok", torch.cuda.memory_allocated(0))
        """)
        self.assertIn("ok", out)


if __name__ == "__main__":
    unittest.main()
