//! A decode step that shows its inside on the GPU, and the logit lens. Asked for, the step
//! runs the ordinary decode dispatches layer by layer, each layer followed by the
//! attention-weights kernel (its queries and keys are still in place) and a copy of the
//! residual stream (in a mixture of experts, of the token's picks too); the weights `[layers,
//! heads, positions]`, residuals `[layers, dim]` and picks `[layers, used, 2]` come back in
//! one small readback beside the logits. The buffers, the pipeline and the
//! per-layer dispatches are made the first time a step is inspected: an ordinary step runs
//! exactly as before and pays nothing. The lens puts residual rows through the decode step's
//! own final-norm-and-LM-head dispatches, one row after another in one submit, so the last
//! layer's row gives the step's logits bit for bit.

use super::forward::Op;
use super::kernels::{self, Dispatch, StepParams};
use super::model::GpuBackend;
use crate::backend::{Batching, ExpertPick, Inspection};
use crate::error::{Error, Result};

/// An inspecting step's buffers and its attention-weights dispatches, one per layer.
pub struct Inspector {
    /// `[layers, n_heads, positions]` for the longest context (the kernel's `out`).
    weights: wgpu::Buffer,
    /// The residual stream after each layer, `[layers, dim]`.
    residuals: wgpu::Buffer,
    /// A mixture of experts' picks after each layer, `[layers, used, 2]` u32 (expert,
    /// weight bits; one word without experts).
    picks: wgpu::Buffer,
    /// All read back: the weights the step wrote, the residuals, then the picks.
    staging: wgpu::Buffer,
    /// Layer l's attention-weights dispatch (none for a convolving layer).
    dispatches: Vec<Option<Dispatch>>,
}

impl GpuBackend {
    /// The inspector, made on first use.
    fn inspector(&mut self) -> Result<&Inspector> {
        if self.inspector.is_none() {
            let (layers, dim) = (self.layer_ends.len(), self.cfg.dim);
            let weight_floats = layers * self.cfg.n_heads * self.capacity;
            let weights = self.ctx.storage("attention weights", &vec![0f32; weight_floats]);
            let residuals = self.ctx.storage("residuals", &vec![0f32; layers * dim]);
            let pick_words = layers * self.cfg.experts.as_ref().map_or(0, |e| 2 * e.used);
            let picks = self.ctx.storage("inspected picks", &vec![0u32; pick_words.max(1)]);
            let staging = self.ctx.staging("inspection readback", ((weight_floats + layers * dim + pick_words) * 4) as u64);
            // None for a convolving layer (LFM2's), whose weights stay zeros.
            let dispatches = (0..layers)
                .map(|l| {
                    let Some(keys) = &self.key_caches[l] else { return Ok(None) };
                    let out = kernels::whole(&weights);
                    let (shape, scope, q, step) = (self.att_shape, self.scopes[l], &self.acts.q, &self.acts.step);
                    self.kernels.attention_weights(&self.ctx, shape, l as u32, scope, q, keys, out, step).map(Some)
                })
                .collect::<Result<Vec<_>>>()?;
            self.inspector = Some(Inspector { weights, residuals, picks, staging, dispatches });
        }
        self.inspector.as_ref().ok_or_else(|| Error::Backend("no inspector".into()))
    }

