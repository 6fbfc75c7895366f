//! A decode step's time by kernel, as `bench --profile` and the browser's profile
//! (`Engine.profile`) report it: the measurement ([`GpuBackend::profile_decode`], with
//! timestamp queries where the device has them), the figures ([`StepProfile`]) and the lines
//! both print them in.

use serde::Serialize;

use super::device::Timestamps;
use super::kernels::{self, Dispatch};
use super::model::GpuBackend;
use super::step::Lists;
use crate::error::{Error, Result};

/// One decode step timed by kernel ([`GpuBackend::profile_decode`]).
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
    /// In a browser, the same for an ordinary step after the profiled one, its readback waiting
    /// plainly for the browser's own poll of the GPU, no nudges (browser_wait.rs): what the
    /// nudges take off a step's wall time there. None natively (nothing to nudge).
    pub wall_seconds_plain_wait: Option<f64>,
    /// In a browser, how the engine's waits nudge it ([`super::browser_wait::GpuWait`], in
    /// words), as the ordinary step waited. None natively.
    pub wait: Option<&'static str>,
    /// The same step's GPU time with a timestamp only before its first dispatch and after its
    /// last, so no timestamp between kernels adds its cost (on the 2026-11-27 H100 a
    /// timestamp after each dispatch added about 6 us to each): `1 - step_gpu_seconds /
    /// wall_seconds` is the share of a step spent outside the GPU (writing its inputs,
    /// encoding, submitting, reading the logits back). The least of [`ENDS_TRIPS`] runs. With
    /// timestamps only.
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
    /// A readback of the step's logits alone, wall time: a submit holding only their copy into
    /// the readback buffer, then its map and read (the median of [`READBACK_TRIPS`]); what a
    /// step's wall time adds to its GPU time for the logits, where nothing runs ahead.
    pub readback_seconds: f64,
    /// The same for one word (4 bytes): the round trip's own cost, whatever its size.
    pub readback_word_seconds: f64,
    /// Bytes of the logits' readback (the vocabulary's floats).
    pub readback_bytes: usize,
}

/// Readbacks timed alone for [`StepProfile::readback_seconds`], the median taken.
pub const READBACK_TRIPS: usize = 9;

/// Runs of each step timed at its ends only ([`StepProfile::step_gpu_seconds`], and each with
/// one kernel left out: [`KernelTime::seconds_left_out`]), the least taken.
pub const ENDS_TRIPS: usize = 3;

/// Decode steps [`GpuBackend::profile_decode`] runs, each appending its token to the KV
/// cache: an ordinary one, the profiled one, and in a browser an ordinary one whose readback
/// is not nudged ([`StepProfile::wall_seconds_plain_wait`]).
pub const PROFILE_STEPS: usize = if cfg!(target_arch = "wasm32") { 3 } else { 2 };

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
    /// What its dispatches cost the step as it runs: the step's GPU time less the same step's
    /// with this kernel's dispatches left out, both with timestamps at their ends only (no
    /// timestamp between dispatches adds its cost, and each dispatch's launch and wait for
    /// the one before count). The kernels left out leave stale values behind, which no
    /// kernel's work depends on. With timestamps only.
    pub seconds_left_out: Option<f64>,
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
                    "one decode step at position {}: {:.2} ms on the GPU (timestamps at its ends only, the least of {ENDS_TRIPS} runs) of a {:.2} ms step, {:.0}% outside the GPU (inputs written, commands encoded and submitted, logits read back)",
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
        if self.kernels.iter().any(|k| k.seconds_left_out.is_some()) {
            out.push(format!(
                "each kernel left out in turn (the step's GPU time less the step's without its dispatches, timestamps at the ends only, each the least of {ENDS_TRIPS} runs): what it costs the step as it runs"
            ));
            for (k, seconds) in self.kernels.iter().filter_map(|k| k.seconds_left_out.map(|s| (k, s))) {
                out.push(format!(
                    "  {:<40} {:>4} dispatches {:>9.2} ms {:>7.1} us a dispatch",
                    k.kernel,
                    k.dispatches,
                    seconds * 1e3,
                    seconds * 1e6 / k.dispatches.max(1) as f64
                ));
            }
        }
        if let (Some(plain), Some(wait)) = (self.wall_seconds_plain_wait, self.wait) {
            out.push(format!(
                "an ordinary step read back with the engine's waits ({wait}): {:.2} ms; the next one waiting for the browser's own poll: {:.2} ms",
                wall * 1e3,
                plain * 1e3
            ));
        }
        out.push(format!(
            "a readback alone (a submit holding only its copy, then the map; median of {READBACK_TRIPS}): the logits' {} bytes {:.3} ms, 4 bytes {:.3} ms",
            self.readback_bytes,
            self.readback_seconds * 1e3,
            self.readback_word_seconds * 1e3
        ));
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

