//! Where the allocator's regions come from.
//!
//! A [`Device`] hands out address ranges and takes them back; the allocator never touches
//! the bytes behind them. The trait is what a real GPU can promise and no more: a region
//! request can be refused (another process holds the memory), and the device can say how
//! much is free and how much exists. `sim` is the default backend; a CUDA backend
//! implements the same trait.

pub mod cuda;
pub mod nvml;
mod presets;
mod sim;

pub use cuda::{CudaDevice, CudaError};
pub use presets::{Arch, DEFAULT_ARCH, DeviceSpec, PRESETS, Preset, parse_device};
pub use sim::SimDevice;

use std::fmt;

/// Free and total bytes, as `cuMemGetInfo` reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemInfo {
    pub free: u64,
    pub total: u64,
}

/// Why a device did not give a region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceError {
    /// The device has not that much free memory (CUDA_ERROR_OUT_OF_MEMORY).
    OutOfMemory { requested: u64, free: u64 },
    /// Anything else the device reports (driver errors, a free of an unknown range).
    Other(String),
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::OutOfMemory { requested, free } => write!(
                f,
                "failed to allocate {} ({requested} bytes) from device: CUDA_ERROR_OUT_OF_MEMORY ({} free)",
                oomscope_base::size::human_bytes_driver(*requested),
                oomscope_base::size::human(*free)
            ),
            DeviceError::Other(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for DeviceError {}

/// A source of device memory regions.
///
/// Implementations must be `Send`: the allocator that owns one is shared between threads
/// behind a lock, so calls are never concurrent.
pub trait Device: Send {
    /// Reserves `bytes` and returns the base address of the range. May refuse.
    fn alloc(&mut self, bytes: u64) -> Result<u64, DeviceError>;
    /// Returns a range obtained from [`Device::alloc`].
    fn free(&mut self, addr: u64, bytes: u64) -> Result<(), DeviceError>;
    /// Free and total memory of the device right now (other processes included).
    fn mem_info(&self) -> MemInfo;
    /// What the device is, for reports.
    fn describe(&self) -> DeviceDescription;
    /// Reserves `bytes` of address space with no memory behind it (`cuMemAddressReserve`),
    /// for PyTorch's expandable segments. Devices that cannot refuse.
    fn reserve(&mut self, bytes: u64) -> Result<u64, DeviceError> {
        Err(DeviceError::Other(format!("this device cannot reserve address space ({bytes} bytes)")))
    }
    /// Puts memory behind `bytes` of reserved space at `addr` (`cuMemCreate` + `cuMemMap`).
    fn map(&mut self, addr: u64, bytes: u64) -> Result<(), DeviceError> {
        Err(DeviceError::Other(format!("this device cannot map memory ({bytes} bytes at {addr:#x})")))
    }
    /// Takes the memory away from `bytes` of mapped space at `addr`.
    fn unmap(&mut self, _addr: u64, _bytes: u64) {}
    /// Maps `count` pages of `page` bytes from `addr`, each with memory of its own (as
    /// PyTorch's expandable segments map them, so that each can be unmapped alone); all or
    /// none. A device that only counts bytes maps the run at once: the time a run takes is
    /// then not the number of its pages.
    fn map_pages(&mut self, addr: u64, page: u64, count: u64) -> Result<(), DeviceError> {
        for i in 0..count {
            if let Err(e) = self.map(addr + i * page, page) {
                for j in 0..i {
                    self.unmap(addr + j * page, page);
                }
                return Err(e);
            }
        }
        Ok(())
    }
    /// Unmaps `count` pages of `page` bytes from `addr`, mapped by [`Device::map_pages`].
    fn unmap_pages(&mut self, addr: u64, page: u64, count: u64) {
        for i in 0..count {
            self.unmap(addr + i * page, page);
        }
    }
    /// Gives reserved address space back.
    fn unreserve(&mut self, _addr: u64, _bytes: u64) {}
    /// Waits until the device has finished all work queued on it (`cudaDeviceSynchronize`),
    /// before memory other streams used is reused. A simulated device has none.
    fn synchronize(&mut self) {}
}

/// What a dump says of `device`, named `name` in reports.
pub fn info(device: &dyn Device, name: &str) -> oomscope_format::DeviceInfo {
    let desc = device.describe();
    let mem = device.mem_info();
    oomscope_format::DeviceInfo {
        kind: desc.kind,
        name: name.to_string(),
        model: desc.model,
        total: mem.total,
        free: mem.free,
        others: desc.others,
    }
}

/// A device as reports name it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceDescription {
    pub kind: oomscope_format::DeviceKind,
    /// Hardware name (`NVIDIA H200`) or `simulated GPU`.
    pub model: String,
    /// Bytes held by other processes when the device was opened, when known.
    pub others: u64,
}
