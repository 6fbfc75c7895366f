#!/usr/bin/env bash
# bench/device/run.sh STEP...: on a GPU machine with no network, runs what scripts/pack-device.sh
# packed (make bench-device), from the repository root of the tree the device tool sent. Steps,
# in the order given:
#   receive  moves the carried pieces (target/device/pieces/<n>/) to /tmp/tokenscope-device,
#            which outlives the calls while the machine is up
#   unpack   joins the pieces once all have come, checks their SHA-256 and unpacks them over the
#            tree; keeps only the packed shared libraries the machine lacks, and unpacks glvnd
#            over / where the machine lacks it (NVIDIA's Vulkan driver needs it)
#   info     the GPU, its driver, the Vulkan loader, the device's Vulkan extensions Chromium's
#            WebGPU looks for (vulkaninfo), the Chromium flags that give WebGPU the GPU
#            (bench/device/probe-webgpu.mjs tries several, headless and, for Vulkan's, headed on
#            the packed Xvfb, with Chromium's log of each try in chrome-probe.txt; the bench uses
#            the one found), and the adapter Dawn gives the page's engine in Node.js
#            (bench/dawn.mjs)
#   tests    the GPU test binaries at --test-threads 1, 4 and 16, each under a time limit
#            (TEST_LIMIT_S, 240 by default), so a hang is reported as one (exit 124) instead of
#            waited out, with how busy the process was in its last 5 s (a wait uses no CPU,
#            contention does), what each thread waits on and the tests that had not finished;
#            then gpu_weight_types at 16 threads six more times
#   profile  the GPU time of each kernel of the decode step right after each of `make bench`'s prompts
#            (bench --profile: timestamps inside the step's one pass), natively; after the
#            short one also with 2 and 4 rows a subgroup (--rows-per-subgroup), with the
#            output projection per query head up to 256 positions
#            (--per-head-attention) and with attention inside it (the fused prologue),
#            and without encoding each step's commands ahead (--no-encode-ahead); after both
#            without running greedy steps ahead on the GPU's argmax (--no-run-ahead)
#   bench    node bench/run.mjs --device: ours against llama.cpp (Vulkan) natively, the page's
#            engine in Node.js on Dawn (the stand-in where Chromium gets no GPU), the page against
#            wllama (WebGPU) in Chromium where its adapter is a GPU (not SwiftShader), with the
#            page's worker alone (nothing drawn) and the page keeping 3 greedy steps ahead
#            (?runahead=3) beside it, the page in a Chromium that does not zero-fill workgroup
#            memory (Dawn's disable_workgroup_init, a diagnostic), and the greedy text of the
#            page's engine against the exact CPU path
#   sweep    first both prompts with 1, 2 and 4 rows a subgroup at once (--rows-per-subgroup) in
#            matrix workgroups of 256 and 128 (4 rows: 256 and 64), and with 2 units of every
#            row in flight (--units-in-flight 2, the default before decode rows were fitted);
#            then native decode after the short prompt with attention inside the output projection up
#            to 0 (split-K from the first step), 16 ... 256 positions (--fused-attention-positions; 40: the most whose values
#            slices the prologue holds in registers) and with the output projection per query
#            head up to 16 ... 256 positions (--per-head-attention; at 256 also in chunks of 16, 32
#            and 128), after the long prompt with
#            split-K attention in chunks of 32 ... 256 positions (--split-k-chunk; after the
#            short prompt too, chunks of 16 and 32), 1, 2 and 3 greedy steps kept submitted
#            ahead (--run-ahead-steps), 4 and 8 units of every row in flight
#            (--units-in-flight), prefill of
#            both prompts at 4 to 32 threads per row (--prefill-threads-per-row), then the matrix
#            kernels' workgroup shape: 8 to 32 threads per row in workgroups of 64 and 256, with
#            and without subgroups, both prompts (64 and 128 threads per row, a row over several
#            subgroups, in workgroups of 256 early in the sweep); sweep.txt puts each row's
#            decode against the first row of its prompt (the defaults) and ends with the
#            five fastest rows of each prompt (sweep-table.mjs)
# profile and bench also sample the GPU's clocks (nvidia-smi) while they run: clocks-<step>.csv.
# Logs and results go to $OUT (the device tool's folder that comes back), else bench/device/out.
set -euo pipefail
cd "$(dirname "$0")/../.."
HOLD=/tmp/tokenscope-device
RT="$PWD/target/device-rt"
OUT="${OUT:-$PWD/bench/device/out}"
mkdir -p "$OUT"