    /// Appends `token` (one token, checked by [`crate::backend::Backend::forward`]) through the
    /// kernels `batching` names: a decode step's, or a prefill pass's (the LM head on the last
    /// token, or on every token as a verify pass) as a token of a longer pass runs; returns its
    /// logits and its inspection. One submit; the position moves only on success.
    pub(super) async fn run_inspecting(&mut self, token: u32, batching: Batching) -> Result<(Vec<f32>, Inspection)> {
        self.ctx.check()?;
        if token as usize >= self.cfg.vocab_size {
            return Err(Error::Backend(format!("token id {token} is outside the vocabulary of {}", self.cfg.vocab_size)));
        }
        let scopes = self.ctx.error_scopes();
        self.inspector()?;
        let inspector = self.inspector.as_ref().ok_or_else(|| Error::Backend("no inspector".into()))?;
        let (layers, dim, heads, vocab) = (self.layer_ends.len(), self.cfg.dim, self.cfg.n_heads, self.cfg.vocab_size);
        let used = self.cfg.experts.as_ref().map_or(0, |e| e.used);
        let positions = self.pos + 1;
        self.ctx.queue.write_buffer(&self.acts.tokens, 0, bytemuck::cast_slice(&[token]));
        let step = StepParams::new(self.pos as u32, 1);
        self.ctx.queue.write_buffer(&self.acts.step, 0, bytemuck::bytes_of(&step));
        let batched = batching != Batching::Natural;
        // The form of attention the step's own pass took (a batched one runs the many-token
        // lists).
        let short = self.kernel_options().short_attention(self.pos, 1, batched);
        fn pick(op: &Op, batched: bool, short: bool) -> &[Dispatch] {
            match (batched, short) {
                (false, true) => &op.one_short,
                (false, false) => &op.one_long,
                (true, true) => &op.many_short,
                (true, false) => &op.many_long,
            }
        }
        let one = |ops: &[Op]| -> Vec<Dispatch> { ops.iter().flat_map(|op| pick(op, batched, short)).cloned().collect() };
        let mut encoder = self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("inspect") });
        let mut start = 0;
        for (l, &end) in self.layer_ends.iter().enumerate() {
            // The embedding lookup goes with the first layer.
            let mut list = one(&self.ops[start..end]);
            list.extend(inspector.dispatches[l].clone());
            kernels::encode(&mut encoder, &list, step);
            encoder.copy_buffer_to_buffer(&self.acts.x, 0, &inspector.residuals, (l * dim * 4) as u64, (dim * 4) as u64);
            if used > 0 {
                // The step's one token's picks, row 0 of the layer's.
                encoder.copy_buffer_to_buffer(&self.acts.picks, 0, &inspector.picks, (l * 2 * used * 4) as u64, (2 * used * 4) as u64);
            }
            start = end;
        }
        let head = if batching == Batching::Verify { std::slice::from_ref(&self.verify_head) } else { &self.ops[start..] };
        kernels::encode(&mut encoder, &one(head), step);
        let weight_floats = layers * heads * positions;
        encoder.copy_buffer_to_buffer(&self.acts.logits, 0, &self.acts.staging, 0, (vocab * 4) as u64);
        encoder.copy_buffer_to_buffer(&inspector.weights, 0, &inspector.staging, 0, (weight_floats * 4) as u64);
        encoder.copy_buffer_to_buffer(&inspector.residuals, 0, &inspector.staging, (weight_floats * 4) as u64, (layers * dim * 4) as u64);
        let pick_words = layers * 2 * used;
        if used > 0 {
            let at = ((weight_floats + layers * dim) * 4) as u64;
            encoder.copy_buffer_to_buffer(&inspector.picks, 0, &inspector.staging, at, (pick_words * 4) as u64);
        }
        self.ctx.queue.submit([encoder.finish()]);
        scopes.finish("an inspecting step").await?;
        let logits = self.ctx.map_f32(&self.acts.staging, vocab, None).await?;
        let mut read = self.ctx.map_f32(&inspector.staging, weight_floats + layers * dim + pick_words, None).await?;
        let picks = read.split_off(weight_floats + layers * dim);
        let residuals = read.split_off(weight_floats);
        // Each pick's expert and weight, as the pick kernel wrote their bits.
        let experts = picks
            .chunks_exact(2 * used.max(1))
            .map(|layer| layer.chunks_exact(2).map(|p| ExpertPick { expert: p[0].to_bits(), weight: p[1] }).collect())
            .collect();
        let inspection = Inspection { attention: read, residuals, experts, ..Inspection::new(&self.cfg, layers, positions) };
        self.pos += 1;
        Ok((logits, inspection))
    }

    /// The logit lens: each `[dim]` row of `residuals` through the decode step's final norm and
    /// LM head dispatches (copied into the residual stream's row 0 in turn), `[rows, vocab]`.
    pub(super) async fn lens_rows(&mut self, residuals: &[f32]) -> Result<Vec<f32>> {
        self.ctx.check()?;
        let (dim, vocab) = (self.cfg.dim, self.cfg.vocab_size);
        if residuals.is_empty() || !residuals.len().is_multiple_of(dim) {
            return Err(Error::InvalidParams(format!("the logit lens takes rows of {dim} values, got {}", residuals.len())));
        }
        let rows = residuals.len() / dim;
        let scopes = self.ctx.error_scopes();
        let input = self.ctx.storage("lens input", residuals);
        let output = self.ctx.staging("lens readback", (rows * vocab * 4) as u64);
        let head: Vec<Dispatch> = self.ops.last().map(|op| op.one_short.clone()).unwrap_or_default();
        let step = StepParams::new(self.pos as u32, 1);
        self.ctx.queue.write_buffer(&self.acts.step, 0, bytemuck::bytes_of(&step));
        let mut encoder = self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("lens") });
        for r in 0..rows {
            encoder.copy_buffer_to_buffer(&input, (r * dim * 4) as u64, &self.acts.x, 0, (dim * 4) as u64);
            kernels::encode(&mut encoder, &head, step);
            encoder.copy_buffer_to_buffer(&self.acts.logits, 0, &output, (r * vocab * 4) as u64, (vocab * 4) as u64);
        }
        self.ctx.queue.submit([encoder.finish()]);
        scopes.finish("the logit lens").await?;
        self.ctx.map_f32(&output, rows * vocab, None).await
    }
}
