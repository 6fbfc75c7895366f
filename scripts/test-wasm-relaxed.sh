#!/usr/bin/env bash
# The CPU backend's matrix products built with relaxed SIMD, as the page's default engines
# are (www/pkg-relaxed, www/pkg-threads), tested in headless Chromium through
# wasm-bindgen-test-runner and chromedriver: every dot-product kernel of that build against
# candle on odd sizes (tests/cpu_quant_matmul.rs). Built in release in the target dir of
# build-www.sh's relaxed engine, so the two share their compiled dependencies, and the plain
# wasm build's dir stays incremental.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/wasm-features.sh
RUSTFLAGS="-C target-feature=$WASM_RELAXED_FEATURES" \
WASM_BINDGEN_USE_BROWSER=1 CHROMEDRIVER="$(command -v chromedriver)" \
  cargo test --release --target wasm32-unknown-unknown --test cpu_quant_matmul --target-dir target/wasm-relaxed