runtime() {
  [ -x "$RT/bin/node" ] || { echo "run.sh: nothing unpacked yet (run the unpack step)" >&2; exit 1; }
  export PATH="$RT/bin:$PATH"
  export LD_LIBRARY_PATH="$RT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CHROMIUM="$RT/chromium/chromium"
  # The flags the info step found give WebGPU the GPU (else Chromium's defaults), and whether
  # Chromium needs a window for it (on Xvfb's display).
  export CHROMIUM_FLAGS="${CHROMIUM_FLAGS:-$(cat "$RT/chromium-flags" 2>/dev/null || true)}"
  export CHROMIUM_HEADED="${CHROMIUM_HEADED:-$(cat "$RT/chromium-flags.headed" 2>/dev/null || true)}"
  display
  export FONTCONFIG_FILE="$RT/fonts.conf"
  for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
    if [ -f "$icd" ]; then export VK_DRIVER_FILES="$icd" VK_ICD_FILENAMES="$icd"; break; fi
  done
  # The test binaries find tests/fixtures and models/ at the path they were built at.
  local built
  built="$(cat "$RT/built-at")"
  if [ "$built" != "$PWD" ] && [ ! -e "$built" ]; then mkdir -p "$(dirname "$built")" && ln -s "$PWD" "$built"; fi
}

