#!/usr/bin/env bash
# Builds the page's engine: the library for wasm32 (release), its JS bindings and TypeScript
# types (wasm-bindgen --target web) into www/pkg/, optimized with npm binaryen's wasm-opt when
# present; copies d3 from node_modules into www/vendor/ (served locally, no CDN) and writes
# every WGSL kernel variant into www/shaders/.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --lib --target wasm32-unknown-unknown
RAW=target/wasm32-unknown-unknown/release/tokenscope.wasm
# wasm-bindgen and wasm-opt take over a minute: skip them when cargo's output is the one
# www/pkg was built from (its hash is stamped there), so `make run` on an unchanged tree
# starts serving at once.
STAMP=www/pkg/.built-from
want_stamp="$(sha256sum "$RAW" | cut -d' ' -f1) opt=$([ -x node_modules/.bin/wasm-opt ] && echo yes || echo no)"
if [ -f www/pkg/tokenscope_bg.wasm ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want_stamp" ]; then
  echo "build-www: www/pkg is up to date"
else
  rm -f "$STAMP"
  wasm-bindgen --target web --out-dir www/pkg "$RAW"
  if [ -x node_modules/.bin/wasm-opt ]; then
    # Debian's binaryen (v108) writes modules that fail at init: only npm's is used.
    node_modules/.bin/wasm-opt -O3 --enable-simd --enable-bulk-memory --enable-nontrapping-float-to-int \
      --enable-sign-ext --enable-mutable-globals --enable-reference-types --enable-multivalue \
      www/pkg/tokenscope_bg.wasm -o www/pkg/tokenscope_bg.wasm
  else
    echo "build-www: npm binaryen is missing (npm install): the wasm is not size-optimized"
  fi
  echo "$want_stamp" > "$STAMP"
fi
mkdir -p www/vendor www/shaders
cp node_modules/d3/dist/d3.min.js www/vendor/d3.min.js
# The WGSL kernels as the engine compiles them (templates expanded into their variants, by
# the engine's own expander in the wasm just built), served so the browser tests compile
# each one with Chromium's compiler.
rm -f www/shaders/*.wgsl  # a kernel renamed or removed must not linger
node scripts/export-shaders.mjs www/shaders
ls -l www/pkg/tokenscope_bg.wasm | awk '{printf "build-www: www/pkg/tokenscope_bg.wasm is %.1f MB\n", $5/1e6}'
