#!/usr/bin/env bash
# Builds the page's engines: the library for wasm32 (release), its JS bindings and TypeScript
# types (wasm-bindgen --target web) into www/pkg/ (SIMD128, any browser), with relaxed SIMD
# into www/pkg-relaxed/, and the threaded engine (relaxed SIMD) into www/pkg-threads/,
# optimized with npm binaryen's wasm-opt when present; copies d3 from node_modules into www/vendor/ (served locally, no CDN) and writes
# every WGSL kernel variant into www/shaders/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/wasm-features.sh

# package RAW OUT [wasm-opt flags...]: JS bindings and TypeScript types for RAW in OUT, then
# npm binaryen's wasm-opt. Both take about two minutes (wasm-opt -O3 runs on one core): they are
# skipped when cargo's output is the one OUT was built from (its hash is stamped there), so
# `make run` on an unchanged tree starts serving at once. Each engine is packaged in the
# background while cargo builds the next (`packaging` holds their pids; the script waits for
# all before it goes on, and fails if one did): on 2 cores that saves about three minutes of a
# cold build.
packaging=()
package_in_background() {
  package "$@" &
  packaging+=($!)
}
package() {
  local raw="$1" out="$2"
  shift 2
  local stamp="$out/.built-from"
  local want
  want="$(sha256sum "$raw" | cut -d' ' -f1) opt=$([ -x node_modules/.bin/wasm-opt ] && echo yes || echo no)"
  if [ -f "$out/tokenscope_bg.wasm" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    echo "build-www: $out is up to date"
    return
  fi
  rm -f "$stamp"
  wasm-bindgen --target web --out-dir "$out" "$raw"
  if [ -x node_modules/.bin/wasm-opt ]; then
    # Debian's binaryen (v108) writes modules that fail at init: only npm's is used.
    node_modules/.bin/wasm-opt -O3 --enable-simd --enable-bulk-memory --enable-nontrapping-float-to-int \
      --enable-sign-ext --enable-mutable-globals --enable-reference-types --enable-multivalue "$@" \
      "$out/tokenscope_bg.wasm" -o "$out/tokenscope_bg.wasm"
  else
    echo "build-www: npm binaryen is missing (npm install): the wasm is not size-optimized"
  fi
  echo "$want" > "$stamp"
  ls -l "$out/tokenscope_bg.wasm" | awk '{printf "build-www: %s is %.1f MB\n", $9, $5/1e6}'
}

# The engine for one thread: any browser with wasm SIMD, any server.
cargo build --release --lib --target wasm32-unknown-unknown
package_in_background target/wasm32-unknown-unknown/release/tokenscope.wasm www/pkg

# The same with relaxed SIMD (Q4_1 products 16 lanes per instruction), which the worker loads
# where the browser validates it (Chromium does; wasm-feature-detect asks). Its own target dir,
# since its flags differ.
RUSTFLAGS="-C target-feature=$WASM_RELAXED_FEATURES" \
  cargo build --release --lib --target wasm32-unknown-unknown --target-dir target/wasm-relaxed
package_in_background target/wasm-relaxed/wasm32-unknown-unknown/release/tokenscope.wasm www/pkg-relaxed --enable-relaxed-simd

# The threaded engine, loaded when the page is cross-origin isolated (tokenscope serve sends
# COOP/COEP) in a browser with relaxed SIMD: shared memory and atomics, so rayon's pool runs on
# Web Workers. Rust ships
# wasm32's standard library without atomics, so it is rebuilt from source (the rust-src
# component, scripts/setup.sh); -Z build-std is unstable, and RUSTC_BOOTSTRAP=1 lets the
# stable toolchain take it. Its own target dir keeps both builds incremental. The linker makes
# the memory shared and imported (each worker instantiates the module on the same memory),
# exports what wasm-bindgen needs to give each thread its own TLS, and lets the memory grow to
# 4 GiB (a shared memory must declare its maximum).
THREAD_LINK="--shared-memory --import-memory --max-memory=4294967296 --export=__wasm_init_tls --export=__tls_size --export=__tls_align --export=__tls_base"
RUSTC_BOOTSTRAP=1 \
RUSTFLAGS="-C target-feature=+atomics,+bulk-memory,$WASM_RELAXED_FEATURES $(printf -- ' -C link-arg=%s' $THREAD_LINK)" \
  cargo build --release --lib --target wasm32-unknown-unknown -Z build-std=panic_abort,std \
  --target-dir target/wasm-threads
package_in_background target/wasm-threads/wasm32-unknown-unknown/release/tokenscope.wasm www/pkg-threads --enable-threads --enable-relaxed-simd
for pid in "${packaging[@]}"; do wait "$pid"; done

mkdir -p www/vendor www/shaders
cp node_modules/d3/dist/d3.min.js www/vendor/d3.min.js
cp node_modules/wasm-feature-detect/dist/esm/index.js www/vendor/wasm-feature-detect.js
cp node_modules/wasm-feature-detect/dist/index.d.ts www/vendor/wasm-feature-detect.d.ts
# The WGSL kernels as the engine compiles them (templates expanded into their variants, by
# the engine's own expander in the wasm just built), served so the browser tests compile
# each one with Chromium's compiler.
rm -f www/shaders/*.wgsl  # a kernel renamed or removed must not linger
node scripts/export-shaders.mjs www/shaders