receive() {
  mkdir -p "$HOLD"
  local got=0
  for dir in target/device/pieces/*/; do
    [ -d "$dir" ] || continue
    cp "$dir"* "$HOLD/" && got=1
  done
  [ "$got" = 1 ] || { echo "run.sh: no piece was carried (carry target/device/pieces/<n>)" >&2; exit 1; }
  ls -l "$HOLD"
}

# An X display for a headed Chromium (the probe tries Vulkan with a window too): the packed
# Xvfb on :99, started once per call; DISPLAY names it. Without Xvfb, nothing.
display() {
  [ -x "$RT/bin/Xvfb" ] || return 0
  # A call's processes end with it, so an Xvfb an earlier call started is gone while its socket
  # and lock stay: start one unless the one recorded is still alive.
  local pid
  pid="$(cat "$HOLD/xvfb.pid" 2>/dev/null || true)"
  if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
    rm -f /tmp/.X11-unix/X99 /tmp/.X99-lock
    mkdir -p "$HOLD"
    "$RT/bin/Xvfb" :99 -screen 0 1400x1000x24 -nolisten tcp -xkbdir "$RT/xkb" >"$HOLD/xvfb.log" 2>&1 &
    echo $! >"$HOLD/xvfb.pid"
    for _ in $(seq 50); do [ -S /tmp/.X11-unix/X99 ] && break; sleep 0.1; done
    [ -S /tmp/.X11-unix/X99 ] || { echo "run.sh: Xvfb did not start: $(tail -3 "$HOLD/xvfb.log")" >&2; return 0; }
  fi
  export DISPLAY=:99
}

unpack() {
  local want have
  want="$(cat "$HOLD/COUNT" 2>/dev/null || echo '?')"
  have="$(ls "$HOLD"/tokenscope-device.tar.xz.* 2>/dev/null | wc -l)"
  [ "$want" = "$have" ] || { echo "run.sh: $have of $want pieces here; send the rest first" >&2; exit 1; }
  (cd "$HOLD" && cat tokenscope-device.tar.xz.* >tokenscope-device.tar.xz && sha256sum -c SHA256SUMS)
  xz -dc "$HOLD/tokenscope-device.tar.xz" | tar -xf - -C "$PWD"
  rm -f "$HOLD/tokenscope-device.tar.xz"
  # A library the machine has already is its own (newer, and matched to its driver).
  mkdir -p "$RT/lib-unused"
  for lib in "$RT"/lib/*; do
    if ldconfig -p | awk '{print $1}' | grep -qx "$(basename "$lib")"; then mv "$lib" "$RT/lib-unused/"; fi
  done
  # NVIDIA's Vulkan driver loads only beside glvnd; where the image lacks it, Debian's packages
  # are unpacked over / (how the device tool's notes bring GL and Vulkan loaders).
  if ! ldconfig -p | grep -q libGLdispatch.so.0; then
    for deb in "$RT"/debs/*.deb; do dpkg -x "$deb" /; done
    ldconfig
    echo "run.sh: glvnd unpacked from $(ls "$RT/debs" | tr '\n' ' ')"
  fi
  # Xvfb runs xkbcomp from /usr/bin only (its keymaps come from $RT/xkb).
  [ -x /usr/bin/xkbcomp ] || cp "$RT/bin/xkbcomp" /usr/bin/xkbcomp
  echo "run.sh: unpacked commit $(cat "$RT/commit"); libraries brought: $(ls "$RT/lib" | tr '\n' ' ')"
  cat >"$RT/fonts.conf" <<EOF
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig><dir>$RT/fonts</dir><cachedir>/tmp/tokenscope-fontconfig</cachedir></fontconfig>
EOF
}

info() {
  runtime
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true
    echo "Vulkan loader: $(ls "$RT"/lib/libvulkan.so.1 2>/dev/null || ldconfig -p | grep -m1 libvulkan.so.1)"
    echo "Vulkan driver files: ${VK_DRIVER_FILES:-none found}"
    # Chromium offers WebGPU a Vulkan adapter only if it can import external memory and
    # semaphores by file descriptor (Dawn's SupportsExternalImages): which of those it has.
    vulkaninfo --summary 2>/dev/null | sed -n '/^Devices:/,$p' || echo "vulkaninfo: none"
    echo "Device extensions Chromium's WebGPU looks for: $(vulkaninfo 2>/dev/null | grep -o -E 'VK_(KHR_external_memory_fd|EXT_external_memory_dma_buf|EXT_image_drm_format_modifier|KHR_external_semaphore_fd)' | sort -u | tr '\n' ' ')"
    "$CHROMIUM" --version
    node bench/device/probe-webgpu.mjs "$RT/chromium-flags" || echo "run.sh: Chromium gave WebGPU no adapter; the browser rows will say why"
    node bench/dawn.mjs || echo "run.sh: Dawn in Node.js (the stand-in for Chromium) found no adapter either"
  } 2>&1 | tee "$OUT/info.txt"
}

tests() {
  runtime
  local log="$OUT/tests.txt"
  : >"$log"
  for threads in 1 4 16; do
    for bin in target/device-tests/*; do
      echo "== $(basename "$bin") --test-threads $threads" | tee -a "$log"
      local rc=0
      run_limited "$bin" "$threads" || rc=$?
      grep -E '^test result|FAILED|panicked' "$OUT/last-test.txt" | tee -a "$log" || true
      [ "$rc" = 124 ] && stuck "$bin" "$threads" | tee -a "$log"
      [ "$rc" = 0 ] || echo "exit $rc" | tee -a "$log"
    done
  done
  # gpu_weight_types stopped in 2 runs of 6 at 16 threads on the 2026-11-27 H100: six more runs
  # tell a fix (6 finished) from luck.
  local again=target/device-tests/gpu_weight_types finished=0
  if [ -x "$again" ]; then
    for _ in 1 2 3 4 5 6; do
      if TEST_LIMIT_S=30 run_limited "$again" 16; then finished=$((finished + 1)); fi
    done
    echo "== gpu_weight_types --test-threads 16, six more runs: $finished finished" | tee -a "$log"
  fi
  rm -f "$OUT/last-test.txt"
}

# Runs test binary $1 at $2 threads for at most TEST_LIMIT_S seconds (exit 124 past it). Before
# stopping one that ran over, samples its CPU time for 5 s into $OUT/stuck-cpu.txt: a process
# that waits (a hang) uses next to none, one that contends for the cores uses them.
run_limited() {
  "$1" --test-threads "$2" >"$OUT/last-test.txt" 2>&1 &
  local pid=$! waited=0
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "${TEST_LIMIT_S:-240}" ]; do
    sleep 1
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    local before after
    before="$(awk '{print $14 + $15}' "/proc/$pid/stat")"
    sleep 5
    after="$(awk '{print $14 + $15}' "/proc/$pid/stat")"
    echo "$(( (after - before) * 100 / $(getconf CLK_TCK) / 5 ))% of a core over 5 s, $(ls "/proc/$pid/task" | wc -l) threads" >"$OUT/stuck-cpu.txt"
    # Each thread: its name, state, CPU ticks and what it waits on in the kernel (on the
    # 2026-11-27 H100, three test threads in rt_mutex_schedule: a lock inside the driver).
    for task in /proc/"$pid"/task/*; do
      local stat
      stat="$(sed 's/.*) //' "$task/stat")"
      echo "  $(cat "$task/comm") | $(echo "$stat" | awk '{print $1, $12 + $13}') | $(cat "$task/wchan" 2>/dev/null)"
    done >>"$OUT/stuck-cpu.txt"
    if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader >>"$OUT/stuck-cpu.txt" 2>&1 || true; fi
    kill -9 "$pid"
    wait "$pid" 2>/dev/null || true
    return 124
  fi
  wait "$pid"
}

# What a test binary ($1, at $2 threads) that ran over its limit was doing: how busy it was
# (run_limited's sample) and which tests had not finished.
stuck() {
  echo "HANG: $(basename "$1") at $2 threads ran past ${TEST_LIMIT_S:-240} s; $(cat "$OUT/stuck-cpu.txt")"
  echo "  unfinished: $(comm -23 <("$1" --list 2>/dev/null | sed -n 's/: test$//p' | sort) \
    <(sed -n 's/^test \(.*\) \.\.\. .*/\1/p' "$OUT/last-test.txt" | sort) | tr '\n' ' ')"
}

