"""Records one end-to-end workload's allocations as a strata trace (the format strata-replay reads).

The workload runs under PyTorch's own caching allocator with its memory history on; every
allocation (the bytes the framework asked for) and every free request becomes one line. The first
line carries PyTorch's own figures for the same run, so a replay can be compared with them.

    python3 tools/e2e/record_trace.py multi_model_streams --steps 4 --out multi_model_streams.trace.gz

Streams are numbered in order of first use, the default stream being 0. A free is written with
the block's stream (PyTorch frees a block to the stream it was allocated on).
"""

import argparse
import gzip
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def convert(entries):
    """PyTorch device-trace entries -> (event lines, counts)."""
    streams = {0: 0}
    live = {}  # address -> allocation id
    lines = []
    next_id = 0
    for e in entries:
        action = e.get("action")
        if action not in ("alloc", "free_requested"):
            continue
        stream = streams.setdefault(int(e.get("stream", 0)), len(streams))
        addr = int(e["addr"])
        if action == "alloc":
            if addr in live:
                raise ValueError(f"address {addr:#x} allocated twice without a free")
            live[addr] = next_id
            lines.append(f"a {next_id} {int(e['size'])} {stream}")
            next_id += 1
        else:
            ident = live.pop(addr, None)
            if ident is None:  # allocated before recording started
                continue
            lines.append(f"f {ident} {stream}")
    return lines, len(streams)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload")
    p.add_argument("--steps", type=int, default=4, help="steps to record (default 4)")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--max-entries", type=int, default=2_000_000)
    p.add_argument("--size", type=int, default=None,
                   help="the workload's size (its batch, as capacity.py varies it; default: its own)")
    p.add_argument("--out", required=True, help="the .trace.gz to write")
    args = p.parse_args()
    if args.steps < 1:
        p.error("--steps must be at least 1")

    if "PYTORCH_CUDA_ALLOC_CONF" in os.environ:
        p.error("record under PyTorch's default allocator: unset PYTORCH_CUDA_ALLOC_CONF")
    sys.path.insert(0, HERE)
    import torch

    import workloads

    torch.cuda.set_device(args.device)
    device = torch.device("cuda", args.device)
    torch.cuda.memory._record_memory_history(context=None, max_entries=args.max_entries)
    w = workloads.build(args.workload, device, size=args.size)
    for _ in range(args.steps):
        w.step()
        torch.cuda.synchronize(device)
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    entries = snapshot["device_traces"][args.device]
    if len(entries) >= args.max_entries:
        sys.exit(f"the history filled its {args.max_entries} entries: raise --max-entries")
    lines, num_streams = convert(entries)

    stats = torch.cuda.memory_stats(device)
    header = {
        "workload": args.workload,
        "description": w.description,
        "steps": args.steps,
        **({"size": args.size} if args.size is not None else {}),
        "torch_peak_requested": stats["requested_bytes.all.peak"],
        "torch_peak_allocated": stats["allocated_bytes.all.peak"],
        "torch_peak_reserved": stats["reserved_bytes.all.peak"],
        "torch_segments_peak": stats["segment.all.peak"],
        "torch_num_alloc_retries": stats["num_alloc_retries"],
        "torch_version": torch.__version__,
        "gpu": torch.cuda.get_device_name(device),
    }
    with gzip.open(args.out, "wt") as f:
        f.write("# " + json.dumps(header) + "\n")
        f.write("\n".join(lines) + "\n")
    print(f"{args.out}: {len(lines)} events, {num_streams} stream(s), "
          f"PyTorch reserved/requested {header['torch_peak_reserved'] / header['torch_peak_requested']:.3f}")


if __name__ == "__main__":
    main()
