//! One pass on the GPU: its inputs written, its commands encoded (the next decode step's
//! while the GPU runs this one), one submit, its logits read back; and the greedy run-ahead,
//! which submits the next decode steps on the GPU's own argmax before the logits are back.
//! A decode step's commands depend only on its position (its token and position reach the
//! kernels through buffers written before the submit), so each decode step encodes the next
//! one's while the GPU runs it: the CPU's share of a step (a few us a dispatch) overlaps the
//! GPU's. A greedy caller ([`crate::backend::Pass::run_ahead`]) has each pass rank its logits
//! on the GPU (argmax.wgsl) and submit the next decode step on that token before the logits
//! are read back, so the GPU does not wait for the readback, the sampler and the caller
//! between steps; the next pass takes that step as run when its token is the one ranked
//! first, and drops it otherwise. It keeps 1 step submitted ahead by default, up to
//! [`MAX_RUN_AHEAD`] where a readback's round trip is long
//! ([`GpuBackend::set_run_ahead_steps`]): each ahead step runs on the argmax of the one before
//! it, all on the GPU.

use super::forward::Lowered;
use super::kernels;
use super::model::GpuBackend;
use crate::error::{Error, Result};

/// Most decode steps a greedy run-ahead can keep submitted ahead of the caller
/// ([`GpuBackend::set_run_ahead_steps`]).
pub const MAX_RUN_AHEAD: usize = 3;

/// Decode steps a greedy run-ahead keeps submitted ahead by default.
pub const RUN_AHEAD_STEPS: usize = 1;

/// Checks a count of decode steps to keep submitted ahead: 1 to [`MAX_RUN_AHEAD`].
pub fn check_run_ahead_steps(steps: usize) -> Result<()> {
    if (1..=MAX_RUN_AHEAD).contains(&steps) {
        Ok(())
    } else {
        Err(Error::InvalidParams(format!("run-ahead steps must be 1 to {MAX_RUN_AHEAD}, not {steps}")))
    }
}

/// A decode step a greedy run-ahead submitted before its token was chosen.
pub(super) struct Ahead {
    /// Its position.
    pub(super) pos: usize,
    /// Its token: the GPU's argmax of the pass before, known once that pass's logits (and the
    /// id after them) were read back (until then `None`).
    pub(super) token: Option<u32>,
    /// Its submission, to wait for.
    pub(super) submission: wgpu::SubmissionIndex,
}

/// How a run-ahead fared since load ([`GpuBackend::run_ahead_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct RunAheadCounts {
    /// Steps a later pass took as run: the caller chose the token the GPU ranked first.
    pub taken: usize,
    /// Steps dropped: the caller chose another token (a tie the sampler broke otherwise, a
    /// forced token, a draw other than the argmax), truncated the cache, or ran another kind
    /// of pass there.
    pub dropped: usize,
}

/// Which step a command buffer encodes: its position, and whether it ranks its logits for a
/// run-ahead (then it also runs the argmax and reads back into [`readback_slot`]'s buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Encoded {
    pos: usize,
    ranked: bool,
}

/// Which readback buffer a step that ends before position `end` (its last token's position
/// plus one) copies its logits into: 0, `staging`, for every step that does not rank its
/// logits; a ranked one takes `end` modulo [`MAX_RUN_AHEAD`] + 1 (0: `staging`, `i`:
/// `staging_ahead[i - 1]`), so the step being read back and the at most [`MAX_RUN_AHEAD`]
/// submitted after it, at the positions right after it, never share a buffer. (Steps a run
/// dropped may still be queued with other positions, but before the step read, so their copies
/// land first.)
pub(super) fn readback_slot(end: usize, ranked: bool) -> usize {
    if ranked {
        end % (MAX_RUN_AHEAD + 1)
    } else {
        0
    }
}

