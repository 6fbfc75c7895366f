//! Whether a model's metadata and weights fit the memory there is, asked before they are read,
//! so that a file declaring more than the machine holds (a sparse file of a few KB can declare
//! 100 GB; a metadata array takes about 30 times its bytes in the file once parsed) is refused
//! in words instead of ending the process on a failed allocation. A leaf: the GGUF reader and
//! the model's loader both ask it.

use crate::error::ModelError;

/// Bytes of memory free: natively the kernel's estimate of what can be
/// allocated without swapping (`MemAvailable` on Linux; `None` elsewhere, where nothing is
/// checked); in wasm what the 4 GiB address space has left past the memory already grown.
pub fn available_bytes() -> Option<u64> {
    #[cfg(target_arch = "wasm32")]
    {
        const WASM_MAX: u64 = 4 << 30;
        let used = core::arch::wasm32::memory_size::<0>() as u64 * 65_536;
        Some(WASM_MAX.saturating_sub(used))
    }
    #[cfg(all(not(target_arch = "wasm32"), target_os = "linux"))]
    {
        let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib.saturating_mul(1024))
    }
    #[cfg(all(not(target_arch = "wasm32"), not(target_os = "linux")))]
    {
        None
    }
}

/// Refuses `needed` bytes of the model's `part` (`weights`, `metadata`) when `available` (if
/// known) is less.
pub fn check_fits(part: &'static str, needed: u64, available: Option<u64>) -> Result<(), ModelError> {
    match available {
        Some(free) if needed > free => Err(ModelError::TooLarge { part, needed, available: free }),
        _ => Ok(()),
    }
}
