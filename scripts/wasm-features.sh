# Sourced wherever wasm is built with relaxed SIMD (scripts/build-www.sh,
# scripts/test-wasm-relaxed.sh, make lint): the one place its target features are named. The plain
# build's features are .cargo/config.toml's (SIMD128 alone), which Node.js runs for
# `make test-wasm`; relaxed SIMD runs in Chromium only (Node.js 20 computes its dot products
# wrong: twice the specified sum).
WASM_RELAXED_FEATURES="+simd128,+relaxed-simd"
