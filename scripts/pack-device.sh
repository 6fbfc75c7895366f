#!/usr/bin/env bash
# make bench-device: packs everything a GPU machine with no network needs to test and bench
# tokenscope against its peers there, in pieces that each fit one transfer (PIECE_MIB, 56 by
# default: the device tool takes at most 64 MiB a call, the working tree included).
#
# Built here (the 2-core machine), then archived with paths relative to the repository root:
#   target/release/tokenscope                 the CLI and server (built for x86-64-v3, not for
#                                             this machine's CPU)
#   target/device-tests/<name>                the GPU test binaries (gpu_kernels, gpu_weight_types,
#                                             oracle_gpu, gpu_speculative), debug info stripped
#   models/<default>.gguf, <tokenizer>.gguf   the default model and the tokenizer fixture
#   www/pkg*, www/vendor, www/shaders         the page's built engines, d3 and kernel variants
#   node_modules/playwright-core              drives Chromium
#   bench/node_modules, bench/web/wllama      the peers: node-llama-cpp with llama.cpp's CPU and
#                                             Vulkan builds, wllama 3.8.1 (WebGPU in Chromium); and
#                                             dawn.node (npm webgpu, Linux x64 only: bench/dawn.mjs,
#                                             the page's engine on Dawn where Chromium gets no GPU)
#   target/device-rt/                         what the machine lacks: node, Debian's Chromium,
#                                             vulkaninfo, Xvfb with xkbcomp and its keymaps (an X
#                                             display for a headed Chromium), every shared library
#                                             they need that is not
#                                             glibc itself (the Vulkan loader included), glvnd's
#                                             Debian packages (NVIDIA's Vulkan driver needs them), a font,
#                                             and the path the test binaries were built at
# The archive is xz-packed and split into target/device/pieces/<n>/tokenscope-device.tar.xz.<n>,
# one folder per transfer, with its SHA-256 in target/device/pieces/1/SHA256SUMS.
# bench/device/run.sh (tracked, so it travels with the tree) receives, joins, checks, unpacks
# and runs them there; bench/device/README.md says how, call by call.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
PIECE_MIB="${PIECE_MIB:-56}"
DEVICE="target/device"
STAGE="$DEVICE/stage"
RT="$STAGE/target/device-rt"
GPU_TESTS=(gpu_kernels gpu_weight_types oracle_gpu gpu_speculative)
VULKAN_PEER="@node-llama-cpp/linux-x64-vulkan"

# Built for any x86-64 with AVX2 (x86-64-v3), not for this machine's own CPU: .cargo/config.toml
# builds with target-cpu=native, and a binary built so on this AMD EPYC stopped with "Illegal
# instruction" on an H100 machine's Intel Xeon. Apart from `make build`'s own target folder.
# The test binaries are built in the release profile too, so the dependencies compile once (the
# dev profile's are another full build, 6-8 minutes on 2 cores; no test depends on debug
# assertions). `make bench-device` needs neither `make build` (this machine's own CPU) nor the
# dev build that `make`'s tokenizer rule runs: the tokenizer is exported below by this binary.
export RUSTFLAGS="-C target-cpu=x86-64-v3"
export CARGO_TARGET_DIR="$ROOT/target/device-build"
echo "pack-device: building the release binary and the GPU test binaries (x86-64-v3, release)"
cargo build --release
args=()
for t in "${GPU_TESTS[@]}"; do args+=(--test "$t"); done
mapfile -t test_bins < <(cargo test --release --no-run --message-format=json "${args[@]}" \
  | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.split("\n")){if(!l.startsWith("{"))continue;const m=JSON.parse(l);if(m.reason==="compiler-artifact"&&m.executable&&m.target.kind.includes("test"))console.log(m.target.name+" "+m.executable)}})')
[ "${#test_bins[@]}" -eq "${#GPU_TESTS[@]}" ] || { echo "pack-device: expected ${#GPU_TESTS[@]} test binaries, cargo built ${#test_bins[@]}" >&2; exit 1; }

echo "pack-device: installing the peers (bench/setup-peers.sh) and llama.cpp's Vulkan build"
bench/setup-peers.sh
peer_version="$(node -p "require('./bench/package.json').dependencies['node-llama-cpp']")"

rm -rf "$STAGE" "$DEVICE/pieces" "$DEVICE/tokenscope-device.tar.xz"
mkdir -p "$STAGE/target/release" "$STAGE/target/device-tests" "$STAGE/www" "$STAGE/node_modules" \
  "$STAGE/bench/web" "$RT/bin" "$RT/lib" "$RT/fonts"

