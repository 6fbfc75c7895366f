# tokenscope: `make run` sets up and serves the page; `make test` sets up and runs every test.

MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
TOKENIZER_FIXTURE := models/SmolLM2-135M-Instruct.tokenizer.gguf
WASM_TARGET := wasm32-unknown-unknown
# Tests that run in wasm (Node.js) as well as natively.
WASM_TESTS := --test cpu_quant_matmul --test cache_float --test sampler --test tokenizer --test chat_template --test architectures --test generate --test beam --test speculative --test run_record --test wasm_tokenizer_oracle
PORT ?= 8080

BIG_MODEL := models/synthetic/llama-1b-shape.Q4_K_M.gguf
TYPE_MODELS := models/synthetic/types/reference.json

.PHONY: setup model requantized big-model type-models build www run test lint test-native test-fuzz test-wasm test-wasm-relaxed test-types test-e2e bench bench-web bench-inside bench-frame bench-device bench-speculative fuzz fuzz-crafted soak clean

setup:
	scripts/setup.sh

model:
	scripts/fetch-model.sh

# The default model requantized by llama.cpp's own quantizer (Q4_K_M, Q6_K, Q8_0, Q5_0, Q3_K_M,
# Q2_K, IQ4_NL, IQ4_XS, IQ3_M) into models/requantized/, checked against the sha256 tests/fixtures/requantized.json was made on:
# the files tests/requantized.rs holds us to llama.cpp's logits on. llama.cpp is the pinned
# prebuilt library bench/setup-peers.sh installs (npm); nothing is compiled.
requantized: model
	bench/setup-peers.sh
	python3 scripts/requantize.py

# A random-weight model built to Llama 3.2 1B's shape in llama.cpp's Q4_K_M mix (802 MB,
# written in seconds: examples/llama_1b_shape.rs), for the test that a 1B model loads in the
# page under 2 GB (tests/e2e/big_model.test.mjs).
big-model: $(BIG_MODEL)

$(BIG_MODEL): examples/llama_1b_shape.rs src/model/synthetic.rs
	cargo run --example llama_1b_shape -- $@

# A small random-weight model per weight type and the exact CPU path's greedy run on each and on
# each architecture fixture, for the page's per-type and per-architecture test
# (tests/e2e/weight_types.test.mjs).
type-models: $(TYPE_MODELS)

