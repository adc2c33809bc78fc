#!/usr/bin/env python3
"""Turns strata-bench's JSON output into markdown tables (for docs/BENCHMARKS.md).

    python3 tools/bench_report.py bench.json [-o BENCHMARKS.md]

Tables: cached pair (ns per allocate+free), mixed window (ns per free+allocate), trace replay
cold and warm (ns per event, peak reserved, fragmentation), thread scaling (items/s and
items/s(N) / items/s(1)) and record-stream cycles. Ratios are PEER time / STRATA time: above 1
means strata is faster. Python 3 standard library only.
"""
import argparse
import json
import re
import sys
from collections import defaultdict

STRATA_MAIN = "strata_auto_growth"
PEERS = ["torch", "cuda_malloc_async"]
SUBJECT_ORDER = [
    "strata_auto_growth",
    "strata_chain",
    "strata_naive_best_fit",
    "strata_thread_local",
    "strata_vmm",
    "strata_system",
    "torch",
    "cuda_malloc_async",
]
UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
SUFFIX = re.compile(r"^(iterations|min_time|min_warmup_time|repeats|threads):|^(real_time|manual_time)$")


def parse_name(name):
    """'BM_X/subject/param/iterations:5/real_time/threads:4' -> ('BM_X', 'subject', 'param', 4)."""
    parts = name.split("/")
    threads = 1
    kept = []
    for p in parts:
        if p.startswith("threads:"):
            threads = int(p.split(":", 1)[1])
        elif not SUFFIX.match(p):
            kept.append(p)
    while len(kept) < 3:
        kept.append("")
    return kept[0], kept[1], "/".join(kept[2:]), threads


def load(path):
    with open(path) as f:
        data = json.load(f)
    runs = data.get("benchmarks", [])
    has_median = any(r.get("aggregate_name") == "median" for r in runs)
    results = {}
    for r in runs:
        if has_median:
            if r.get("run_type") != "aggregate" or r.get("aggregate_name") != "median":
                continue
            name = r.get("run_name", r["name"])
        else:
            if r.get("run_type", "iteration") != "iteration":
                continue
            name = r["name"]
        bench, subject, param, threads = parse_name(name)
        entry = dict(r)
        entry["ns"] = r.get("real_time", 0.0) * UNIT_NS.get(r.get("time_unit", "ns"), 1.0)
        results[(bench, subject, param, threads)] = entry
    return data.get("context", {}), results


def order_subjects(subjects):
    known = [s for s in SUBJECT_ORDER if s in subjects]
    return known + sorted(s for s in subjects if s not in SUBJECT_ORDER)


def fmt_ns(v):
    if v is None:
        return "-"
    if v >= 1e6:
        return "%.2f ms" % (v / 1e6)
    if v >= 1e4:
        return "%.1f us" % (v / 1e3)
    return "%.1f ns" % v


def fmt_ratio(peer, strata):
    if peer is None or strata is None or strata == 0:
        return "-"
    return "%.2fx" % (peer / strata)


def fmt_bytes(v):
    if not v:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= scale:
            return "%.2f %s" % (v / scale, unit)
    return "%d B" % v


def fmt_size(param):
    try:
        return fmt_bytes(int(param)).replace(".00 ", " ")
    except ValueError:
        return param


def value(results, bench, subject, param, threads=1, key="ns"):
    e = results.get((bench, subject, param, threads))
    if e is None or e.get("error_occurred"):
        return None
    return e.get(key)


def errors(results):
    return sorted(
        (k, e.get("error_message", "")) for k, e in results.items() if e.get("error_occurred")
    )


def params_of(results, bench):
    ps = {k[2] for k in results if k[0] == bench}

    def key(p):
        try:
            return (0, int(p), p)
        except ValueError:
            return (1, 0, p)

    return sorted(ps, key=key)


def subjects_of(results, bench):
    return order_subjects({k[1] for k in results if k[0] == bench})


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def time_table(results, bench, first_col, key="ns", param_fmt=lambda p: p):
    subjects = subjects_of(results, bench)
    if not subjects:
        return None
    peers = [p for p in PEERS if p in subjects]
    header = [first_col] + subjects + ["%s / %s" % (p, STRATA_MAIN) for p in peers]
    rows = []
    for p in params_of(results, bench):
        vals = {s: value(results, bench, s, p, key=key) for s in subjects}
        row = [param_fmt(p)] + [fmt_ns(vals[s]) for s in subjects]
        row += [fmt_ratio(vals[peer], vals.get(STRATA_MAIN)) for peer in peers]
        rows.append(row)
    return table(header, rows)


