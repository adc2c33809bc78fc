#!/usr/bin/env bash
# Checks a page of strata-viz in a real headless browser: the page must render (its #status says
# "rendered: ..." and no "error:"), then a screenshot is taken for a person to look at.
#
#   tools/viz_check.sh PAGE.html SCREENSHOT.png
#
# Exit status: 0 rendered, 1 not rendered (the status or the browser's output is printed),
# 2 misuse, 77 skipped (no Chromium; ctest reports the test as skipped).
set -u -o pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 PAGE.html SCREENSHOT.png" >&2
  exit 2
fi
page=$1
shot=$2
if [[ ! -f $page ]]; then
  echo "viz_check: $page: no such file" >&2
  exit 2
fi

browser=${CHROMIUM:-}
if [[ -z $browser ]]; then
  for b in chromium chromium-browser google-chrome; do
    if command -v "$b" >/dev/null 2>&1; then
      browser=$b
      break
    fi
  done
fi
if [[ -z $browser ]]; then
  echo "viz_check: SKIPPED: no chromium, chromium-browser or google-chrome on PATH (set CHROMIUM)"
  exit 77
fi

url="file://$(cd "$(dirname "$page")" && pwd)/$(basename "$page")"
# A profile of its own: no state shared with another browser, removed afterwards.
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile"
  --no-first-run --disable-extensions)

dom=$(timeout 120 "$browser" "${flags[@]}" --dump-dom "$url" 2>"$profile/stderr")
rc=$?
if [[ $rc -ne 0 ]]; then
  echo "viz_check: $browser --dump-dom failed (status $rc):" >&2
  tail -n 20 "$profile/stderr" >&2
  exit 1
fi
status=$(grep -o '<div id="status"[^>]*>[^<]*' <<<"$dom" | sed 's/.*>//')
echo "viz_check: $page: status: ${status:-<none>}"
if [[ $status != rendered:* ]] || grep -q 'error:' <<<"$status"; then
  echo "viz_check: $page did not render" >&2
  exit 1
fi

rm -f "$shot"
timeout 120 "$browser" "${flags[@]}" --screenshot="$shot" --window-size=1400,1000 "$url" \
  >/dev/null 2>"$profile/stderr"
if [[ ! -s $shot ]]; then
  echo "viz_check: no screenshot written to $shot:" >&2
  tail -n 20 "$profile/stderr" >&2
  exit 1
fi
echo "viz_check: screenshot $shot"
