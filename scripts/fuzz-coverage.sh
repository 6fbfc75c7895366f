#!/usr/bin/env bash
# Coverage-guided fuzzing of the GGUF reader (fuzz/fuzz_targets/gguf_header.rs): libFuzzer
# through libfuzzer-sys, built with the sanitizer-coverage instrumentation cargo-fuzz uses
# (inline 8-bit counters, PC table, traced comparisons; debug assertions and overflow checks
# on), which the stable toolchain takes, without the address sanitizer, which it does not.
# Seeds: the hostile files kept in tests/fixtures/gguf_hostile (each a crafted or fuzz-found
# variant of a small synthetic model). The corpus it grows stays in target/fuzz/corpus; a crash
# is written to target/fuzz/artifacts/ and fails the run.
#
#   scripts/fuzz-coverage.sh [SECONDS]      (default 60: make test; make fuzz runs 600)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
host="$(rustc -vV | sed -n 's/^host: //p')"
# --target keeps the flags off build scripts and proc macros, which must link uninstrumented.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
cargo build --release --manifest-path fuzz/Cargo.toml --target "$host" --target-dir target/fuzz --bin gguf_header
mkdir -p target/fuzz/corpus target/fuzz/artifacts
# One process; each input at most 64 KiB (the seeds are about 19 KB) and 2 s; any single
# allocation over 256 MiB, or 1 GiB resident, is a crash.
"target/fuzz/$host/release/gguf_header" \
  -max_total_time="$seconds" -max_len=65536 -timeout=2 -malloc_limit_mb=256 -rss_limit_mb=1024 \
  -artifact_prefix=target/fuzz/artifacts/ -print_final_stats=1 \
  target/fuzz/corpus tests/fixtures/gguf_hostile