cp "$CARGO_TARGET_DIR/release/tokenscope" "$STAGE/target/release/"
for line in "${test_bins[@]}"; do
  name="${line%% *}"
  strip --strip-debug -o "$STAGE/target/device-tests/$name" "${line#* }"
done
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
TOKENIZER=models/SmolLM2-135M-Instruct.tokenizer.gguf
[ -f "$TOKENIZER" ] || "$CARGO_TARGET_DIR/release/tokenscope" export-tokenizer --model "$MODEL" --out "$TOKENIZER"
# The default model and its tokenizer only (models/ also holds the requantized and synthetic
# files other tests make, over a gigabyte the GPU runs do not read).
mkdir -p "$STAGE/models"
cp "$MODEL" "$TOKENIZER" "$STAGE/models/"
for d in pkg pkg-relaxed pkg-threads vendor shaders; do cp -r "www/$d" "$STAGE/www/"; done
cp -r node_modules/playwright-core "$STAGE/node_modules/"
cp -r bench/node_modules "$STAGE/bench/"
cp -r bench/web/wllama "$STAGE/bench/web/"
# llama.cpp's Vulkan build for node-llama-cpp, at the same version, unpacked where npm would put it.
(cd "$DEVICE" && rm -f node-llama-cpp-linux-x64-vulkan-*.tgz && npm pack --silent "$VULKAN_PEER@$peer_version" >/dev/null)
mkdir -p "$STAGE/bench/node_modules/$VULKAN_PEER"
tar -xzf "$DEVICE"/node-llama-cpp-linux-x64-vulkan-*.tgz -C "$STAGE/bench/node_modules/$VULKAN_PEER" --strip-components 1
# dawn.node at the version bench/package.json pins under gpuMachineOnly, its Linux x64 build alone
# (the package carries five platforms' builds, 21 MB each).
dawn_version="$(node -p "require('./bench/package.json').gpuMachineOnly.webgpu")"
(cd "$DEVICE" && rm -f webgpu-*.tgz && npm pack --silent "webgpu@$dawn_version" >/dev/null)
mkdir -p "$STAGE/bench/node_modules/webgpu"
tar -xzf "$DEVICE"/webgpu-*.tgz -C "$STAGE/bench/node_modules/webgpu" --strip-components 1 \
  package/package.json package/index.js package/LICENSE.md package/dist/linux-x64

