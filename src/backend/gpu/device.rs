//! Adapter and device creation, within WebGPU's default limits unless the adapter offers more.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What the page and the CLI report about the GPU.
#[derive(Debug, Clone, Serialize)]
pub struct GpuInfo {
    /// Adapter name as the driver reports it.
    pub name: String,
    /// Graphics API (Vulkan, Metal, Dx12, BrowserWebGpu, ...).
    pub backend: String,
    /// Whether this is a software adapter (lavapipe, SwiftShader, WARP).
    pub software: bool,
    /// Whether the device is a browser's WebGPU (or Dawn's in Node.js), reached through
    /// wgpu's `webgpu` backend: the page's engine.
    pub browser: bool,
    /// Largest storage buffer binding the device accepts, in bytes.
    pub max_storage_buffer_binding_size: u64,
    /// Most storage buffers one shader stage may bind.
    pub max_storage_buffers_per_shader_stage: u32,
    /// Whether the device was opened with subgroup operations (the adapter offers them;
    /// natively wgpu asks for them, in a browser the worker does).
    pub subgroups: bool,
    /// The adapter's smallest and largest subgroup size (0 when it has none).
    pub subgroup_sizes: [u32; 2],
    /// Where the device was opened to write GPU timestamps, for the profile
    /// ([`crate::backend::gpu::GpuBackend::profile_decode`]).
    pub timestamps: Timestamps,
}

/// Where a device can write GPU timestamps: what the profile of a decode step can time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Timestamps {
    /// Nowhere: the adapter has no timestamp queries.
    None,
    /// At the beginning and end of a compute pass (WebGPU's `timestamp-query`, what a browser
    /// offers): each kernel timed in a pass of its own.
    PassEdges,
    /// Also between the dispatches of one pass (natively, where the adapter offers it): each
    /// kernel timed inside one ordinary pass.
    InsidePasses,
}

/// Serializes opening devices natively. On an NVIDIA H100 (driver 580.159.04, Vulkan), 6 tests
/// each opening their own instance and device at once deadlocked in 2 runs of 6: every thread
/// asleep, three of them on a priority-inheritance lock inside the driver
/// (bench/device/h100-vulkan-1127-tests.txt); wgpu's issues report the same driver crashing on
/// devices and pipelines created at once from several threads. Devices are opened once per
/// model load, so the wait costs nothing a user sees.
#[cfg(not(target_arch = "wasm32"))]
static OPENING: Mutex<()> = Mutex::new(());

/// The wgpu instance devices are opened from: natively one for the process (each instance
/// loads and enumerates every Vulkan driver again), in a browser a new one each time (the
/// page opens one device per worker; a wasm instance is not shared between threads).
fn instance() -> wgpu::Instance {
    let create = || wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    #[cfg(not(target_arch = "wasm32"))]
    {
        static INSTANCE: std::sync::OnceLock<wgpu::Instance> = std::sync::OnceLock::new();
        INSTANCE.get_or_init(create).clone()
    }
    #[cfg(target_arch = "wasm32")]
    create()
}

/// The timestamp features the profile asks for where the adapter has them: timestamps at the
/// edges of compute passes everywhere, and inside passes natively (a browser's WebGPU has no
/// such feature).
const TIMESTAMPS_INSIDE: wgpu::Features = wgpu::Features::TIMESTAMP_QUERY.union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES);

/// Finds an adapter (a hardware one when there is one) and opens a device on it with the
/// limits and features [`GpuContext::new`] describes; returns them with the limits asked for.
async fn open() -> Result<(wgpu::Adapter, wgpu::Device, wgpu::Queue, wgpu::Limits)> {
    let adapter = instance()
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: None,
            ..Default::default()
        })
        .await
        .map_err(|e| Error::NoGpu(format!("no adapter ({e})")))?;
    let offered = adapter.limits();
    let mut required_features = adapter.features() & wgpu::Features::SUBGROUP;
    required_features |= adapter.features() & wgpu::Features::TIMESTAMP_QUERY;
    if !cfg!(target_arch = "wasm32") && adapter.features().contains(TIMESTAMPS_INSIDE) {
        required_features |= TIMESTAMPS_INSIDE;
    }
    let limits = wgpu::Limits {
        max_storage_buffer_binding_size: offered.max_storage_buffer_binding_size.min(1 << 30),
        max_buffer_size: offered.max_buffer_size.min(1 << 30),
        ..wgpu::Limits::default()
    };
    let (device, queue) = adapter
        .request_device(&wgpu::DeviceDescriptor {
            label: Some("tokenscope"),
            required_features,
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        })
        .await
        .map_err(|e| Error::NoGpu(format!("cannot open a device on {} ({e})", adapter.get_info().name)))?;
    Ok((adapter, device, queue, limits))
}

