//! The forward pass on the GPU: every weight stays quantized on the device (Q4_0, Q4_1, Q8_0,
//! F16, F32, dequantized inside the matvec and embedding kernels), activations and the residual stream in f32, the
//! KV cache on the device. One decode step = one command encoder, one compute pass, one
//! submit, one readback of the logits; pipelines, bind groups and buffers are made at load.

use candle_core::quantized::QTensor;

use super::device::GpuContext;
use super::kernels::{self, Bind, Dispatch, GpuMatrix, Kernels};
use super::repack::repack;
use crate::backend::{Backend, BackendInfo};
use crate::error::{Error, Result};
use crate::model::{Config, Weights};

/// Counts of what one decode step does on the GPU.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StepShape {
    /// Kernel dispatches per decode step.
    pub dispatches: usize,
    /// Compute passes per decode step.
    pub passes: usize,
    /// Queue submits per decode step.
    pub submits: usize,
    /// Bytes read back per decode step (the logits).
    pub readback_bytes: usize,
    /// Bytes of GPU buffers in use (weights, KV cache, activations).
    pub gpu_bytes: u64,
}

/// The model on a GPU.
pub struct GpuBackend {
    ctx: GpuContext,
    cfg: Config,
    step: wgpu::Buffer,
    logits: wgpu::Buffer,
    staging: wgpu::Buffer,
    dispatches: Vec<Dispatch>,
    capacity: usize,
    pos: usize,
    gpu_bytes: u64,
    weight_bytes: u64,
    kv_bytes_per_token: usize,
}

fn matrix(ctx: &GpuContext, t: &QTensor, gpu_bytes: &mut u64) -> Result<GpuMatrix> {
    let (rows, cols) = t.shape().dims2().map_err(Error::backend)?;
    let m = GpuMatrix::upload(ctx, &repack(t)?, rows as u32, cols as u32)?;
    *gpu_bytes += m.bytes();
    Ok(m)
}