# The runtime: node, Chromium, and the shared libraries they load that are not glibc's own
# (the machine's glibc is newer, so these older builds run on it; its GPU driver stays its own).
cp "$(readlink -f "$(command -v node)")" "$RT/bin/node"
cp -r /usr/lib/chromium "$RT/chromium"
# vulkaninfo (Debian's vulkan-tools): run.sh info lists the device extensions Chromium's WebGPU
# needs of a Vulkan adapter (external memory and semaphore file descriptors).
mkdir -p /tmp/pack-device-apt/partial /tmp/pack-device-vulkan-tools
(cd /tmp/pack-device-vulkan-tools && rm -f ./*.deb && apt-get -qq -oAPT::Architecture=amd64 \
  -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/pack-device-apt update && apt-get -qq \
  -oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/pack-device-apt \
  download vulkan-tools 2>&1 | grep -v 'unsandboxed' || true)
dpkg-deb --fsys-tarfile /tmp/pack-device-vulkan-tools/vulkan-tools_*.deb | tar -xOf - ./usr/bin/vulkaninfo >"$RT/bin/vulkaninfo"
chmod +x "$RT/bin/vulkaninfo"
# Xvfb and xkbcomp (Debian's xvfb, x11-xkb-utils and what they load, xkb-data's keymaps): an
# X display there, for a headed Chromium whose Vulkan may give WebGPU the GPU where a headless
# one's does not (run.sh's probe tries both).
X_DEBS=/tmp/pack-device-x
mkdir -p "$X_DEBS" && rm -rf "$X_DEBS"/*.deb "$X_DEBS/root"
(cd "$X_DEBS" && apt-get -qq -oAPT::Architecture=amd64 -oAPT::Architectures=amd64 \
  -oDir::State::Lists=/tmp/pack-device-apt download xvfb x11-xkb-utils xkb-data libxfont2 \
  libxkbfile1 libfontenc1 libunwind8 2>&1 | grep -v 'unsandboxed' || true)
for deb in "$X_DEBS"/*.deb; do dpkg-deb -x "$deb" "$X_DEBS/root"; done
[ -x "$X_DEBS/root/usr/bin/Xvfb" ] || { echo "pack-device: could not download Xvfb" >&2; exit 1; }
cp "$X_DEBS/root/usr/bin/Xvfb" "$X_DEBS/root/usr/bin/xkbcomp" "$RT/bin/"
cp -r "$X_DEBS/root/usr/share/X11/xkb" "$RT/xkb"
GLIBC='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux-x86-64)\.so'
{
  for elf in "$RT/bin/node" "$RT/bin/vulkaninfo" "$RT/bin/Xvfb" "$RT/bin/xkbcomp" "$RT/chromium/chromium" "$RT"/chromium/*.so \
             "$STAGE"/bench/node_modules/@node-llama-cpp/*/bins/*/*.node \
             "$STAGE"/bench/node_modules/@node-llama-cpp/*/bins/*/*.so \
             "$STAGE"/bench/node_modules/webgpu/dist/linux-x64/dawn.node; do
    # Xvfb's own libraries (libXfont2, ...) from the packages just unpacked.
    if [ -f "$elf" ]; then LD_LIBRARY_PATH="$X_DEBS/root/usr/lib/x86_64-linux-gnu" ldd "$elf" 2>/dev/null | awk '/=> \//{print $1" "$3}'; fi
  done
  # Loaded at run time, not linked: the Vulkan loader (wgpu, llama.cpp) and NSS's modules.
  for so in libvulkan.so.1 libsoftokn3.so libfreebl3.so libfreeblpriv3.so libnssckbi.so; do
    for p in "$(ldconfig -p | awk -v n="$so" '$1==n{print $NF; exit}')" "/usr/lib/x86_64-linux-gnu/nss/$so"; do
      if [ -f "$p" ]; then echo "$so $p"; fi
    done
  done
} | sort -u | while read -r name path; do
  # glibc is the machine's; a peer's own libraries (beside its binding) stay where it finds them.
  if ! [[ "$name" =~ $GLIBC ]] && [[ "$path" != "$STAGE"/* ]] && [ ! -e "$RT/lib/$name" ]; then cp -L "$path" "$RT/lib/$name"; fi
done
# The GL vendor-neutral dispatch libraries (glvnd): NVIDIA's Vulkan driver (libGLX_nvidia) will
# not load without them ("Could not get 'vkCreateInstance'"), and a GPU machine's image may lack
# them. Debian's packages, unpacked there only where the machine lacks libGLdispatch.so.0.
mkdir -p "$RT/debs" /tmp/pack-device-apt/partial
(cd "$RT/debs" && apt-get -qq -oAPT::Architecture=amd64 -oAPT::Architectures=amd64 \
  -oDir::State::Lists=/tmp/pack-device-apt update && apt-get -qq -oAPT::Architecture=amd64 \
  -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/pack-device-apt download \
  libglvnd0 libegl1 libgl1 libglx0 libopengl0 libgles2 2>&1 | grep -v 'unsandboxed' || true)
[ "$(ls "$RT/debs"/*.deb | wc -l)" -eq 6 ] || { echo "pack-device: could not download the glvnd packages" >&2; exit 1; }
cp /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf "$RT/fonts/" 2>/dev/null || true
echo "$ROOT" >"$RT/built-at"
git rev-parse HEAD >"$RT/commit"

du -sh "$STAGE" | sed 's/^/pack-device: staged /'
echo "pack-device: compressing (xz) and splitting into ${PIECE_MIB} MiB pieces"
tar -C "$STAGE" -cf - . | xz -T0 -6 >"$DEVICE/tokenscope-device.tar.xz"
mkdir -p "$DEVICE/pieces"
split -b "${PIECE_MIB}M" -d -a 2 "$DEVICE/tokenscope-device.tar.xz" "$DEVICE/pieces/tokenscope-device.tar.xz."
n=0
for part in "$DEVICE"/pieces/tokenscope-device.tar.xz.*; do
  n=$((n + 1))
  mkdir -p "$DEVICE/pieces/$n"
  mv "$part" "$DEVICE/pieces/$n/"
done
(cd "$DEVICE" && sha256sum tokenscope-device.tar.xz | sed 's/  / /' >pieces/1/SHA256SUMS)
echo "$n" >"$DEVICE/pieces/1/COUNT"
rm -f "$DEVICE/tokenscope-device.tar.xz"
rm -rf "$STAGE"
# The commit packed, for a later session to tell whether the pieces are still current.
git rev-parse HEAD >"$DEVICE/packed-at"
du -sh "$DEVICE"/pieces/* | sed 's/^/pack-device: piece /'
echo "pack-device: $n pieces; send each with the device tool (carry target/device/pieces/<n>), as bench/device/README.md says"