# One native bench run (median of 3) after bench/prompt-$1.txt, decoding $2 tokens, with the
# options after them, its JSON line appended to sweep()'s log with the prompt's name.
measure() {
  local prompt=$1 tokens=$2
  shift 2
  target/release/tokenscope bench --backend gpu --json --runs 3 --decode-tokens "$tokens" "$@" \
    --prompt-file "bench/prompt-$prompt.txt" | sed "s/^{/{\"prompt\":\"$prompt\",/" >>"$log"
}

sweep() {
  runtime
  local log="$OUT/sweep.jsonl"
  : >"$log"
  # Two and four rows a subgroup at once (thirty-first and thirty-second sessions, unmeasured
  # on a GPU when written): each unit's input loads and squares shared by the rows' products,
  # half or a quarter of the workgroups, a SwiGLU/RoPE pair finished without workgroup
  # memory; two in workgroups of 128 and four in 64 keep the default's count of workgroups (8
  # rows each). Two on lavapipe +15%, SwiftShader +50%; four a further +7% and +25%. Each
  # row's units in flight are fitted as one row's (since the thirty-eighth session; 2 before).
  for shape in 1:256 1:128 2:256 2:128 4:256 4:64; do
    for prompt in short long; do measure "$prompt" 64 --rows-per-subgroup "${shape%:*}" --matrix-workgroup "${shape#*:}"; done
  done
  # One row a subgroup takes its units in flight fitted to each decode row since the
  # thirty-seventh session (3 a thread for 576 columns, 6 for 1536, 5 for the LM head: 24.4 M
  # unit products a step instead of 30.4 M, each row one round of loads); the 2026-11-28
  # H200's default, 2 for every row, beside it (unmeasured when written: about 0.06 ms a step
  # less at that card's 9.5 ps a product, 775 -> ~810 tok/s).
  for prompt in short long; do measure "$prompt" 64 --units-in-flight 2; done
  # Where the fused prologue stops paying: decode after the short prompt (positions 5 to 69);
  # 0: split-K from the first decode step (does the prologue pay at all natively? The page on
  # a GPU runs that since 2026-11-30, where the prologue's steps were slow in Chromium).
  for fused in 0 16 32 40 64 128 256; do measure short 64 --fused-attention-positions "$fused"; done
  # Rows wider than a subgroup (twenty-fifth session): 64 and 128 threads a row in workgroups
  # of 256, a row over 2 or 4 of NVIDIA's subgroups of 32 (SHARED_ROWS) or the plain tree;
  # fewer serial loads a row (a 576-column Q4_1 row in one round) and twice or four times the
  # workgroups, against a barrier. From 8 to 32 threads a row decode went 424 -> 591 -> 751.
  for subgroups in "" --no-subgroups; do
    for tpr in 64 128; do
      for prompt in short long; do measure "$prompt" 64 $subgroups --matrix-workgroup 256 --threads-per-row "$tpr"; done
    done
  done
  # The same positions with the output projection per query head instead (each workgroup one
  # head's attention over one chunk, the feed-forward merging the heads' parts): unmeasured on
  # a GPU when it was written (2026-11-28, twenty-first session).
  for fused in 16 64 128 256; do measure short 64 --per-head-attention --fused-attention-positions "$fused"; done
  # Its chunk length (split-K's): shorter chunks give more workgroups and more parts to merge.
  for split in 16 32 128; do measure short 64 --per-head-attention --fused-attention-positions 256 --split-k-chunk "$split"; done
  # Split-K's chunk length after the long prompt (positions 257 to 321): 64 by default; 256
  # was the only length before 2026-11-27's evening (18 workgroups a layer there, 28 us).
  for split in 32 64 128 256; do measure long 64 --split-k-chunk "$split"; done
  # And after the short prompt, where positions 17 to 69 are one or two chunks of 64 (9 to
  # 18 workgroups a layer for the H100's 132 units): do shorter chunks spread them better?
  for split in 16 32; do measure short 64 --split-k-chunk "$split"; done
  # Greedy decode steps kept submitted ahead: 1 by default; 2 and 3 hide a longer readback
  # round trip (natively the step was 1.33 ms against 1.24 on the GPU on the 2026-11-28 H200).
  for ahead in 1 2 3; do
    for prompt in short long; do measure "$prompt" 64 --run-ahead-steps "$ahead"; done
  done
  # Units of a row each thread of the matrix kernels loads at once, for every row (2, the
  # fitted rows' alternative, ran early in the sweep; the 2026-11-28 H200: 775 tok/s at 2
  # against 751 at 4, 669 at 8): 4 and 8 load more at once.
  for units in 4 8; do
    for prompt in short long; do measure "$prompt" 64 --units-in-flight "$units"; done
  done
  # Prefill's threads per row (8 by default on a GPU since the sixteenth session's H100 run:
  # 11136-11448 tok/s on the long prompt against 5702-5740 at 32, the decode's own).
  for tpr in 4 8 16 32; do
    for prompt in short long; do measure "$prompt" 16 --prefill-threads-per-row "$tpr"; done
  done
  # Fewer than 8 threads per row lost on the H100 (2026-11-26: 137 tok/s at 4 against 193 at 32).
  for subgroups in "" --no-subgroups; do
    for workgroup in 64 256; do
      for tpr in 8 16 32; do
        for prompt in short long; do
          measure "$prompt" 64 $subgroups --matrix-workgroup "$workgroup" --threads-per-row "$tpr"
        done
      done
    done
  done
  node bench/device/sweep-table.mjs "$log" | tee "$OUT/sweep.txt"
}