impl GpuBackend {
    /// Runs `tokens` (at most [`PREFILL_BATCH`](super::activations::PREFILL_BATCH), within the context: [`Backend::forward`](crate::backend::Backend::forward)
    /// checked) at the current position in one pass and one submit, with the command lists
    /// `lists` names, and reads back the first `read` rows of logits (0: no readback).
    ///
    /// With `run_ahead` > 0 (a greedy caller, [`crate::backend::Pass::run_ahead`]: the steps it
    /// will most likely ask for after this one; a pass through every layer whose last logits
    /// are read) the pass also ranks its logits on the GPU (argmax.wgsl, into `tokens[0]`), and
    /// the next decode steps, up to `run_ahead` and the backend's own limit, are submitted at
    /// once, each on the argmax of the one before, before this pass's logits are read back: the
    /// GPU runs them while the caller reads, samples and asks. A one-token pass of the first
    /// one's very token at its position then takes it as run (its commands are in the queue
    /// already; only its readback is awaited); any other pass drops them all, and the queue's
    /// order makes their writes harmless (the next step at a position writes the same cache
    /// row again; a readback waits for its own submit).
    pub(super) async fn run(&mut self, tokens: &[u32], lists: Lists, read: usize, run_ahead: usize) -> Result<Option<(Vec<f32>, bool)>> {
        self.ctx.check()?;
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
            return Err(Error::Backend(format!("token id {bad} is outside the vocabulary of {}", self.cfg.vocab_size)));
        }
        let n = tokens.len() as u32;
        let decode = matches!(lists, Lists::Forward) && n == 1 && read == 1;
        let run_ahead = if matches!(lists, Lists::Forward) && read == 1 { run_ahead.min(self.run_ahead_steps) } else { 0 };
        let vocab = self.cfg.vocab_size;
        let floats = read * vocab;
        let taken = match self.ahead.pop_front() {
            Some(a) if decode && a.pos == self.pos && a.token == Some(tokens[0]) => Some(a),
            Some(_) => {
                self.drop_ahead(1);
                None
            }
            None => None,
        };
        let ran_ahead = taken.is_some();
        // A step taken as run ranked its logits (it was encoded to); a fresh one does if asked.
        let ranked = ran_ahead || run_ahead > 0;
        let end = self.pos + tokens.len();
        let submission = match taken {
            Some(a) => {
                self.ahead_counts.taken += 1;
                a.submission
            }
            None => {
                // The buffers the commands read are written first: queue writes come before
                // any later submit, whenever its commands were encoded.
                self.ctx.queue.write_buffer(&self.acts.tokens, 0, bytemuck::cast_slice(tokens));
                self.ctx.queue.write_buffer(&self.acts.step, 0, bytemuck::bytes_of(&kernels::StepParams::new(self.pos as u32, n)));
                let key = Encoded { pos: self.pos, ranked };
                // Commands encoded ahead for another step stay for it (a step's commands
                // depend only on its position and whether it ranks).
                let commands = match self.next_decode.take() {
                    Some((encoded, commands)) if decode && encoded == key => commands,
                    other => {
                        self.next_decode = other;
                        let list = match lists {
                            Lists::Forward if n == 1 => &self.decode,
                            Lists::Forward => &self.prefill,
                            Lists::Verify => &self.verify,
                            Lists::Draft => &self.draft.as_ref().ok_or_else(|| Error::Backend("no self-draft prepared".into()))?.1,
                        };
                        let (commands, seconds) = self.encode_step(list, self.pos, n, floats, ranked);
                        if decode {
                            self.count_encoding(seconds);
                        }
                        commands
                    }
                };
                self.ctx.queue.submit([commands])
            }
        };
        self.pos = end;
        // The steps ahead, each on the argmax of the one before (this one's, then each ahead
        // step's own): a token reaches the embedding through `tokens`, which the step before's
        // argmax writes; each position is written after the submit before it (so that one
        // still reads its own). Steps already ahead (a taken step's followers) stay queued.
        let mut next = self.ahead.back().map_or(self.pos, |a| a.pos + 1);
        while self.ahead.len() < run_ahead && next < self.capacity {
            self.ctx.queue.write_buffer(&self.acts.step, 0, bytemuck::bytes_of(&kernels::StepParams::new(next as u32, 1)));
            let key = Encoded { pos: next, ranked: true };
            let commands = match self.next_decode.take() {
                Some((encoded, commands)) if encoded == key => commands,
                _ => {
                    let (commands, seconds) = self.encode_step(&self.decode, next, 1, vocab, true);
                    self.count_encoding(seconds);
                    commands
                }
            };
            let submission = self.ctx.queue.submit([commands]);
            self.ahead.push_back(Ahead { pos: next, token: None, submission });
            next += 1;
        }
        // A decode step is most often followed by the next one: the commands of the next
        // submit are encoded now, while the GPU runs (before the readback's wait). Anything
        // else (a truncated cache, a prefill, a verify pass) runs its own and drops these
        // unsubmitted.
        if decode && self.encode_ahead && next < self.capacity {
            let ranked_next = run_ahead > 0;
            let (commands, seconds) = self.encode_step(&self.decode, next, 1, vocab, ranked_next);
            self.count_encoding(seconds);
            self.next_decode = Some((Encoded { pos: next, ranked: ranked_next }, commands));
        }
        if read == 0 {
            return Ok(None);
        }
        let buffer = self.readback(end, ranked);
        let mut logits = self.ctx.map_f32(buffer, floats + usize::from(ranked), Some(submission)).await?;
        if ranked {
            let token = logits.pop().map(f32::to_bits);
            // The step right after this one runs on that token.
            if let Some(a) = self.ahead.iter_mut().find(|a| a.pos == end) {
                a.token = token;
            }
        }
        Ok(Some((logits, ran_ahead)))
    }

    /// One step's commands for `n` tokens from position `pos` from `lists`, with the first
    /// `floats` logits copied to the readback buffer (0: none); `ranked`, the argmax of the
    /// logits' first row into `tokens[0]` after them, copied to the readback after the
    /// logits. Returns them and the CPU seconds encoding them took.
    fn encode_step(&self, lists: &Lowered, pos: usize, n: u32, floats: usize, ranked: bool) -> (wgpu::CommandBuffer, f64) {
        let start = web_time::Instant::now();
        let mut encoder = self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("forward") });
        let argmax = if ranked { std::slice::from_ref(&self.argmax) } else { &[] };
        kernels::encode_lists(&mut encoder, &[lists.pick(pos, n as usize), argmax], kernels::StepParams::new(pos as u32, n));
        let buffer = self.readback(pos + n as usize, ranked);
        if floats > 0 {
            encoder.copy_buffer_to_buffer(&self.acts.logits, 0, buffer, 0, (floats * 4) as u64);
        }
        if ranked {
            encoder.copy_buffer_to_buffer(&self.acts.tokens, 0, buffer, (floats * 4) as u64, 4);
        }
        (encoder.finish(), start.elapsed().as_secs_f64())
    }

    /// The readback buffer of a step ending before `end` ([`readback_slot`]).
    fn readback(&self, end: usize, ranked: bool) -> &wgpu::Buffer {
        match readback_slot(end, ranked) {
            0 => &self.acts.staging,
            i => &self.acts.staging_ahead[i - 1],
        }
    }

    /// Drops every step still submitted ahead, counting them with `already` more taken out of
    /// the queue (a later pass will not take them: their writes are harmless, see
    /// [`GpuBackend::run`]).
    pub(super) fn drop_ahead(&mut self, already: usize) {
        self.ahead_counts.dropped += already + self.ahead.len();
        self.ahead.clear();
    }

    /// Counts one decode step's encoding, `seconds` of the CPU.
    fn count_encoding(&mut self, seconds: f64) {
        self.encoding = (self.encoding.0 + seconds, self.encoding.1 + 1);
    }

    /// How a greedy run-ahead fared since load: steps taken as run and steps dropped.
    pub fn run_ahead_counts(&self) -> RunAheadCounts {
        self.ahead_counts
    }

    /// How many decode steps a greedy run-ahead keeps submitted ahead of the caller, 1 (the
    /// default, [`RUN_AHEAD_STEPS`]) to [`MAX_RUN_AHEAD`]: more hides a longer round trip of a
    /// readback (a browser's), at up to that many steps run for nothing when a run ends or
    /// takes another token.
    pub fn set_run_ahead_steps(&mut self, steps: usize) -> Result<()> {
        check_run_ahead_steps(steps)?;
        self.run_ahead_steps = steps;
        Ok(())
    }

    /// How many decode steps a greedy run-ahead keeps submitted ahead
    /// ([`GpuBackend::set_run_ahead_steps`]).
    pub fn run_ahead_steps(&self) -> usize {
        self.run_ahead_steps
    }

    /// Whether a decode step encodes the next one's commands while the GPU runs it (on by
    /// default; off, each step encodes its own before its submit: for measuring what encoding
    /// ahead saves, and for checking it changes nothing).
    pub fn set_encode_ahead(&mut self, on: bool) {
        self.encode_ahead = on;
        if !on {
            self.next_decode = None;
        }
    }

    /// Mean CPU seconds encoding a decode step's commands took since load (mostly while the
    /// step before ran on the GPU, see [`GpuBackend::run`]); None before the first.
    pub fn encode_seconds_per_step(&self) -> Option<f64> {
        let (seconds, steps) = self.encoding;
        (steps > 0).then(|| seconds / steps as f64)
    }
}

/// Which command lists a step runs.
#[derive(Clone, Copy)]
pub(super) enum Lists {
    /// The whole model, the last token's logits (decode for one token, prefill for more).
    Forward,
    /// The whole model, every token's logits.
    Verify,
    /// The self-draft's first layers, then the LM head.
    Draft,
}
