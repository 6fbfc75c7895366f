#!/usr/bin/env bash
# The peers `make bench` compares tokenscope with, pinned in bench/package.json and installed
# here only: llama.cpp natively through node-llama-cpp's prebuilt linux-x64 binary (no
# compiler needed), and wllama for Chromium, whose ES module and wasm are copied into
# bench/web/wllama/ for the bench page. `make test` installs them too, for llama.cpp's own
# quantizer in that library (scripts/requantize.py), never to run llama.cpp in a test.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/node-llama-cpp ] || [ ! -d node_modules/@wllama/wllama ] || [ package.json -nt node_modules/.package-lock.json ]; then
  # Optional dependencies would pull every platform's and GPU's build of llama.cpp (700 MB);
  # the CPU linux-x64 one is named in package.json.
  npm install --no-audit --no-fund --loglevel=error --omit=optional --ignore-scripts
fi
rm -rf web/wllama
mkdir -p web/wllama
cp -r node_modules/@wllama/wllama/esm/. web/wllama/
echo "bench peers: node-llama-cpp $(node -p "require('./node_modules/node-llama-cpp/package.json').version"), wllama $(node -p "require('./node_modules/@wllama/wllama/package.json').version")"
