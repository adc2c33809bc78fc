#!/usr/bin/env bash
# The demo behind `make demo`; $1 is the build directory.
set -euo pipefail
build=${1:-build}
"$build/bin/strata-demo" --demo_trace=tools/traces/resnet50_train.trace.gz \
  --demo_timeline="$build/demo_timeline.html"