impl GpuBackend {
    /// Uploads the weights and prepares every dispatch of a decode step. `context_len` caps
    /// the KV cache (default 2048, at most the model's window).
    pub async fn new(cfg: &Config, weights: Weights, context_len: Option<usize>) -> Result<Self> {
        let ctx = GpuContext::new().await?;
        let scopes = ctx.error_scopes();
        let k = Kernels::new(&ctx);
        let capacity = context_len.unwrap_or(2048).min(cfg.context_len).max(1);
        let (d, hd, kv, qd, f) = (cfg.dim as u32, cfg.head_dim as u32, cfg.kv_dim() as u32, (cfg.n_heads * cfg.head_dim) as u32, cfg.ffn_dim as u32);
        let mut gpu_bytes = 0u64;
        let mut weight_bytes = 0u64;
        let mut buf = |label: &str, n: usize| {
            gpu_bytes += (n * 4) as u64;
            ctx.storage(label, &vec![0f32; n])
        };
        let x = buf("x", cfg.dim); //                 residual stream [dim]
        let xb = buf("xb", cfg.dim); //               normed input    [dim]
        let q = buf("q", qd as usize); //             query           [n_heads * hd]
        let att = buf("att", qd as usize); //         attention out   [n_heads * hd]
        let att_shape = [cfg.n_heads as u32, cfg.n_kv_heads as u32, hd];
        // split-K attention's chunk statistics      [n_heads, ceil(ctx / 256), 2 + hd]
        let att_parts = buf("attention parts", kernels::attention_parts_len(att_shape, capacity));
        let gate = buf("gate", cfg.ffn_dim); //       SwiGLU gate     [ffn]
        let up = buf("up", cfg.ffn_dim); //           SwiGLU up       [ffn]
        let logits = buf("logits", cfg.vocab_size); // logits         [vocab]
        let table = ctx.storage("rope", &kernels::rope_table(capacity, cfg.head_dim, cfg.rope_base));
        gpu_bytes += table.size();
        let step = kernels::step_uniform(&ctx, 0, 0);
        let staging = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("logits readback"),
            size: (cfg.vocab_size * 4) as u64,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let norm_params = ctx.uniform("rmsnorm", &[d, 1, cfg.rms_eps.to_bits(), 0]);
        let rope_q = ctx.uniform("rope q", &[cfg.n_heads as u32, hd, 0, 0]);
        let rope_k = ctx.uniform("rope k", &[cfg.n_kv_heads as u32, hd, kv, 0]);
        let swiglu_params = ctx.uniform("swiglu", &[f, 0, 0, 0]);

        // Buffers made below live on through the bind groups that reference them.
        let mut dispatches = Vec::new();
        let embedding_at = dispatches.len();
        for l in weights.layers {
            let attn_norm = ctx.storage("attn_norm", &l.attn_norm);
            let ffn_norm = ctx.storage("ffn_norm", &l.ffn_norm);
            let (wq, wk, wv, wo) = (matrix(&ctx, &l.wq, &mut weight_bytes)?, matrix(&ctx, &l.wk, &mut weight_bytes)?, matrix(&ctx, &l.wv, &mut weight_bytes)?, matrix(&ctx, &l.wo, &mut weight_bytes)?);
            let (wg, wu, wd) = (matrix(&ctx, &l.w_gate, &mut weight_bytes)?, matrix(&ctx, &l.w_up, &mut weight_bytes)?, matrix(&ctx, &l.w_down, &mut weight_bytes)?);
            let k_cache = ctx.storage("k cache", &vec![0f32; capacity * kv as usize]); // [ctx, kv]
            let v_cache = ctx.storage("v cache", &vec![0f32; capacity * kv as usize]); // [ctx, kv]
            gpu_bytes += 2 * (capacity * kv as usize * 4) as u64;
            let mv = |w: &GpuMatrix, input: &wgpu::Buffer, out: &wgpu::Buffer, acc: bool, stride: u32| k.matvec(&ctx, w, input, Bind(out, 0, None), acc, stride, &step);
            // Attention: xb = norm(x); q = Wq xb; K/V cache[pos] = Wk xb, Wv xb; rope; attend; x += Wo att.
            dispatches.push(kernels::prepare(&ctx, &k.rmsnorm, &[Bind(&norm_params, 0, None), Bind(&x, 0, None), Bind(&attn_norm, 0, None), Bind(&xb, 0, None)], 1));
            dispatches.push(mv(&wq, &xb, &q, false, 0)?);
            dispatches.push(mv(&wk, &xb, &k_cache, false, kv)?);
            dispatches.push(mv(&wv, &xb, &v_cache, false, kv)?);
            dispatches.push(kernels::prepare(&ctx, &k.rope, &[Bind(&rope_q, 0, None), Bind(&q, 0, None), Bind(&table, 0, None), Bind(&step, 0, None)], kernels::groups_for(qd / 2)));
            dispatches.push(kernels::prepare(&ctx, &k.rope, &[Bind(&rope_k, 0, None), Bind(&k_cache, 0, None), Bind(&table, 0, None), Bind(&step, 0, None)], kernels::groups_for(kv / 2)));
            let attention = k.attention(&ctx, att_shape, capacity, &q, &k_cache, &v_cache, Bind(&att_parts, 0, None), Bind(&att, 0, None), &step);
            dispatches.extend([attention.partial, attention.combine]);
            dispatches.push(mv(&wo, &att, &x, true, 0)?);
            // Feed-forward: xb = norm(x); gate = silu(Wg xb) * (Wu xb); x += Wd gate.
            dispatches.push(kernels::prepare(&ctx, &k.rmsnorm, &[Bind(&norm_params, 0, None), Bind(&x, 0, None), Bind(&ffn_norm, 0, None), Bind(&xb, 0, None)], 1));
            dispatches.push(mv(&wg, &xb, &gate, false, 0)?);
            dispatches.push(mv(&wu, &xb, &up, false, 0)?);
            dispatches.push(kernels::prepare(&ctx, &k.swiglu, &[Bind(&swiglu_params, 0, None), Bind(&gate, 0, None), Bind(&up, 0, None)], kernels::groups_for(f)));
            dispatches.push(mv(&wd, &gate, &x, true, 0)?);
        }
        let out_norm = ctx.storage("output_norm", &weights.output_norm);
        // Tied embeddings (no output.weight): one table serves the lookup and the LM head.
        let embd = matrix(&ctx, &weights.token_embd, &mut weight_bytes)?;
        let head = match &weights.output {
            Some(w) => Some(matrix(&ctx, w, &mut weight_bytes)?),
            None => None,
        };
        let head = head.as_ref().unwrap_or(&embd);
        gpu_bytes += weight_bytes;
        // x = embedding row of the step's token, before everything else.
        dispatches.insert(embedding_at, k.embedding(&ctx, &embd, Bind(&x, 0, None), &step));
        dispatches.push(kernels::prepare(&ctx, &k.rmsnorm, &[Bind(&norm_params, 0, None), Bind(&x, 0, None), Bind(&out_norm, 0, None), Bind(&xb, 0, None)], 1));
        dispatches.push(k.matvec(&ctx, head, &xb, Bind(&logits, 0, None), false, 0, &step)?);
        scopes.finish("loading the model onto the GPU").await?;
        ctx.check()?;
        Ok(GpuBackend {
            kv_bytes_per_token: cfg.kv_bytes_per_token(),
            ctx,
            cfg: cfg.clone(),
            step,
            logits,
            staging,
            dispatches,
            capacity,
            pos: 0,
            gpu_bytes,
            weight_bytes,
        })
    }

