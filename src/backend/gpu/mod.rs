//! The GPU backend through wgpu (Vulkan, Metal, DX12 natively), with our own WGSL kernels
//! from `shaders/`: device (device.rs), weight repacking (repack.rs), shader variants from
//! templates (wgsl_defs.rs), the uniform structs shared with the WGSL (params.rs), one module
//! per op (ops/: matrix, attention, RoPE/KV write, embedding, argmax), pipelines, dispatches and the
//! encoder (kernels.rs); then the model, in the data's order: the weights and KV caches
//! uploaded (upload.rs), the activation buffers (activations.rs), the forward pass as a list
//! of ops (forward.rs), the backend that loads them (model.rs), a pass run and the greedy
//! run-ahead (step.rs), a step timed by kernel (profile.rs), a step that shows its inside
//! (inspect.rs).

pub mod activations;
#[cfg(target_arch = "wasm32")]
pub mod browser_wait;
pub mod device;
mod forward;
mod inspect;
pub mod kernels;
pub mod model;
pub mod ops;
pub mod params;
pub mod profile;
pub mod repack;
pub mod step;
mod upload;
pub mod wgsl_defs;

pub use device::{GpuContext, GpuInfo, Timestamps};
pub use model::{GpuBackend, StepShape};
pub use profile::{KernelTime, StepProfile};