profile() {
  runtime
  clocks_start profile
  for prompt in short long; do
    echo "== profile, $prompt prompt"
    target/release/tokenscope bench --backend gpu --runs 3 --decode-tokens 64 --profile --prompt-file "bench/prompt-$prompt.txt"
  done 2>&1 | tee "$OUT/profile.txt"
  # The profiled step comes after the runs (position 70 or so): short up to 256 positions.
  for rows in 2 4; do
    echo "== profile, short prompt, $rows rows a subgroup at once" | tee -a "$OUT/profile.txt"
    target/release/tokenscope bench --backend gpu --runs 3 --decode-tokens 64 --profile --rows-per-subgroup "$rows" \
      --prompt-file bench/prompt-short.txt 2>&1 | tee -a "$OUT/profile.txt"
  done
  echo "== profile, short prompt, the output projection per query head up to 256 positions" | tee -a "$OUT/profile.txt"
  target/release/tokenscope bench --backend gpu --runs 3 --decode-tokens 64 --profile --per-head-attention \
    --fused-attention-positions 256 --prompt-file bench/prompt-short.txt 2>&1 | tee -a "$OUT/profile.txt"
  echo "== profile, short prompt, attention fused up to 256 positions" | tee -a "$OUT/profile.txt"
  target/release/tokenscope bench --backend gpu --runs 3 --decode-tokens 64 --profile --fused-attention-positions 256 \
    --prompt-file bench/prompt-short.txt 2>&1 | tee -a "$OUT/profile.txt"
  # What encoding each step's commands while the GPU runs the step before saves (the default).
  echo "== short prompt, each step encoded just before its submit (--no-encode-ahead)" | tee -a "$OUT/profile.txt"
  target/release/tokenscope bench --backend gpu --runs 3 --decode-tokens 64 --no-encode-ahead \
    --prompt-file bench/prompt-short.txt 2>&1 | tee -a "$OUT/profile.txt"
  # What running each greedy step ahead on the GPU's argmax saves (the default).
  for prompt in short long; do
    echo "== $prompt prompt, each step waiting for the CPU's choice (--no-run-ahead)"
    target/release/tokenscope bench --backend gpu --runs 3 --decode-tokens 64 --no-run-ahead --prompt-file "bench/prompt-$prompt.txt"
  done 2>&1 | tee -a "$OUT/profile.txt"
  clocks_stop profile | tee -a "$OUT/profile.txt"
}

