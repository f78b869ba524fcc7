#!/usr/bin/env bash
# The sim-to-real study: builds llama.cpp's llama-server, writes a tiny
# random-weight llama model, starts two instances on loopback, calibrates the
# simulator on them (deno task calibrate), validates round robin,
# prefix_aware and sglang_cache_aware on a shared-prefix workload (deno task
# validate), and writes results/sim2real/ (summary.txt, plots, JSON).
#
# Usage: scenarios/sim2real/run.sh LLAMA_CPP_DIR
#
# Environment (all optional):
#   SIM2REAL_MODEL   where the model is written/read (default ${TMPDIR:-/tmp}/request-routing-sim/tiny-llama.gguf)
#   SIM2REAL_PORT    first port of the two instances (default 18180)
#   SIM2REAL_REPEAT  real runs per policy (default 3)
#   SIM2REAL_SLOTS   slots per instance, llama-server --parallel (default 2)
#
# Runs alone: other work on the machine is noise in every figure (2 shared
# cores here). About 12 minutes after the build. The servers' logs go to
# ${TMPDIR:-/tmp}/request-routing-sim/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
if [ $# -ne 1 ]; then
  echo "usage: $0 LLAMA_CPP_DIR" >&2
  exit 2
fi
src=$(cd "$1" && pwd)
model=${SIM2REAL_MODEL:-${TMPDIR:-/tmp}/request-routing-sim/tiny-llama.gguf}
port=${SIM2REAL_PORT:-18180}
repeat=${SIM2REAL_REPEAT:-3}
slots=${SIM2REAL_SLOTS:-2}
out=$repo/results/sim2real
logs=${TMPDIR:-/tmp}/request-routing-sim

"$here/build.sh" "$src"
if [ ! -f "$model" ]; then
  mkdir -p "$(dirname "$model")"
  python3 "$here/make_model.py" "$src" "$model"
fi

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
urls=()
mkdir -p "$out" "$logs"
for i in 0 1; do
  p=$((port + i))
  # One thread each (2 cores, 2 instances); 4096 tokens of context per slot.
  "$src/build/bin/llama-server" -m "$model" -t 1 -c $((4096 * slots)) -np "$slots" --metrics --slots \
    --no-webui --host 127.0.0.1 --port "$p" >"$logs/llama-server-$i.log" 2>&1 &
  pids+=($!)
  urls+=("http://127.0.0.1:$p")
done
for url in "${urls[@]}"; do
  for _ in $(seq 1 120); do
    curl -sf "$url/health" >/dev/null 2>&1 && break
    sleep 0.5
  done
  curl -sf "$url/health" >/dev/null || { echo "run.sh: $url did not come up (see $logs/llama-server-*.log)" >&2; exit 1; }
done
list=$(IFS=,; echo "${urls[*]}")
cd "$repo"
# Both write their files atomically (the tables they print are in the JSON and summary.txt).
deno task calibrate --url "$list" --out results/sim2real/calibration --nonce 1
deno task validate --url "$list" --scenario scenarios/sim2real/workload.json \
  --preset results/sim2real/calibration/preset.json --repeat "$repeat" --nonce 2 \
  --out results/sim2real/validation
deno run --no-prompt --allow-read --allow-write=results scenarios/sim2real/summarise.ts results/sim2real
