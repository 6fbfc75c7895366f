//! The GPU side through wgpu (Vulkan, Metal, DX12 natively; WebGPU in the browser), with
//! our own WGSL kernels from `shaders/`. Work in progress: the device, the weight repacking
//! and the first kernels, each tested against its CPU twin; the forward pass is not wired
//! to the [`Backend`](super::Backend) trait yet.

pub mod device;
pub mod kernels;
pub mod repack;

pub use device::{GpuContext, GpuInfo};
