//! Compute pipelines for the WGSL kernels in `shaders/` and one-shot dispatch helpers that
//! the tests (and, later, the forward pass) use.

use super::device::GpuContext;
use super::repack::Repacked;
use crate::error::Result;

/// Every kernel's source, by file name; compiled natively by naga and in Chromium by Tint.
pub const SHADERS: [(&str, &str); 3] = [
    ("rmsnorm.wgsl", include_str!("../../../shaders/rmsnorm.wgsl")),
    ("matvec_q4_1.wgsl", include_str!("../../../shaders/matvec_q4_1.wgsl")),
    ("matvec_q8_0.wgsl", include_str!("../../../shaders/matvec_q8_0.wgsl")),
];

/// Threads per workgroup (the shaders' `WG` override).
pub const WORKGROUP: u32 = 64;

fn source(name: &str) -> &'static str {
    SHADERS.iter().find(|(n, _)| *n == name).map(|(_, s)| *s).unwrap_or("")
}

/// A compute pipeline built from one shader file.
pub fn pipeline(ctx: &GpuContext, name: &str) -> wgpu::ComputePipeline {
    let module = ctx.device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(name),
        source: wgpu::ShaderSource::Wgsl(source(name).into()),
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

/// One binding: a whole buffer, or a byte range of one.
pub struct Bind<'a>(pub &'a wgpu::Buffer, pub u64, pub Option<u64>);

/// Encodes, submits and waits for one dispatch of `pipeline` over `groups` workgroups.
pub fn dispatch(ctx: &GpuContext, pipeline: &wgpu::ComputePipeline, binds: &[Bind], groups: u32) {
    let layout = pipeline.get_bind_group_layout(0);
    let entries: Vec<wgpu::BindGroupEntry> = binds
        .iter()
        .enumerate()
        .map(|(i, b)| wgpu::BindGroupEntry {
            binding: i as u32,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: b.0,
                offset: b.1,
                size: b.2.and_then(wgpu::BufferSize::new),
            }),
        })
        .collect();
    let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &layout, entries: &entries });
    let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None });
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(groups, 1, 1);
    }
    ctx.queue.submit([encoder.finish()]);
}

/// Uploads a repacked matrix: (quants, scales) buffers.
pub fn upload(ctx: &GpuContext, w: &Repacked) -> (wgpu::Buffer, wgpu::Buffer, &'static str) {
    match w {
        Repacked::Q4_1 { dm, qs } => (ctx.storage("qs", qs), ctx.storage("dm", dm), "matvec_q4_1.wgsl"),
        Repacked::Q8_0 { d, qs } => (ctx.storage("qs", qs), ctx.storage("d", d), "matvec_q8_0.wgsl"),
    }
}

/// Runs `y = W x` once on the GPU (W repacked, `[rows, cols]`) into `out` at `offset` bytes.
pub fn matvec(ctx: &GpuContext, w: &Repacked, rows: u32, cols: u32, x: &wgpu::Buffer, out: &wgpu::Buffer, offset: u64) -> Result<()> {
    let (qs, scales, shader) = upload(ctx, w);
    let params = ctx.uniform("params", &[rows, cols, 0, 0]);
    let p = pipeline(ctx, shader);
    dispatch(ctx, &p, &[Bind(&params, 0, None), Bind(&qs, 0, None), Bind(&scales, 0, None), Bind(x, 0, None), Bind(out, offset, Some(rows as u64 * 4))], rows);
    Ok(())
}

/// Runs RMSNorm once on the GPU: `x` `[rows, n]` into `out` at `offset` bytes.
pub fn rmsnorm(ctx: &GpuContext, x: &wgpu::Buffer, gain: &wgpu::Buffer, n: u32, rows: u32, eps: f32, out: &wgpu::Buffer, offset: u64) {
    let params = ctx.uniform("params", &[n, rows, eps.to_bits(), 0]);
    let p = pipeline(ctx, "rmsnorm.wgsl");
    dispatch(ctx, &p, &[Bind(&params, 0, None), Bind(x, 0, None), Bind(gain, 0, None), Bind(out, offset, Some((n * rows) as u64 * 4))], rows);
}