impl GpuBackend {
    /// Times one decode step of `token` by kernel, natively and in a browser. Two real steps
    /// run, each appending the token to the KV cache: an ordinary one, timed from writing its
    /// inputs to having its logits back (the step's wall time), then the profiled one (in a
    /// browser a third, ordinary but its readback's wait not nudged: [`PROFILE_STEPS`]). Where
    /// the device has timestamp queries inside passes the profiled step is an ordinary step
    /// too, one pass and one submit, with a timestamp after every dispatch; where it has them
    /// at pass edges only (a browser's WebGPU) each dispatch is a pass of its own in the one
    /// submit, its end stamped. Then the step with each kernel's dispatches left out in turn
    /// and the whole step, each with timestamps at its ends only (its GPU time as it runs, and
    /// what each kernel costs it: [`KernelTime::seconds_left_out`]), the dispatch floor, and a readback of the logits alone (and of
    /// one word), its wall time from submit to read. With no timestamps at all each dispatch
    /// is submitted and awaited alone, less an empty submit's time (natively only: a
    /// browser cannot wait for the GPU without a timestamp's help).
    pub async fn profile_decode(&mut self, token: u32) -> Result<StepProfile> {
        use web_time::Instant;
        if token as usize >= self.cfg.vocab_size || self.pos + PROFILE_STEPS > self.capacity {
            return Err(Error::Backend("cannot profile: bad token or full context".into()));
        }
        let t = Instant::now();
        self.run(&[token], Lists::Forward, 1, 0).await?;
        let wall_seconds = t.elapsed().as_secs_f64();
        let list = self.decode.pick(self.pos, 1).to_vec();
        self.ctx.queue.write_buffer(&self.acts.tokens, 0, bytemuck::cast_slice(&[token]));
        self.ctx.queue.write_buffer(&self.acts.step, 0, bytemuck::bytes_of(&self.profiled_step()));
        let place = self.ctx.info.timestamps;
        let (method, seconds, quantized) = match place {
            Timestamps::InsidePasses | Timestamps::PassEdges => {
                let (seconds, quantized) = self.dispatch_seconds_by_timestamps(&list, kernels::Stamps::EachDispatch).await?;
                let method = if place == Timestamps::InsidePasses { "timestamps in one pass" } else { "timestamps, a pass per dispatch" };
                (method, seconds, quantized)
            }
            Timestamps::None => ("one submit per dispatch", self.dispatch_seconds_alone(&list)?, false),
        };
        let gpu_seconds = seconds.iter().sum();
        let mut kernels: Vec<KernelTime> = Vec::new();
        for (d, seconds) in list.iter().zip(seconds) {
            match kernels.iter_mut().find(|k| k.kernel == d.kernel) {
                Some(k) => {
                    k.dispatches += 1;
                    k.seconds += seconds;
                    k.weight_bytes += d.weight_bytes;
                }
                None => kernels.push(KernelTime {
                    kernel: d.kernel.clone(),
                    dispatches: 1,
                    seconds,
                    weight_bytes: d.weight_bytes,
                    weight_gb_per_s: 0.0,
                    seconds_left_out: None,
                }),
            }
        }
        for k in &mut kernels {
            if k.weight_bytes > 0 && k.seconds > 0.0 {
                k.weight_gb_per_s = k.weight_bytes as f64 / k.seconds / 1e9;
            }
        }
        // Each kernel left out in turn, before the whole step's own timing runs last, so the
        // KV cache's row for this position is the whole step's again.
        let mut without = Vec::new();
        if place != Timestamps::None {
            for k in &kernels {
                let rest: Vec<Dispatch> = list.iter().filter(|d| d.kernel != k.kernel).cloned().collect();
                without.push(if rest.is_empty() { 0.0 } else { self.least_seconds_at_ends(&rest).await? });
            }
        }
        let step_gpu_seconds = match place {
            Timestamps::None => None,
            _ => Some(self.least_seconds_at_ends(&list).await?),
        };
        if let Some(step) = step_gpu_seconds {
            for (k, rest) in kernels.iter_mut().zip(without) {
                k.seconds_left_out = Some(step - rest);
            }
        }
        let (dispatch_floor_seconds, dispatch_floor_seconds_timed_each) = match list.iter().find(|d| d.kernel.starts_with("embedding")) {
            Some(lookup) if place != Timestamps::None && list.len() > 1 => {
                let chain = vec![lookup.clone(); list.len()];
                let whole = self.dispatch_seconds_by_timestamps(&chain, kernels::Stamps::Ends).await?.0[0];
                let each = self.dispatch_seconds_by_timestamps(&chain, kernels::Stamps::EachDispatch).await?.0;
                (Some(whole / chain.len() as f64), Some(each[1..].iter().sum::<f64>() / (each.len() - 1) as f64))
            }
            _ => (None, None),
        };
        let vocab = self.cfg.vocab_size;
        let readback_seconds = self.readback_round_trip(vocab).await?;
        let readback_word_seconds = self.readback_round_trip(1).await?;
        self.pos += 1;
        self.ctx.check()?;
        // In a browser, an ordinary step once more, its readback waiting for the browser's
        // own poll (after the profiled one, so that one's position is the native profile's).
        #[cfg(target_arch = "wasm32")]
        let (wall_seconds_plain_wait, wait) = {
            let how = self.ctx.wait();
            self.ctx.set_wait(super::browser_wait::GpuWait::Plain);
            let t = Instant::now();
            let ran = self.run(&[token], Lists::Forward, 1, 0).await;
            self.ctx.set_wait(how);
            ran?;
            (Some(t.elapsed().as_secs_f64()), Some(how.describe()))
        };
        #[cfg(not(target_arch = "wasm32"))]
        let (wall_seconds_plain_wait, wait) = (None, None);
        kernels.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        Ok(StepProfile {
            method,
            timestamps_quantized: quantized,
            position: self.pos - PROFILE_STEPS + 1,
            kernels,
            gpu_seconds,
            wall_seconds,
            wall_seconds_plain_wait,
            wait,
            step_gpu_seconds,
            dispatch_floor_seconds,
            dispatch_floor_seconds_timed_each,
            readback_seconds,
            readback_word_seconds,
            readback_bytes: vocab * 4,
        })
    }

