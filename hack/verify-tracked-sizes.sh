#!/usr/bin/env bash
# Fails when git tracks a file over 1 MB that is not in the allow-list below:
# what a build makes (a binary, bench output) must never be committed, and a
# large file is almost always one of those.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

limit=$((1024 * 1024))
# Paths allowed to be larger, one per line (none today).
allowed=()

status=0
while IFS= read -r -d '' path; do
  [[ -f "$path" ]] || continue
  size=$(stat -c %s "$path")
  (( size > limit )) || continue
  for a in "${allowed[@]}"; do [[ "$path" == "$a" ]] && continue 2; done
  echo "tracked file over 1 MB: $path ($size bytes); .gitignore it, or allow it in $0" >&2
  status=1
done < <(git ls-files -z)
exit $status
