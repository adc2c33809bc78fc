#!/usr/bin/env bash
# The demo behind `make demo`; $1 is the build directory.
set -euo pipefail
build=${1:-build}
"$build/bin/strata-demo"