/// The name of an adapter that gives none (Firefox's WebGPU gives no vendor, architecture or
/// description).
pub const UNNAMED_ADAPTER: &str = "unnamed adapter";

/// An adapter's name from the parts a browser's `GPUAdapterInfo` gives (vendor, architecture,
/// description; the empty ones left out), as the page shows it and the engine reports it.
pub fn adapter_name(parts: &[&str]) -> String {
    let name = parts.iter().map(|p| p.trim()).filter(|p| !p.is_empty()).collect::<Vec<_>>().join(" ");
    if name.is_empty() {
        UNNAMED_ADAPTER.to_string()
    } else {
        name
    }
}

/// What a page found of its WebGPU adapter, which wgpu cannot see in a browser (it reads the
/// description only): its name ([`adapter_name`]) and whether it is a software one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct AdapterSeen {
    /// The adapter's name, as the page shows it.
    pub name: String,
    /// Whether it is a software adapter (a fallback adapter, or one named as such).
    pub software: bool,
}

/// A device and its queue, ready for the kernels.
pub struct GpuContext {
    /// The logical device.
    pub device: wgpu::Device,
    /// Its submission queue.
    pub queue: wgpu::Queue,
    /// What was found.
    pub info: GpuInfo,
    /// The first device loss or uncaptured GPU error, reported by the driver at any time.
    fault: Arc<Mutex<Option<String>>>,
    /// How a wait for the GPU nudges the browser's GPU process (browser_wait.rs): by the
    /// adapter's kind, unless set ([`GpuContext::set_wait`]).
    #[cfg(target_arch = "wasm32")]
    wait: std::cell::Cell<super::browser_wait::GpuWait>,
}

impl GpuContext {
    /// Finds an adapter (a hardware one when there is one) and opens a device on it. The
    /// storage binding limit is raised to what the adapter offers, up to 1 GiB; nothing else
    /// beyond WebGPU's defaults is required. The one optional feature asked for is
    /// subgroups, where the adapter offers it (the kernels have plain variants without), and
    /// timestamp queries (inside passes natively), for the profile.
    pub async fn new() -> Result<Self> {
        Self::with_hint(None).await
    }

