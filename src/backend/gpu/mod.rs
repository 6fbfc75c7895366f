//! The GPU backend through wgpu (Vulkan, Metal, DX12 natively), with our own WGSL kernels
//! from `shaders/`: device (device.rs), weight repacking (repack.rs), shader variants from
//! templates (wgsl_defs.rs), the uniform structs shared with the WGSL (params.rs), one module
//! per op (ops/: matrix, attention, RoPE/KV write, embedding, argmax), pipelines, dispatches and the
//! encoder (kernels.rs), the forward pass and KV cache (model.rs), a step timed by kernel
//! (profile.rs).

pub mod device;
mod inspect;
pub mod kernels;
pub mod model;
pub mod ops;
pub mod params;
pub mod profile;
pub mod repack;
pub mod wgsl_defs;

pub use device::{GpuContext, GpuInfo, Timestamps};
pub use model::{GpuBackend, StepShape};
pub use profile::{KernelTime, StepProfile};
