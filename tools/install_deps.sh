#!/usr/bin/env bash
# Installs the Debian packages strata needs to build and test, when run as root;
# otherwise prints the exact apt-get command and exits non-zero. Chromium runs the memory
# viewer's page in the test suite (tools/viz_check.sh; the test is skipped without it).
set -euo pipefail
packages=(cmake make g++ pkg-config libabsl-dev libgoogle-glog-dev libgtest-dev libgmock-dev
          libbenchmark-dev zlib1g-dev nlohmann-json3-dev clang-format clang-tidy git chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  echo "install_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install_deps: missing packages: ${missing[*]}" >&2
  echo "install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