    /// As [`GpuContext::new`], told by the caller what it found of the adapter where wgpu
    /// cannot see it (a browser names its adapter to JavaScript only): its name and whether
    /// it is a software one.
    pub async fn with_hint(seen: Option<&AdapterSeen>) -> Result<Self> {
        // Natively wgpu answers both requests on the spot (there is no callback to wait for),
        // so they run to completion under OPENING, which no await may hold.
        #[cfg(not(target_arch = "wasm32"))]
        let (adapter, device, queue, limits) = {
            let _one_at_a_time = OPENING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            pollster::block_on(open())?
        };
        #[cfg(target_arch = "wasm32")]
        let (adapter, device, queue, limits) = open().await?;
        let ai = adapter.get_info();
        // wgpu 30's WebGPU backend cannot ask for subgroups, nor tell them among a device's
        // features: in a browser the worker asks for them (www/worker_io.js) and the device's
        // own features say whether it got them.
        #[cfg(target_arch = "wasm32")]
        let subgroups = device.as_webgpu().is_some_and(|d| d.features().has("subgroups"));
        #[cfg(not(target_arch = "wasm32"))]
        let subgroups = device.features().contains(wgpu::Features::SUBGROUP);
        let timestamps = match device.features() {
            f if f.contains(TIMESTAMPS_INSIDE) => Timestamps::InsidePasses,
            f if f.contains(wgpu::Features::TIMESTAMP_QUERY) => Timestamps::PassEdges,
            _ => Timestamps::None,
        };
        let fault = Arc::new(Mutex::new(None));
        let record = |slot: &Arc<Mutex<Option<String>>>, message: String| {
            if let Ok(mut f) = slot.lock() {
                f.get_or_insert(message);
            }
        };
        let slot = fault.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| record(&slot, describe(&e))));
        let slot = fault.clone();
        device.set_device_lost_callback(move |reason, message| {
            let detail = if message.is_empty() { String::new() } else { format!(": {message}") };
            record(&slot, format!("the device was lost ({reason:?}){detail}"));
        });
        let info = GpuInfo {
            name: seen.map_or_else(|| adapter_name(&[&ai.name]), |s| s.name.clone()),
            backend: format!("{:?}", ai.backend),
            software: seen.is_some_and(|s| s.software) || ai.device_type == wgpu::DeviceType::Cpu,
            browser: ai.backend == wgpu::Backend::BrowserWebGpu,
            max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size,
            max_storage_buffers_per_shader_stage: limits.max_storage_buffers_per_shader_stage,
            subgroups,
            subgroup_sizes: if subgroups { [ai.subgroup_min_size, ai.subgroup_max_size] } else { [0, 0] },
            timestamps,
        };
        #[cfg(target_arch = "wasm32")]
        let wait = std::cell::Cell::new(super::browser_wait::GpuWait::for_adapter(info.software));
        Ok(GpuContext {
            device,
            queue,
            info,
            fault,
            #[cfg(target_arch = "wasm32")]
            wait,
        })
    }

    /// How the waits after it nudge a browser's GPU process (by the adapter's kind at first;
    /// the page's `?wait=`, and a profile timing one step plainly, set it).
    #[cfg(target_arch = "wasm32")]
    pub fn set_wait(&self, how: super::browser_wait::GpuWait) {
        self.wait.set(how);
    }

    /// How the waits nudge a browser's GPU process now.
    #[cfg(target_arch = "wasm32")]
    pub fn wait(&self) -> super::browser_wait::GpuWait {
        self.wait.get()
    }

    /// Waits for `done` in a browser: nudging its GPU process while it is pending, as
    /// [`GpuContext::set_wait`] says, so the wait ends when the GPU's work does, not at the
    /// browser's next poll of it.
    #[cfg(target_arch = "wasm32")]
    async fn wait_for<T>(&self, done: futures_channel::oneshot::Receiver<T>) -> std::result::Result<T, futures_channel::oneshot::Canceled> {
        super::browser_wait::nudging(&self.queue, done, self.wait.get()).await
    }

    /// Fails with [`Error::GpuLost`] once the device was lost or reported an uncaptured error.
    pub fn check(&self) -> Result<()> {
        match self.fault.lock().ok().and_then(|f| f.clone()) {
            Some(message) => Err(Error::GpuLost(message)),
            None => Ok(()),
        }
    }

    /// Starts catching validation and out-of-memory errors (shaders the platform's compiler
    /// rejects, buffers too large) until [`ErrorScopes::finish`].
    pub fn error_scopes(&self) -> ErrorScopes {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        ErrorScopes { validation: self.device.push_error_scope(wgpu::ErrorFilter::Validation), oom }
    }

    /// A storage buffer holding `data`, readable and writable by kernels and copyable.
    /// Written through the queue in pieces of at most [`UPLOAD_PIECE`] bytes, not mapped at
    /// creation: in a browser a mapped buffer is a second copy of it in the page's memory
    /// (and in the GPU process's, for the copy into the real buffer).
    pub fn storage<T: bytemuck::Pod>(&self, label: &str, data: &[T]) -> wgpu::Buffer {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let align = wgpu::COPY_BUFFER_ALIGNMENT as usize;
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.len().next_multiple_of(align).max(align) as u64,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let whole = bytes.len() - bytes.len() % align;
        for (i, piece) in bytes[..whole].chunks(UPLOAD_PIECE).enumerate() {
            self.queue.write_buffer(&buffer, (i * UPLOAD_PIECE) as u64, piece);
        }
        if whole < bytes.len() {
            let mut tail = bytes[whole..].to_vec();
            tail.resize(align, 0);
            self.queue.write_buffer(&buffer, whole as u64, &tail);
        }
        buffer
    }

    /// A uniform buffer holding `data`.
    pub fn uniform<T: bytemuck::Pod>(&self, label: &str, data: &[T]) -> wgpu::Buffer {
        use wgpu::util::DeviceExt;
        self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: bytemuck::cast_slice(data),
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        })
    }

    /// A buffer of `bytes` the GPU copies results into and the CPU maps to read them
    /// ([`GpuContext::map_f32`]).
    pub fn staging(&self, label: &str, bytes: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT).max(wgpu::COPY_BUFFER_ALIGNMENT),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// Copies `len` f32 values from the start of `buffer` back to the CPU (tests; the
    /// forward pass reuses one staging buffer through [`GpuContext::map_f32`]).
    pub async fn read_f32(&self, buffer: &wgpu::Buffer, len: usize) -> Result<Vec<f32>> {
        let bytes = (len * 4) as u64;
        let staging = self.staging("readback", bytes);
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("readback") });
        encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, bytes);
        self.queue.submit([encoder.finish()]);
        self.map_f32(&staging, len, None).await
    }

    /// Lets the uploads queued so far go before more are made: natively it waits for them
    /// (freeing the queue's staging copies); in a browser it yields to the event loop until
    /// the GPU is done with them (nudging the browser to look, browser_wait.rs), so the page's
    /// WebGPU client sends them on and the garbage collector may run. Loading calls it after
    /// each block, so a model's upload never piles up in memory.
    pub async fn settle(&self) -> Result<()> {
        let (tx, rx) = futures_channel::oneshot::channel();
        self.queue.submit([]);
        self.queue.on_submitted_work_done(move || {
            let _ = tx.send(());
        });
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| Error::GpuLost(format!("poll failed: {e}")))?;
            let _ = rx.await;
        }
        #[cfg(target_arch = "wasm32")]
        let _ = self.wait_for(rx).await;
        self.check()
    }

    /// Maps a MAP_READ buffer and returns its first `floats` f32 values: after the submit
    /// `after` natively (later submits may still run), or after all the work submitted so
    /// far (None).
    pub async fn map_f32(&self, staging: &wgpu::Buffer, floats: usize, after: Option<wgpu::SubmissionIndex>) -> Result<Vec<f32>> {
        let bytes = (floats * 4) as u64;
        if bytes == 0 || bytes > staging.size() {
            return Err(Error::Backend(format!("cannot read {floats} floats from a buffer of {} bytes", staging.size())));
        }
        let (tx, rx) = futures_channel::oneshot::channel();
        staging.slice(..bytes).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        #[cfg(not(target_arch = "wasm32"))]
        self.device
            .poll(wgpu::PollType::Wait { submission_index: after, timeout: None })
            .map_err(|e| Error::GpuLost(format!("poll failed: {e}")))?;
        #[cfg(not(target_arch = "wasm32"))]
        let mapped = rx.await;
        // A browser maps the buffer once the last submit that uses it is done, and learns that
        // it is as soon as it is nudged (browser_wait.rs), not at its next poll.
        #[cfg(target_arch = "wasm32")]
        let mapped = {
            let _ = after;
            self.wait_for(rx).await
        };
        // A lost device fails the map too; its own reason says more.
        self.check()?;
        mapped
            .map_err(|_| Error::GpuLost("the readback was dropped".into()))?
            .map_err(|e| Error::GpuLost(format!("cannot map the result buffer: {e}")))?;
        let view = staging.slice(..bytes).get_mapped_range().map_err(|e| Error::GpuLost(format!("cannot read the result buffer: {e}")))?;
        let out = bytemuck::cast_slice::<u8, f32>(&view).to_vec();
        drop(view);
        staging.unmap();
        self.check()?;
        Ok(out)
    }
}