$(TYPE_MODELS): examples/weight_type_models.rs src/model/synthetic.rs $(wildcard tests/fixtures/architectures/*.gguf)
	cargo run --example weight_type_models -- $(dir $@)

build: setup
	cargo build --release

# The page's engine (wasm + JS bindings in www/pkg) and d3 (www/vendor).
www: setup
	scripts/build-www.sh

run: setup model www build
	./target/release/tokenscope serve --port $(PORT)

$(TOKENIZER_FIXTURE): $(MODEL)
	cargo run --quiet -- export-tokenizer --model $(MODEL) --out $@

$(MODEL):
	scripts/fetch-model.sh

# The coverage-guided fuzzer is not in it (`make test-fuzz`, 60 s, or `make fuzz`): its
# instrumented build of every dependency took 8 of CI's 90 minutes on a slow 2-core machine;
# the native tests still replay its seeds and 50,000 mutations of them (tests/gguf_hostile.rs).
test: setup model requantized lint test-native test-wasm test-wasm-relaxed test-types test-e2e
	@echo "make test: all tests passed"

# Formatting and clippy, natively and for wasm32 (with and without relaxed SIMD), with warnings
# as errors. The relaxed-SIMD lint passes the features to clippy for our crate alone (after
# `--`), so it reuses the dependencies the plain wasm lint just checked.
lint: setup $(TOKENIZER_FIXTURE)
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy --all-targets --target $(WASM_TARGET) -- -D warnings
	. scripts/wasm-features.sh && \
	  cargo clippy --lib --target $(WASM_TARGET) -- -D warnings -C target-feature=$$WASM_RELAXED_FEATURES

# Two tests of a binary at a time, one a core: most of the GPU tests' time on lavapipe is its
# shader compiler, which takes one core a pipeline (a cold cache: every kernel variant).
test-native: model requantized $(TOKENIZER_FIXTURE)
	cargo test -- --nocapture --test-threads 2

test-wasm: model $(TOKENIZER_FIXTURE)
	cargo test --target $(WASM_TARGET) $(WASM_TESTS)

# The matrix kernels built with relaxed SIMD (the page's default engines) in headless Chromium:
# Node.js 20 computes relaxed dot products wrong.
test-wasm-relaxed: setup
	scripts/test-wasm-relaxed.sh

# The page's scripts (every www/*.js is // @ts-check) and the fields it reads, type-checked
# against the declarations derived from the Rust types, the DOM's, WebGPU's and d3's.
test-types: www
	node_modules/.bin/tsc -p tests/types
	node_modules/.bin/tsc -p tests/types/tsconfig.www.json

# The page in headless Chromium (Playwright), against `tokenscope serve`: the dev build `cargo
# test` made (optimized too: Cargo.toml), which serves the page as the release build does, so
# `make test` compiles the native dependencies once, not twice. The examples above use it too.
# Two files at a time (each has its own server and browser): the shader suite keeps one core
# busy (the browser's GPU process makes one pipeline at a time), as do the wasm engine's runs.
test-e2e: model www big-model type-models
	cargo build --bin tokenscope
	TOKENSCOPE_BIN=target/debug/tokenscope node --test --test-concurrency=2 tests/e2e/

# tokenscope against llama.cpp natively and wllama in Chromium, CPU and GPU, in one run, on the
# shipped Q4_1 file and llama.cpp's Q4_K_M of it (bench/run.mjs; bench/setup-peers.sh installs
# the pinned peers).
bench: model requantized www build
	node bench/run.mjs

# Plain against speculative decoding (both drafters, three kinds of prompt), CPU and GPU
# natively, greedy, in one run (bench/speculative.mjs).
bench-speculative: model build
	node bench/speculative.mjs

# The page's WebGPU backend alone in headless Chromium (whatever adapter it gets: SwiftShader
# without a GPU): prefill and decode tok/s and the kernel dispatches per step the page reports.
bench-web: model www build
	node bench/run.mjs --web

# What the views inside a step (Attention, Layers) cost on the page's CPU engine in Chromium:
# time from a step to both views drawn, and decode speed with them closed and open (bench/inside.mjs).
bench-inside: model www build
	node bench/inside.mjs

# What a frame of the page's drawing costs as a run grows to 2000 steps (bench/frame.mjs).
bench-frame: model www build
	node bench/frame.mjs

# Everything a GPU machine with no network needs to test and bench us against llama.cpp (Vulkan)
# and wllama (WebGPU) there, packed into target/device/pieces/<n>/ (56 MiB each):
# scripts/pack-device.sh, which builds its own binaries (for x86-64-v3) and exports the
# tokenizer with them; bench/device/README.md says how to send and run them.
bench-device: model www
	scripts/pack-device.sh

# 300 cycles of generate, stop, sliders, step switches and reloads in Chromium; memory must stay flat.
soak: model www build
	node tests/soak/soak.mjs

# Coverage-guided fuzzing of the GGUF reader and the page's header check (libFuzzer on the
# stable toolchain, scripts/fuzz-coverage.sh; seeds tests/fixtures/gguf_hostile): 60 s.
test-fuzz: setup
	scripts/fuzz-coverage.sh 60

# Ten minutes of the coverage-guided fuzzer, then a million mutated GGUF files through the
# reader and the loader (make test-fuzz runs 60 s; make test's native tests 50,000 files).
FUZZ_INPUTS ?= 1000000
fuzz: setup
	scripts/fuzz-coverage.sh 600
	cargo run --release --example fuzz_gguf -- --inputs $(FUZZ_INPUTS)

# Rewrite the hand-made hostile files kept in tests/fixtures/gguf_hostile/.
fuzz-crafted: setup
	cargo run --release --example fuzz_gguf -- --write-crafted tests/fixtures/gguf_hostile

clean:
	cargo clean