def replay_memory_table(results):
    bench = "BM_Replay"
    subjects = subjects_of(results, bench)
    if not subjects:
        return None
    header = ["trace"] + ["%s peak reserved (frag.)" % s for s in subjects] + ["PyTorch recorded frag."]
    rows = []
    for p in params_of(results, bench):
        row = [p]
        recorded = None
        for s in subjects:
            peak = value(results, bench, s, p, key="peak_reserved")
            frag = value(results, bench, s, p, key="fragmentation")
            recorded = recorded or value(results, bench, s, p, key="torch_recorded_frag")
            row.append("%s (%.3f)" % (fmt_bytes(peak), frag) if peak and frag else fmt_bytes(peak))
        row.append("%.3f" % recorded if recorded else "-")
        rows.append(row)
    return table(header, rows)


def threads_table(results):
    bench = "BM_Threads"
    keys = [k for k in results if k[0] == bench]
    if not keys:
        return None
    counts = sorted({k[3] for k in keys})
    subjects = order_subjects({k[1] for k in keys})
    header = ["subject"] + ["%d thr (M items/s)" % n for n in counts]
    header += ["scaling %d/1" % counts[-1]] if len(counts) > 1 else []
    rows = []
    for s in subjects:
        param = next(k[2] for k in keys if k[1] == s)
        rates = [value(results, bench, s, param, n, key="items_per_second") for n in counts]
        row = [s] + ["%.2f" % (r / 1e6) if r else "-" for r in rates]
        if len(counts) > 1:
            row.append("%.2fx" % (rates[-1] / rates[0]) if rates[0] and rates[-1] else "-")
        rows.append(row)
    return table(header, rows)


def report(context, results):
    out = ["# strata-bench results", ""]
    ctx = [
        ("date", context.get("date")),
        ("host", context.get("host_name")),
        ("CPUs", "%s x %s MHz" % (context.get("num_cpus"), context.get("mhz_per_cpu"))),
        ("device", context.get("strata_device")),
        ("GPU", context.get("gpu")),
        ("peers", context.get("peers") or "none"),
        ("traces", context.get("traces")),
    ]
    out += ["- %s: %s" % (k, v) for k, v in ctx if v]
    out += [
        "",
        "Ratios are peer time / strata time (strata = %s, the facade's default chain): "
        "above 1 means strata is faster." % STRATA_MAIN,
        "",
    ]
    sections = [
        (
            "Cached pair: allocate + free of one size (budget: strata <= 50 ns target, < 100 ns "
            "required on an H100 host)",
            time_table(results, "BM_CachedPair", "size", param_fmt=fmt_size),
        ),
        (
            "Mixed sizes, 256 live allocations: one free + one allocation",
            time_table(results, "BM_Mixed", "sizes"),
        ),
        (
            "Trace replay, cold (fresh allocator, empty cache): ns per event",
            time_table(results, "BM_Replay", "trace", key="ns_per_event"),
        ),
        ("Trace replay, cold: peak reserved and fragmentation (peak reserved / peak requested)",
         replay_memory_table(results)),
        (
            "Trace replay, warm (steady state): ns per event",
            time_table(results, "BM_ReplayWarm", "trace", key="ns_per_event"),
        ),
        ("Threads: cached pairs of 4 KiB on N threads (target: thread_local 16 threads >= 8x one)",
         threads_table(results)),
        (
            "RecordStream: allocate on A, record B, free, reclaim on a later allocation",
            time_table(results, "BM_RecordStream", "size", param_fmt=fmt_size),
        ),
    ]
    for title, body in sections:
        if body:
            out += ["## " + title, "", body, ""]
    errs = errors(results)
    if errs:
        out += ["## Skipped (errors)", ""]
        out += ["- %s: %s" % ("/".join(str(x) for x in k), msg) for k, msg in errs]
        out.append("")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="strata-bench --benchmark_out=FILE --benchmark_out_format=json")
    parser.add_argument("-o", "--output", help="markdown file (default: stdout)")
    args = parser.parse_args()
    context, results = load(args.json)
    text = report(context, results)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
