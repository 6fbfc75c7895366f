#!/usr/bin/env bash
# Installs what building and testing tokenscope needs, skipping whatever is already there:
# Debian packages (python3-pip for the model download, Node.js and npm for the wasm tests and
# the page's packages, Chromium, chromedriver and Firefox ESR for the browser tests, lavapipe
# for the GPU tests), the wasm32 Rust target,
# wasm-bindgen-cli at exactly the wasm-bindgen crate's version, and the npm packages.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# chromedriver (Debian's, at Chromium's own version): wasm-bindgen-test-runner drives Chromium
# with it for the relaxed-SIMD kernel tests (scripts/test-wasm-relaxed.sh).
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
# Firefox: the page's second browser (tests/e2e/firefox.test.mjs: another WebGPU, another
# shader compiler), driven by puppeteer-core over WebDriver BiDi.
command -v firefox-esr >/dev/null 2>&1 || command -v firefox >/dev/null 2>&1 || need_apt+=(firefox-esr)
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
# libfuzzer-sys compiles libFuzzer's C++ (make fuzz, and 60 s of it in make test).
command -v c++ >/dev/null 2>&1 || need_apt+=(g++)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
# lavapipe: a CPU Vulkan driver, so the GPU kernels are tested on machines without a GPU.
ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || need_apt+=(mesa-vulkan-drivers)
ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1' || need_apt+=(libvulkan1)

if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is missing: install Rust with rustup (https://rustup.rs) first" >&2
  exit 1
fi

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
  echo "setup: adding the wasm32-unknown-unknown Rust target"
  rustup target add wasm32-unknown-unknown
fi

# rust-src: the threaded wasm engine rebuilds the standard library with atomics (build-www.sh).
for component in rustfmt clippy rust-src; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
    echo "setup: adding the Rust component $component"
    rustup component add "$component"
  fi
done

# wasm-bindgen-cli must match the wasm-bindgen crate exactly (pinned in Cargo.toml).
want=$(sed -n 's/^wasm-bindgen = "=\([0-9.]*\)"/\1/p' Cargo.toml)
have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)
if [ "$have" != "$want" ]; then
  echo "setup: installing wasm-bindgen-cli $want (found '${have:-none}'); this takes about 10 minutes"
  # Not --locked: a locked dependency version is missing from some registries.
  cargo install wasm-bindgen-cli --version "$want"
fi
if ! npm install --no-audit --no-fund --loglevel=error; then
  echo "setup: npm install failed: check the network or the npm registry settings" >&2
  exit 1
fi
# A first build of everything `make test` runs (native debug and release, wasm, the threaded
# wasm engine) fills about 6 GB of target/. A full disk shows up later as a linker "Bus error".
free_kb=$(df -Pk . | awk 'NR == 2 {print $4}')
if [ "${free_kb:-0}" -lt $((6 * 1024 * 1024)) ]; then
  echo "setup: warning: only $((free_kb / 1024)) MB free on the disk that holds target/;" \
    "a first build needs about 6 GB (a linker 'Bus error' means the disk filled up)" >&2
fi
echo "setup: ready (wasm-bindgen $(wasm-bindgen --version | awk '{print $2}'), node $(node --version))"
