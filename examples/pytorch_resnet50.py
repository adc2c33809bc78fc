#!/usr/bin/env python3
"""Train a ResNet-50 for a few steps with strata as PyTorch's CUDA allocator.

strata is plugged in through its C ABI (libstrata_c.so, strata/c_api.h) with
torch.cuda.memory.CUDAPluggableAllocator(path, "strata_malloc", "strata_free"), before any CUDA
allocation. The script then prints the losses (asserted finite), strata's memory summary and
peak reserved bytes, shows a cross-stream free made safe with strata_record_stream, and runs
itself again in a subprocess with PyTorch's default caching allocator (--torch-default) to
compare the peaks.

    python3 examples/pytorch_resnet50.py --lib build/lib/libstrata_c.so
    STRATA_C_LIB=build/lib/libstrata_c.so python3 examples/pytorch_resnet50.py --steps 10

Note: with a pluggable allocator, torch.cuda.max_memory_reserved() / memory_stats() are not
available (PyTorch raises or reports nothing); strata's own statistics are read instead
(strata_memory_stats_json: "reserved_bytes.all.peak"). See docs/INTEGRATION.md.
"""

import argparse
import ctypes
import json
import math
import os
import subprocess
import sys
import time

import torch
from torch import nn

RESULT_PREFIX = "RESULT_JSON "


# ---- the C ABI through ctypes ---------------------------------------------------------------


class Strata:
    """The few strata/c_api.h functions this script calls besides malloc/free."""

    def __init__(self, path):
        # Same path as CUDAPluggableAllocator's own ctypes.CDLL: the same library instance, so
        # these statistics are those of PyTorch's allocations.
        self.lib = ctypes.CDLL(path)
        lib = self.lib
        lib.strata_malloc.restype = ctypes.c_void_p
        lib.strata_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        lib.strata_free.restype = None
        lib.strata_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        lib.strata_record_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.strata_empty_cache.argtypes = [ctypes.c_int]
        lib.strata_memory_stats_json.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        lib.strata_memory_summary.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        lib.strata_set_flags.argtypes = [ctypes.c_char_p]
        lib.strata_last_error.restype = ctypes.c_char_p
        lib.strata_live_allocations.restype = ctypes.c_int64

    def error(self):
        return self.lib.strata_last_error().decode(errors="replace")

    def check(self, rc, what):
        if rc < 0:
            raise RuntimeError(f"{what} failed ({rc}): {self.error()}")
        return rc

    def _text(self, fn, device):
        n = self.check(fn(device, None, 0), fn.__name__)
        buf = ctypes.create_string_buffer(n + 1)
        self.check(fn(device, buf, n + 1), fn.__name__)
        return buf.value.decode()

    def stats(self, device):
        return json.loads(self._text(self.lib.strata_memory_stats_json, device))

    def summary(self, device):
        return self._text(self.lib.strata_memory_summary, device)

    def set_flags(self, conf):
        self.check(self.lib.strata_set_flags(conf.encode()), f"strata_set_flags({conf!r})")

    def record_stream(self, ptr, stream_handle):
        return self.check(self.lib.strata_record_stream(ptr, stream_handle), "strata_record_stream")

    def empty_cache(self, device):
        self.check(self.lib.strata_empty_cache(device), "strata_empty_cache")

    def probe(self, device):
        """One tiny allocation: fails early, with strata's reason, when CUDA is unusable from the
        library (e.g. a driver older than the CUDA runtime it was built with)."""
        p = self.lib.strata_malloc(1, device, None)
        if not p:
            raise RuntimeError(f"strata cannot allocate on cuda:{device}: {self.error()}")
        self.lib.strata_free(p, 1, device, None)


# ---- the model ------------------------------------------------------------------------------


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        width = planes
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != planes * 4:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * 4),
            )

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


