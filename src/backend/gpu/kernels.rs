//! Compute pipelines for the WGSL kernels in `shaders/` (built once per device), bind-group
//! helpers, and one-shot runners used by the kernel tests.

use super::device::GpuContext;
use super::repack::Repacked;

/// Every kernel's source, by file name; compiled natively by naga and in Chromium by Tint.
pub const SHADERS: [(&str, &str); 6] = [
    ("rmsnorm.wgsl", include_str!("../../../shaders/rmsnorm.wgsl")),
    ("matvec_q4_1.wgsl", include_str!("../../../shaders/matvec_q4_1.wgsl")),
    ("matvec_q8_0.wgsl", include_str!("../../../shaders/matvec_q8_0.wgsl")),
    ("rope.wgsl", include_str!("../../../shaders/rope.wgsl")),
    ("attention_decode.wgsl", include_str!("../../../shaders/attention_decode.wgsl")),
    ("swiglu.wgsl", include_str!("../../../shaders/swiglu.wgsl")),
];

/// Threads per workgroup (the shaders' `WG` override).
pub const WORKGROUP: u32 = 64;

/// Most positions the decode attention kernel holds in workgroup memory.
pub const MAX_ATTENTION_POSITIONS: usize = 3072;

/// The compiled pipelines.
pub struct Kernels {
    /// RMSNorm of rows.
    pub rmsnorm: wgpu::ComputePipeline,
    /// Matrix-vector, Q4_1 weights.
    pub matvec_q4_1: wgpu::ComputePipeline,
    /// Matrix-vector, Q8_0 weights.
    pub matvec_q8_0: wgpu::ComputePipeline,
    /// Rotary embedding in place.
    pub rope: wgpu::ComputePipeline,
    /// Decode attention, one workgroup per head.
    pub attention: wgpu::ComputePipeline,
    /// SwiGLU in place.
    pub swiglu: wgpu::ComputePipeline,
}

fn pipeline(ctx: &GpuContext, name: &str, source: &str) -> wgpu::ComputePipeline {
    let module = ctx.device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(name),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    ctx.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(name),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: wgpu::PipelineCompilationOptions {
            constants: &[("WG", WORKGROUP as f64)],
            zero_initialize_workgroup_memory: false,
        },
        cache: None,
    })
}

impl Kernels {
    /// Compiles every kernel.
    pub fn new(ctx: &GpuContext) -> Self {
        let p = |i: usize| pipeline(ctx, SHADERS[i].0, SHADERS[i].1);
        Kernels { rmsnorm: p(0), matvec_q4_1: p(1), matvec_q8_0: p(2), rope: p(3), attention: p(4), swiglu: p(5) }
    }

    /// The matvec pipeline for a repacked matrix.
    pub fn matvec(&self, w: &GpuMatrix) -> &wgpu::ComputePipeline {
        if w.q4_1 {
            &self.matvec_q4_1
        } else {
            &self.matvec_q8_0
        }
    }
}

/// A weight matrix on the GPU: quants and scales in their own buffers.
pub struct GpuMatrix {
    /// Quant words.
    pub qs: wgpu::Buffer,
    /// Scales (Q4_1: packed d and m; Q8_0: f32 d).
    pub scales: wgpu::Buffer,
    /// Q4_1 (else Q8_0).
    pub q4_1: bool,
    /// Output features.
    pub rows: u32,
    /// Input features.
    pub cols: u32,
}

impl GpuMatrix {
    /// Uploads a repacked matrix.
    pub fn upload(ctx: &GpuContext, w: &Repacked, rows: u32, cols: u32) -> Self {
        match w {
            Repacked::Q4_1 { dm, qs } => GpuMatrix { qs: ctx.storage("qs", qs), scales: ctx.storage("dm", dm), q4_1: true, rows, cols },
            Repacked::Q8_0 { d, qs } => GpuMatrix { qs: ctx.storage("qs", qs), scales: ctx.storage("d", d), q4_1: false, rows, cols },
        }
    }

    /// Bytes of weight data the kernel reads per use.
    pub fn bytes(&self) -> u64 {
        self.qs.size() + self.scales.size()
    }
}

/// One dispatch ready to encode: pipeline, bind group, workgroup count.
pub struct Dispatch {
    /// Index into the kernel set (for the pipeline).
    pub pipeline: wgpu::ComputePipeline,
    /// Bindings.
    pub group: wgpu::BindGroup,
    /// Workgroups along x.
    pub groups: u32,
}

/// A binding: a whole buffer, or `size` bytes from `offset`.
pub struct Bind<'a>(pub &'a wgpu::Buffer, pub u64, pub Option<u64>);

/// Builds a dispatch (its bind group is created here, once).
pub fn prepare(ctx: &GpuContext, pipeline: &wgpu::ComputePipeline, binds: &[Bind], groups: u32) -> Dispatch {
    let layout = pipeline.get_bind_group_layout(0);
    let entries: Vec<wgpu::BindGroupEntry> = binds
        .iter()
        .enumerate()
        .map(|(i, b)| wgpu::BindGroupEntry {
            binding: i as u32,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer: b.0, offset: b.1, size: b.2.and_then(wgpu::BufferSize::new) }),
        })
        .collect();
    let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &layout, entries: &entries });
    Dispatch { pipeline: pipeline.clone(), group, groups }
}

/// Encodes dispatches into one compute pass.
pub fn encode(encoder: &mut wgpu::CommandEncoder, dispatches: &[Dispatch]) {
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("forward"), timestamp_writes: None });
    for d in dispatches {
        pass.set_pipeline(&d.pipeline);
        pass.set_bind_group(0, &d.group, &[]);
        pass.dispatch_workgroups(d.groups, 1, 1);
    }
}

/// Submits one dispatch on its own (for the kernel tests).
pub fn run_once(ctx: &GpuContext, d: Dispatch) {
    let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    encode(&mut encoder, &[d]);
    ctx.queue.submit([encoder.finish()]);
}

/// Matvec uniform: rows, cols, accumulate flag, output stride per position.
pub fn matvec_params(ctx: &GpuContext, w: &GpuMatrix, accumulate: bool, out_stride: u32) -> wgpu::Buffer {
    ctx.uniform("matvec", &[w.rows, w.cols, accumulate as u32, out_stride])
}

/// The per-step uniform every position-dependent kernel reads: `[pos, n_pos, 0, 0]`.
pub fn step_uniform(ctx: &GpuContext, pos: u32) -> wgpu::Buffer {
    ctx.uniform("step", &[pos, pos + 1, 0, 0])
}

/// cos/sin of every RoPE angle, `[context, head_dim / 2, 2]`, computed in f64.
pub fn rope_table(context: usize, head_dim: usize, base: f32) -> Vec<f32> {
    let mut t = Vec::with_capacity(context * head_dim);
    for pos in 0..context {
        for i in 0..head_dim / 2 {
            let theta = pos as f64 * (base as f64).powf(-2.0 * i as f64 / head_dim as f64);
            t.push(theta.cos() as f32);
            t.push(theta.sin() as f32);
        }
    }
    t
}

/// Workgroups to cover `n` items with one thread each.
pub fn groups_for(n: u32) -> u32 {
    n.div_ceil(WORKGROUP)
}