bench() {
  runtime
  clocks_start bench
  BENCH_OUT="$OUT" node bench/run.mjs --device 2>&1 | tee "$OUT/bench.txt"
  clocks_stop bench | tee -a "$OUT/bench.txt"
}

# The GPU's clocks, power and throttle reasons every 200 ms while a step runs, into
# $OUT/clocks-<step>.csv (nvidia-smi; nothing elsewhere): a GPU left at a low clock makes every
# dispatch slower, which would read as a dispatch floor of the kernels' own.
clocks_start() {
  command -v nvidia-smi >/dev/null || return 0
  mkdir -p "$HOLD"
  nvidia-smi --query-gpu=timestamp,pstate,clocks.sm,clocks.max.sm,clocks.mem,power.draw,utilization.gpu,clocks_throttle_reasons.active \
    --format=csv,noheader -lms 200 >"$OUT/clocks-$1.csv" 2>&1 &
  echo $! >"$HOLD/clocks.pid"
}

# Stops clocks_start's sampler and sums it up: the SM clock's range and median, against its
# most, and the performance states seen.
clocks_stop() {
  [ -f "$HOLD/clocks.pid" ] || return 0
  kill "$(cat "$HOLD/clocks.pid")" 2>/dev/null || true
  rm -f "$HOLD/clocks.pid"
  local csv="$OUT/clocks-$1.csv" sm n
  sm="$(awk -F', ' '$3 ~ /MHz/ { print $3 + 0 }' "$csv" | sort -n)"
  n="$(printf '%s\n' "$sm" | grep -c . || true)"
  if [ "$n" = 0 ]; then echo "GPU clocks: no samples ($(head -c 200 "$csv"))"; return 0; fi
  echo "GPU clocks while it ran ($n samples, every 200 ms): SM $(echo "$sm" | head -1)-$(echo "$sm" | tail -1) MHz," \
    "median $(echo "$sm" | sed -n "$(((n + 1) / 2))p"), of at most $(awk -F', ' '$4 ~ /MHz/ { print $4 + 0; exit }' "$csv") MHz;" \
    "performance states: $(awk -F', ' '$3 ~ /MHz/ { print $2 }' "$csv" | sort | uniq -c | awk '{ printf "%s%s (%d)", sep, $2, $1; sep = ", " }')"
}

[ "$#" -gt 0 ] || { sed -n '2,20p' "$0"; exit 2; }
for step in "$@"; do
  case "$step" in
    receive | unpack | info | tests | profile | bench | sweep) "$step" ;;
    *) echo "run.sh: unknown step '$step' (receive, unpack, info, tests, profile, bench, sweep)" >&2; exit 2 ;;
  esac
done
