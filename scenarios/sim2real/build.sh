#!/usr/bin/env bash
# Builds llama.cpp's llama-server (CPU) from a source directory with cmake.
#
# Usage: scenarios/sim2real/build.sh LLAMA_CPP_DIR
#
# LLAMA_CPP_DIR is a llama.cpp checkout: any clone, or the ggerganov/llama.cpp
# snapshot brought with the tool library's `fetch` (README, "Against a real
# engine", says how to check it out). Needs cmake and a C++ compiler; takes
# about 5 minutes on 2 cores. The binary is LLAMA_CPP_DIR/build/bin/llama-server.
set -euo pipefail
if [ $# -ne 1 ] || [ ! -f "$1/CMakeLists.txt" ] || [ ! -d "$1/examples/server" ]; then
  echo "usage: $0 LLAMA_CPP_DIR (a llama.cpp source directory: CMakeLists.txt and examples/server/)" >&2
  exit 2
fi
src=$1
for tool in cmake c++; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is not installed" >&2; exit 2; }
done
if [ -x "$src/build/bin/llama-server" ]; then
  echo "build.sh: $src/build/bin/llama-server is already built"
  exit 0
fi
cmake -S "$src" -B "$src/build" -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$src/build" --target llama-server -j"$(nproc)"
echo "build.sh: built $src/build/bin/llama-server"
