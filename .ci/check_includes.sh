#!/usr/bin/env bash
# Fails when a source file includes a header from a folder above its own (the layering in
# docs/ARCHITECTURE.md, "Layering"), listing file:line and the include. A folder may include
# itself and the folders of lower levels; folders of one level do not include each other.
# Subfolders belong to their top folder (strategies/vmm/ is strategies/). unittests/, python/
# and examples/ are not checked: tests may reach any level. Needs only bash and git.
set -euo pipefail
cd "$(dirname "$0")/.."

# level of each folder, lowest first
declare -A level=(
  [platform]=0 [flags]=0
  [allocation]=1 [history]=1
  [raw]=2 [strategies]=2 [layers]=2 [reporting]=2
  [facade]=3
  [strata]=4
  [capi]=5 [tools]=5
)
order="platform, flags -> allocation, history -> raw, strategies, layers, reporting -> facade"
order+=" -> strata (public headers) -> capi, tools"

include_re='^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)"'
bad=0
while IFS= read -r file; do
  [[ -f $file ]] || continue
  from=${file%%/*}
  [[ -n ${level[$from]+set} ]] || continue
  line_no=0
  while IFS= read -r text || [[ -n $text ]]; do
    line_no=$((line_no + 1))
    [[ $text =~ $include_re ]] || continue
    target=${BASH_REMATCH[1]}
    [[ $target == */* ]] || continue
    to=${target%%/*}
    [[ -n ${level[$to]+set} && $to != "$from" ]] || continue
    if ((level[$to] > level[$from])); then
      echo "$file:$line_no: #include \"$target\": $to/ is above $from/"
      bad=1
    elif ((level[$to] == level[$from])); then
      echo "$file:$line_no: #include \"$target\": $to/ is on the level of $from/"
      bad=1
    fi
  done <"$file"
done < <(git ls-files --cached --others --exclude-standard -- '*.h' '*.cc' '*.c' '*.cu' '*.cuh')

if ((bad)); then
  echo "check_includes: includes must go down the levels: $order" >&2
  exit 1
fi
echo "check_includes: clean"