/// Validation and out-of-memory errors caught since [`GpuContext::error_scopes`].
pub struct ErrorScopes {
    validation: wgpu::ErrorScopeGuard,
    oom: wgpu::ErrorScopeGuard,
}

/// Most bytes [`GpuContext::storage`] writes at once (a multiple of 4).
pub const UPLOAD_PIECE: usize = 16 << 20;

impl ErrorScopes {
    /// Stops catching; the first error caught becomes [`Error::GpuLost`] naming `what`.
    pub async fn finish(self, what: &str) -> Result<()> {
        let v = self.validation.pop().await;
        let o = self.oom.pop().await;
        match v.or(o) {
            Some(e) => Err(Error::GpuLost(format!("{what}: {}", describe(&e)))),
            None => Ok(()),
        }
    }
}

/// A wgpu error in words: its description (wgpu's own `Display` says only "Validation Error").
fn describe(e: &wgpu::Error) -> String {
    match e {
        wgpu::Error::Validation { description, .. } | wgpu::Error::Internal { description, .. } => {
            description.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
        }
        wgpu::Error::OutOfMemory { .. } => "out of GPU memory".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adapter_is_named_by_its_given_parts_or_as_unnamed() {
        assert_eq!(adapter_name(&["nvidia", "hopper", "NVIDIA H200"]), "nvidia hopper NVIDIA H200");
        assert_eq!(adapter_name(&["google", "", "swiftshader"]), "google swiftshader");
        assert_eq!(adapter_name(&[" apple ", "  ", ""]), "apple");
        // Firefox's WebGPU gives no part at all.
        assert_eq!(adapter_name(&["", "", ""]), UNNAMED_ADAPTER);
        assert_eq!(adapter_name(&[]), UNNAMED_ADAPTER);
    }
}
