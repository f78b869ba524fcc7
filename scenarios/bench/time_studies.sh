#!/usr/bin/env bash
# Runs every committed study (scenarios/sweeps/*.json) as its .md says, one
# after another, and prints per study its wall and CPU time and the machine's
# load average before it started — the figures the studies' prose states
# (design.md, "Performance": stated figures are measured figures). Checks that
# every study rewrote its results byte for byte (git diff on results/).
# Usage: scenarios/bench/time_studies.sh [SPEC.json …]   (default: all of them)
set -euo pipefail
cd "$(dirname "$0")/../.."
specs=("$@")
[ ${#specs[@]} -gt 0 ] || specs=(scenarios/sweeps/*.json)
cpu=$(mktemp)
trap 'rm -f "$cpu"' EXIT
echo "study timings, $(date -u +%Y-%m-%d), $(nproc) cores"
for spec in "${specs[@]}"; do
  load=$(cut -d' ' -f1 /proc/loadavg)
  start=$(date +%s.%N)
  /usr/bin/time -o "$cpu" -f "%U %S" deno task sweep --spec "$spec" >/dev/null 2>&1
  times=$(tail -1 "$cpu")
  end=$(date +%s.%N)
  awk -v s="$spec" -v w="$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" -v t="$times" -v l="$load" \
    'BEGIN { split(t, c, " "); printf "  %-52s %7.1f s wall %7.1f s CPU   load average %s\n", s, w, c[1] + c[2], l }'
done
if git diff --quiet -- results/; then echo "results/: byte-identical"; else echo "results/: CHANGED"; git diff --stat -- results/ | tail -3; exit 1; fi
