#!/usr/bin/env bash
# Renders results/report.html in headless Chromium (Debian's `chromium`) and
# saves a screenshot, proving the page is self-contained and renders offline.
# Usage: scenarios/report/report_screenshot.sh [report.html] [out.png]
set -euo pipefail
report=$(realpath "${1:-results/report.html}")
out=$(realpath -m "${2:-results/report_screenshot.png}")
command -v chromium >/dev/null || { echo "needs Debian's chromium: apt-get install chromium" >&2; exit 2; }
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$profile" --hide-scrollbars --window-size=1000,2600 \
  --screenshot="$out" "file://$report" >/dev/null 2>&1
size=$(stat -c %s "$out")
[ "$size" -gt 20000 ] || { echo "screenshot $out is only $size bytes: the page did not render" >&2; exit 1; }
echo "rendered $report → $out ($size bytes)"