    /// The least GPU time of [`ENDS_TRIPS`] runs of `list` in one pass, timestamps at its ends
    /// only: a shared device's noise only ever adds time, so the least is the run nearest the
    /// kernels' own cost (a difference of two such runs is what
    /// [`KernelTime::seconds_left_out`] reports).
    async fn least_seconds_at_ends(&self, list: &[Dispatch]) -> Result<f64> {
        let mut least = f64::INFINITY;
        for _ in 0..ENDS_TRIPS {
            least = least.min(self.dispatch_seconds_by_timestamps(list, kernels::Stamps::Ends).await?.0[0]);
        }
        Ok(least)
    }

    /// The step [`GpuBackend::profile_decode`] times, once its own step has run: one token at
    /// the position after it.
    fn profiled_step(&self) -> kernels::StepParams {
        kernels::StepParams::new(self.pos as u32, 1)
    }

    /// The median wall time of [`READBACK_TRIPS`] readbacks of the first `floats` logits, each
    /// alone: a submit holding only their copy into the readback buffer, then its map and read.
    async fn readback_round_trip(&self, floats: usize) -> Result<f64> {
        let mut seconds = Vec::with_capacity(READBACK_TRIPS);
        for _ in 0..READBACK_TRIPS {
            let start = web_time::Instant::now();
            let mut encoder = self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("readback") });
            encoder.copy_buffer_to_buffer(&self.acts.logits, 0, &self.acts.staging, 0, (floats * 4) as u64);
            let submission = self.ctx.queue.submit([encoder.finish()]);
            self.ctx.map_f32(&self.acts.staging, floats, Some(submission)).await?;
            seconds.push(start.elapsed().as_secs_f64());
        }
        seconds.sort_by(f64::total_cmp);
        Ok(seconds[READBACK_TRIPS / 2])
    }

    /// The GPU time of each of `list`'s dispatches, encoded as a step is (one submit, the
    /// logits read back) with a timestamp before the first and after each, in the place the
    /// device has them ([`kernels::encode_timed`]); or, with [`kernels::Stamps::Ends`], the
    /// whole list's time alone, in one pass. Also whether every timestamp was a whole multiple
    /// of 100 us, as a browser that coarsens them to thwart timing attacks gives them
    /// (Chromium does unless started with `--enable-webgpu-developer-features`).
    async fn dispatch_seconds_by_timestamps(&self, list: &[Dispatch], stamps: kernels::Stamps) -> Result<(Vec<f64>, bool)> {
        let ctx = &self.ctx;
        let count = if stamps == kernels::Stamps::Ends { 2 } else { list.len() as u32 + 1 };
        let bytes = u64::from(count) * wgpu::QUERY_SIZE as u64;
        let queries =
            ctx.device.create_query_set(&wgpu::QuerySetDescriptor { label: Some("profile"), ty: wgpu::QueryType::Timestamp, count });
        let buffer = |usage| {
            ctx.device.create_buffer(&wgpu::BufferDescriptor { label: Some("timestamps"), size: bytes, usage, mapped_at_creation: false })
        };
        let resolved = buffer(wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC);
        let readback = buffer(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("profile") });
        kernels::encode_timed(&mut encoder, list, self.profiled_step(), Some((&queries, stamps, ctx.info.timestamps)));
        encoder.resolve_query_set(&queries, 0..count, &resolved, 0);
        encoder.copy_buffer_to_buffer(&resolved, 0, &readback, 0, bytes);
        encoder.copy_buffer_to_buffer(&self.acts.logits, 0, &self.acts.staging, 0, (self.cfg.vocab_size * 4) as u64);
        ctx.queue.submit([encoder.finish()]);
        ctx.map_f32(&self.acts.staging, self.cfg.vocab_size, None).await?;
        // Each timestamp is a u64 of ticks, low word first.
        let words = ctx.map_f32(&readback, 2 * count as usize, None).await?;
        let ticks: Vec<u64> = words.chunks_exact(2).map(|w| u64::from(w[0].to_bits()) | (u64::from(w[1].to_bits()) << 32)).collect();
        let period = f64::from(ctx.queue.get_timestamp_period());
        let coarse = (period - 1.0).abs() < 1e-9 && ticks.iter().all(|&t| t % 100_000 == 0);
        Ok((ticks.windows(2).map(|t| t[1].saturating_sub(t[0]) as f64 * period / 1e9).collect(), coarse))
    }

    /// The time of each of `list`'s dispatches, each submitted and awaited alone, less an
    /// empty submit's time (natively; a browser has no blocking wait).
    #[cfg(not(target_arch = "wasm32"))]
    fn dispatch_seconds_alone(&self, list: &[Dispatch]) -> Result<Vec<f64>> {
        use web_time::Instant;
        let wait = |ctx: &super::GpuContext, encoder: wgpu::CommandEncoder| -> Result<f64> {
            let t = Instant::now();
            ctx.queue.submit([encoder.finish()]);
            ctx.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| Error::GpuLost(format!("poll failed: {e}")))?;
            Ok(t.elapsed().as_secs_f64())
        };
        let new_encoder =
            |ctx: &super::GpuContext| ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("profile") });
        wait(&self.ctx, new_encoder(&self.ctx))?; // flush the writes
        let mut empty = f64::INFINITY;
        for _ in 0..20 {
            empty = empty.min(wait(&self.ctx, new_encoder(&self.ctx))?);
        }
        let mut seconds = Vec::with_capacity(list.len());
        for d in list {
            let mut encoder = new_encoder(&self.ctx);
            kernels::encode(&mut encoder, std::slice::from_ref(d), self.profiled_step());
            seconds.push((wait(&self.ctx, encoder)? - empty).max(0.0));
        }
        Ok(seconds)
    }

    /// In a browser there is no timing a kernel without timestamp queries.
    #[cfg(target_arch = "wasm32")]
    fn dispatch_seconds_alone(&self, _list: &[Dispatch]) -> Result<Vec<f64>> {
        Err(Error::Backend(format!(
            "cannot time kernels on {}: its WebGPU adapter has no timestamp queries (the feature timestamp-query)",
            self.ctx.info.name
        )))
    }
}