def _resnet50_without_torchvision(num_classes=1000):
    """The ResNet-50 architecture (bottleneck blocks 3-4-6-3), for machines without torchvision."""
    layers = [
        nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, stride=2, padding=1),
    ]
    inplanes = 64
    for planes, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for i in range(blocks):
            layers.append(_Bottleneck(inplanes, planes, stride if i == 0 else 1))
            inplanes = planes * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, num_classes)]
    return nn.Sequential(*layers)


def build_model():
    try:
        import torchvision

        return torchvision.models.resnet50(weights=None), "torchvision.models.resnet50"
    except ImportError:
        return _resnet50_without_torchvision(), "ResNet-50 defined here (torchvision not installed)"


def train(args, device):
    """A few SGD steps on random data; returns (losses, model name, seconds per step)."""
    torch.manual_seed(args.seed)
    model, name = build_model()  # initialized on the CPU: identical in both runs
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed)
    losses = []
    start = None
    for step in range(args.steps):
        if step == 1:  # the first step includes cuDNN/cuBLAS set-up
            torch.cuda.synchronize(device)
            start = time.perf_counter()
        x = torch.randn(args.batch, 3, args.image_size, args.image_size, device=device, generator=gen)
        y = torch.randint(0, 1000, (args.batch,), device=device, generator=gen)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            out = model(x)
        loss = loss_fn(out.float(), y)
        loss.backward()
        optimizer.step()
        value = loss.item()
        if not math.isfinite(value):
            raise AssertionError(f"step {step}: loss is {value}")
        losses.append(value)
        print(f"  step {step}: loss {value:.4f}", flush=True)
    torch.cuda.synchronize(device)
    per_step = (time.perf_counter() - start) / (args.steps - 1) if args.steps > 1 else float("nan")
    return losses, name, per_step


# ---- the two modes --------------------------------------------------------------------------


def mib(n):
    return f"{n / 2**20:.1f} MiB"


def run_torch_default(args):
    device = torch.device("cuda", args.device)
    print(f"[torch-default] PyTorch's caching allocator, {args.precision}, batch {args.batch}")
    losses, name, per_step = train(args, device)
    result = {
        "losses": losses,
        "model": name,
        "seconds_per_step": per_step,
        "peak_reserved": torch.cuda.max_memory_reserved(device),
        "peak_allocated": torch.cuda.max_memory_allocated(device),
    }
    print(f"[torch-default] peak reserved {mib(result['peak_reserved'])}, "
          f"peak allocated {mib(result['peak_allocated'])}")
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def cross_stream_demo(strata, device):
    """A tensor made on the current stream, used on a side stream, then freed: PyTorch's
    tensor.record_stream() does not reach a pluggable allocator, so the stream is recorded through
    strata's C ABI; strata then reuses the block only after the side stream's work completes."""
    main = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    t = torch.randn(1 << 22, device=device)  # 16 MiB, from the main stream's pool
    side.wait_stream(main)
    with torch.cuda.stream(side):
        u = (t * 2).sum()  # reads t on the side stream; u comes from the side stream's pool
    t.record_stream(side)  # a no-op with the pluggable allocator (no record_stream hook)
    recorded = strata.record_stream(t.untyped_storage().data_ptr(), side.cuda_stream)
    expected = (t * 2).sum()
    del t  # freed now; strata keeps the block until the side stream's work is done
    main.wait_stream(side)
    if not torch.allclose(u, expected, rtol=1e-3, atol=1e-1):
        raise AssertionError(f"side-stream result {u.item()} != {expected.item()}")
    print(f"cross-stream free: strata_record_stream returned {recorded} "
          f"({'recorded' if recorded == 1 else 'nothing to record'}); result checked")
    if recorded != 1:
        raise AssertionError("strata_record_stream did not record the side stream "
                             "(use_stream_safe_cuda_allocator off or a non-auto_growth strategy?)")
    del u, expected
    torch.cuda.synchronize(device)