    /// What one decode step costs in GPU work and traffic.
    pub fn step_shape(&self) -> StepShape {
        StepShape { dispatches: self.dispatches.len(), passes: 1, submits: 1, readback_bytes: self.cfg.vocab_size * 4, gpu_bytes: self.gpu_bytes }
    }

    /// Bytes of weights the kernels read per decode step.
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    /// Adapter details.
    pub fn gpu_info(&self) -> &super::GpuInfo {
        &self.ctx.info
    }

    /// Runs one token at the current position; reads the logits back when `read` is set.
    async fn run_token(&mut self, token: u32, read: bool) -> Result<Option<Vec<f32>>> {
        self.ctx.check()?;
        if token as usize >= self.cfg.vocab_size {
            return Err(Error::Backend(format!("token id {token} is outside the vocabulary of {}", self.cfg.vocab_size)));
        }
        if self.pos >= self.capacity {
            return Err(Error::Backend(format!("the context is full: all {} positions are used", self.capacity)));
        }
        self.ctx.queue.write_buffer(&self.step, 0, bytemuck::cast_slice(&kernels::step_words(self.pos as u32, token)));
        let mut encoder = self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("decode step") });
        kernels::encode(&mut encoder, &self.dispatches);
        if read {
            encoder.copy_buffer_to_buffer(&self.logits, 0, &self.staging, 0, self.staging.size());
        }
        self.ctx.queue.submit([encoder.finish()]);
        self.pos += 1;
        if !read {
            return Ok(None);
        }
        Ok(Some(self.ctx.map_f32(&self.staging).await?))
    }
}

impl Backend for GpuBackend {
    async fn prefill(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let Some((&last, rest)) = tokens.split_last() else {
            return Err(Error::Backend("nothing to run: no tokens".into()));
        };
        if self.pos + tokens.len() > self.capacity {
            return Err(Error::Backend(format!("the context is full: {} + {} tokens exceed its {} positions", self.pos, tokens.len(), self.capacity)));
        }
        for &t in rest {
            self.run_token(t, false).await?;
        }
        self.run_token(last, true).await?.ok_or_else(|| Error::Backend("no logits".into()))
    }

    async fn decode(&mut self, token: u32) -> Result<Vec<f32>> {
        self.run_token(token, true).await?.ok_or_else(|| Error::Backend("no logits".into()))
    }

    fn truncate(&mut self, len: usize) {
        // Positions past `len` are simply overwritten by later steps.
        self.pos = self.pos.min(len);
    }

    fn position(&self) -> usize {
        self.pos
    }

    fn context_len(&self) -> usize {
        self.capacity
    }

    fn kv_cache_bytes(&self) -> usize {
        self.pos * self.kv_bytes_per_token
    }

    fn info(&self) -> BackendInfo {
        BackendInfo { name: "gpu".into(), device: format!("{} ({})", self.ctx.info.name, self.ctx.info.backend), software: self.ctx.info.software }
    }
}
