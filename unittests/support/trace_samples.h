// A recording of every line kind strata writes (docs/HISTORY.md): a header with the recording's
// counts, attributes on lines, and the kinds beside allocations and frees. Shared by the trace
// reader's tests and its fuzz test.
#pragma once

namespace strata::testing {

inline constexpr char kRecording[] =
    "# {\"recorded_by\": \"strata\", \"place\": \"gpu:0\", \"max_entries\": 100, "
    "\"recorded\": 9, \"dropped\": 2, \"events\": 4, \"allocs\": 2, \"streams\": 2}\n"
    "seg malloc 0x7f0000000000 2097152 t=5\n"
    "a 1 1000 0 t=10 th=1 c=7 addr=0x7f0000000000 future=x\n"
    "a 2 500 1\n"
    "f 1 1 th=2 t=20\n"
    "p 1 1 n=1 t=21\n"
    "ctx 7 \"train.py:12 step\\nmodel.py:3 = forward\"\n"
    "oom 4096 1 t=30 c=7\n"
    "r 1 t=40\n"
    "f 2 1\n"
    "empty_cache 2097152 t=50\n"
    "seg free 0x7f0000000000 2097152\n"
    "seg create 0x1 2097152\n"
    "seg map 0x7f0000200000 2097152\n"
    "seg unmap 0x7f0000200000 2097152\n"
    "seg release 0x1 2097152\n";

}  // namespace strata::testing