def run_strata(args):
    if not args.lib:
        sys.exit("give the path of libstrata_c.so with --lib or STRATA_C_LIB")
    lib_path = os.path.abspath(args.lib)
    strata = Strata(lib_path)
    if args.strata_conf:
        strata.set_flags(args.strata_conf)  # before the first allocation
    strata.probe(args.device)
    # Must happen before PyTorch's first CUDA allocation (PyTorch refuses to swap an allocator
    # that is already in use).
    allocator = torch.cuda.memory.CUDAPluggableAllocator(lib_path, "strata_malloc", "strata_free")
    torch.cuda.memory.change_current_allocator(allocator)

    device = torch.device("cuda", args.device)
    print(f"[strata] {lib_path} as PyTorch's CUDA allocator, {args.precision}, batch {args.batch}, "
          f"{torch.cuda.get_device_name(device)}")
    losses, name, per_step = train(args, device)
    stats = strata.stats(args.device)
    peak_reserved = stats["reserved_bytes.all.peak"]
    peak_allocated = stats["allocated_bytes.all.peak"]
    print(f"model: {name}; {per_step * 1e3:.1f} ms/step after the first")
    print(strata.summary(args.device))
    print(f"[strata] peak reserved {mib(peak_reserved)} ({peak_reserved} bytes), "
          f"peak allocated {mib(peak_allocated)}, device mallocs {stats['num_device_alloc']}, "
          f"OOMs {stats['num_ooms']}")

    cross_stream_demo(strata, device)
    strata.empty_cache(args.device)
    after = strata.stats(args.device)
    print(f"[strata] after strata_empty_cache: reserved {mib(after['reserved_bytes.all.current'])}, "
          f"allocated {mib(after['allocated_bytes.all.current'])} "
          f"(live: {strata.lib.strata_live_allocations()} allocations)")
    if args.no_compare:
        return

    cmd = [sys.executable, os.path.abspath(__file__), "--torch-default", "--steps", str(args.steps),
           "--batch", str(args.batch), "--image-size", str(args.image_size), "--precision",
           args.precision, "--seed", str(args.seed), "--device", str(args.device)]
    print("running the same training with PyTorch's default allocator:", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        sys.exit(f"the --torch-default run failed with exit status {proc.returncode}")
    lines = [l for l in proc.stdout.splitlines() if l.startswith(RESULT_PREFIX)]
    if not lines:
        sys.exit("the --torch-default run printed no result")
    torch_result = json.loads(lines[-1][len(RESULT_PREFIX):])

    # Same weights and data: the first loss must agree (an allocator that corrupted memory
    # would not); later steps may drift slightly (cuDNN algorithm choice, atomics).
    l0, t0 = losses[0], torch_result["losses"][0]
    if abs(l0 - t0) > 0.02 * max(1.0, abs(t0)):
        raise AssertionError(f"step-0 loss differs: strata {l0:.5f} vs PyTorch {t0:.5f}")
    ratio = peak_reserved / torch_result["peak_reserved"] if torch_result["peak_reserved"] else float("nan")
    print(f"step-0 loss: strata {l0:.4f}, PyTorch {t0:.4f}; "
          f"time/step: strata {per_step * 1e3:.1f} ms, PyTorch {torch_result['seconds_per_step'] * 1e3:.1f} ms")
    print(f"COMPARISON peak reserved: strata {mib(peak_reserved)} vs PyTorch default "
          f"{mib(torch_result['peak_reserved'])} (strata/PyTorch = {ratio:.3f}); peak allocated: "
          f"strata {mib(peak_allocated)} vs PyTorch {mib(torch_result['peak_allocated'])}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", default=os.environ.get("STRATA_C_LIB"),
                   help="path of libstrata_c.so (default: $STRATA_C_LIB)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16",
                   help="bf16 autocast (default) or plain fp32")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--strata-conf", default=None,
                   help='strata flags, STRATA_ALLOC_CONF syntax, e.g. "max_split_size_mb:128"')
    p.add_argument("--torch-default", action="store_true",
                   help="use PyTorch's default allocator (the comparison run)")
    p.add_argument("--no-compare", action="store_true", help="skip the --torch-default run")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device available to PyTorch")
    if args.torch_default:
        run_torch_default(args)
    else:
        run_strata(args)


if __name__ == "__main__":
    main()
