# tokenscope: `make run` sets up and runs the demo; `make test` sets up and runs every test.

MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
TOKENIZER_FIXTURE := models/SmolLM2-135M-Instruct.tokenizer.gguf
WASM_TARGET := wasm32-unknown-unknown
# Tests that run in wasm (Node.js) as well as natively.
WASM_TESTS := --test sampler --test tokenizer --test generate --test wasm_tokenizer_oracle
PROMPT ?= Explain in one sentence why the sky is blue.

.PHONY: setup model build wasm run test test-native test-wasm bench clean

setup:
	scripts/setup.sh

model:
	scripts/fetch-model.sh

build: setup
	cargo build --release

wasm: setup
	cargo build --release --lib --target $(WASM_TARGET)

# Until the web page exists, `make run` streams a chat answer on the CPU.
run: setup model build
	./target/release/tokenscope generate --chat --max-tokens 96 "$(PROMPT)"

$(TOKENIZER_FIXTURE): $(MODEL)
	cargo run --quiet -- export-tokenizer --model $(MODEL) --out $@

$(MODEL):
	scripts/fetch-model.sh

test: setup model test-native test-wasm wasm
	@echo "make test: all tests passed"

test-native: model
	cargo test -- --nocapture --test-threads 1

test-wasm: model $(TOKENIZER_FIXTURE)
	cargo test --target $(WASM_TARGET) $(WASM_TESTS)

bench: model build
	./target/release/tokenscope bench

clean:
	cargo clean
