//! A decode step's time by kernel, as `bench --profile` and the browser's profile
//! (`Engine.profile`) report it: the figures ([`StepProfile`], measured by
//! [`super::GpuBackend::profile_decode`]) and the lines both print them in.

use serde::Serialize;

/// One decode step timed by kernel ([`super::GpuBackend::profile_decode`]).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct StepProfile {
    /// How the kernels were timed: "timestamps in one pass", "timestamps, a pass per
    /// dispatch" (a browser's WebGPU) or "one submit per dispatch" (no timestamps).
    pub method: &'static str,
    /// Whether the timestamps came coarsened to whole 100 us (Chromium's unless started with
    /// `--enable-webgpu-developer-features`): then a kernel's time is only good summed over
    /// many dispatches, and a single short one reads 0 or 100 us.
    pub timestamps_quantized: bool,
    /// The position the profiled step ran at (the context before it, in tokens): up to the
    /// fused attention's positions a step runs other kernels than past them.
    pub position: usize,
    /// Time per kernel, most first.
    pub kernels: Vec<KernelTime>,
    /// The kernels' GPU time, added up.
    pub gpu_seconds: f64,
    /// An ordinary decode step's wall time: inputs written, encoded, submitted, logits read
    /// back.
    pub wall_seconds: f64,
    /// The same step's GPU time with a timestamp only before its first dispatch and after its
    /// last, so no timestamp between kernels adds its cost (on the 2026-11-27 H100 a
    /// timestamp after each dispatch added about 6 us to each): `1 - step_gpu_seconds /
    /// wall_seconds` is the share of a step spent outside the GPU (writing its inputs,
    /// encoding, submitting, reading the logits back). With timestamps only.
    pub step_gpu_seconds: Option<f64>,
    /// What a dispatch that waits for the one before it costs when it does next to nothing:
    /// the step's cheapest kernel, the embedding lookup, as many times in a row as the step
    /// has dispatches (each writes the buffer the next writes, so each waits), timed from
    /// before the first to after the last, over their count. Times the step's dispatch count,
    /// the least a step of them can take on this device whatever its kernels do. With
    /// timestamps only.
    pub dispatch_floor_seconds: Option<f64>,
    /// The same chain with a timestamp after each dispatch, as the kernels above were timed
    /// (the mean past the first): what those timestamps add to each.
    pub dispatch_floor_seconds_timed_each: Option<f64>,
}

/// Where one decode step's time goes, by kernel.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct KernelTime {
    /// Shader (template variant) name.
    pub kernel: String,
    /// Dispatches of it per decode step.
    pub dispatches: usize,
    /// Seconds they took (see [`StepProfile::method`]).
    pub seconds: f64,
    /// Bytes of weights they read (matrix kernels; 0 for the others).
    pub weight_bytes: u64,
    /// Achieved weight bandwidth, `weight_bytes / seconds` in GB/s (0 without weights).
    pub weight_gb_per_s: f64,
}

impl StepProfile {
    /// The profile in words, a line each: the step's GPU time against its wall time, each
    /// kernel's time, share and weight bandwidth, and the dispatch floor. One wording for the
    /// CLI and the browser's bench rows.
    pub fn lines(&self) -> Vec<String> {
        let total = self.gpu_seconds;
        let wall = self.wall_seconds;
        let mut out = Vec::new();
        let coarse =
            if self.timestamps_quantized { " (timestamps coarsened to 100 us by the browser: good summed, not one by one)" } else { "" };
        match (self.step_gpu_seconds, self.method) {
            (Some(step), method) => {
                out.push(format!(
                    "one decode step at position {}: {:.2} ms on the GPU (timestamps at its ends only) of a {:.2} ms step, {:.0}% outside the GPU (inputs written, commands encoded and submitted, logits read back)",
                    self.position,
                    step * 1e3,
                    wall * 1e3,
                    100.0 * (1.0 - step / wall.max(1e-12)).max(0.0)
                ));
                let how = if method == "timestamps in one pass" {
                    "GPU timestamps inside one pass, one after each dispatch"
                } else {
                    "GPU timestamps at the edges of passes, each dispatch a pass of its own"
                };
                out.push(format!("the same step by kernel ({how}, adding its own cost to each){coarse}: {:.2} ms in all", total * 1e3));
            }
            (None, _) => out.push(format!(
                "one decode step at position {} by kernel (no timestamp queries here: each dispatch submitted alone, empty-submit time taken off; an ordinary step takes {:.2} ms):",
                self.position,
                wall * 1e3
            )),
        }
        for k in &self.kernels {
            let bandwidth = if k.weight_bytes > 0 {
                format!("  {:>7.1} MB of weights at {:>7.1} GB/s", k.weight_bytes as f64 / 1e6, k.weight_gb_per_s)
            } else {
                String::new()
            };
            out.push(format!(
                "  {:<40} {:>4} dispatches {:>9.2} ms {:>5.1}%{bandwidth}",
                k.kernel,
                k.dispatches,
                k.seconds * 1e3,
                100.0 * k.seconds / total.max(1e-12)
            ));
        }
        if let (Some(floor), Some(each)) = (self.dispatch_floor_seconds, self.dispatch_floor_seconds_timed_each) {
            let n: usize = self.kernels.iter().map(|k| k.dispatches).sum();
            out.push(format!(
                "a dispatch that waits for the one before and does next to nothing (the embedding lookup, {n} in a row): {:.1} us ({:.1} with a timestamp after each, as above); {n} of them: {:.2} ms, {:.0} tok/s at most",
                floor * 1e6,
                each * 1e6,
                floor * n as f64 * 1e3,
                1.0 / (floor * n as f64).max(1e-12)
            ));
        }
        out
    }
}
