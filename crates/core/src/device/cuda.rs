//! A real GPU through the CUDA driver API (`cuMemAlloc`, `cuMemFree`, `cuMemGetInfo`), via
//! cudarc with the driver library loaded at run time, so the tool builds and runs where
//! there is no CUDA at all and says so instead of failing to start.
//!
//! Regions are allocated in the calling thread's current context: PyTorch makes the device's
//! primary context current before it calls its allocator, and so does any CUDA runtime
//! program. A thread with no current context gets the device's primary context, which this
//! device retains for its lifetime.

use super::{Device, DeviceDescription, DeviceError, MemInfo};
use cudarc::driver::{result, sys};
use std::collections::HashMap;
use std::fmt;

/// Why a CUDA device cannot be opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaError(pub String);

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CudaError {}

/// Calls into the driver, turning a panic (cudarc panics when a symbol cannot be loaded)
/// into an error: nothing here may panic across the C ABI.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, result::DriverError>) -> Result<T, CudaError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(CudaError(format!("{what}: {}", driver_error(e)))),
        Err(_) => Err(CudaError(format!("{what}: the CUDA driver library lacks a function oomscope needs"))),
    }
}

fn driver_error(e: result::DriverError) -> String {
    let name = e.error_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{:?}", e.0));
    let text = e.error_string().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if text.is_empty() { name } else { format!("{name} ({text})") }
}

/// True when the CUDA driver library (`libcuda.so`) can be loaded.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library; catch_unwind guards cudarc's internals.
    std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false)
}

/// The processes with memory on GPU `ordinal`, from NVML (this one marked); `None` when the
/// driver or NVML cannot say.
pub fn processes(ordinal: i32) -> Option<Vec<oomscope_format::ProcessMemory>> {
    if !driver_present() {
        return None;
    }
    let device = guarded("cuDeviceGet", || result::device::get(ordinal)).ok()?;
    let mut bus = [0 as std::ffi::c_char; 32];
    // SAFETY: the driver writes a NUL-terminated id of at most `bus.len()` bytes.
    guarded("cuDeviceGetPCIBusId", || unsafe {
        sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as std::ffi::c_int, device).result()
    })
    .ok()?;
    // SAFETY: NUL-terminated by the driver, within the buffer.
    let id = unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) }.to_str().ok()?;
    super::nvml::processes(id)
}

/// One GPU, by ordinal.
pub struct CudaDevice {
    ordinal: i32,
    device: sys::CUdevice,
    primary: sys::CUcontext,
    model: String,
    total: u64,
    others: u64,
    /// Expandable segments: the physical memory behind each mapped page, by address.
    pages: HashMap<u64, sys::CUmemGenericAllocationHandle>,
}

// SAFETY: the context handle is a pointer the driver lets any thread use; the allocator
// calls the device from one thread at a time (under its lock).
unsafe impl Send for CudaDevice {}

impl fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaDevice").field("ordinal", &self.ordinal).field("model", &self.model).finish()
    }
}

impl CudaDevice {
    /// Opens GPU `ordinal`: loads the driver, initializes it, retains the primary context.
    /// Without a driver or a GPU this is an error that says what to do, never a panic.
    pub fn open(ordinal: i32) -> Result<CudaDevice, CudaError> {
        if !driver_present() {
            return Err(CudaError(
                "no CUDA driver here (libcuda.so cannot be loaded); on a machine without a GPU, \
                 use the simulated device: OOMSCOPE_DEVICE=sim:16GiB (or --device sim:16GiB)"
                    .into(),
            ));
        }
        guarded("cuInit", result::init)?;
        let count = guarded("cuDeviceGetCount", result::device::get_count)?;
        if ordinal < 0 || ordinal >= count {
            return Err(CudaError(format!(
                "there is no GPU {ordinal}: the driver sees {count} (check CUDA_VISIBLE_DEVICES)"
            )));
        }
        let device = guarded("cuDeviceGet", || result::device::get(ordinal))?;
        let model = guarded("cuDeviceGetName", || result::device::get_name(device))?;
        // SAFETY: `device` comes from cuDeviceGet.
        let total = guarded("cuDeviceTotalMem", || unsafe { result::device::total_mem(device) })? as u64;
        // SAFETY: `device` comes from cuDeviceGet; the retained context is released in Drop.
        let primary = guarded("cuDevicePrimaryCtxRetain", || unsafe { result::primary_ctx::retain(device) })?;
        let mut d = CudaDevice { ordinal, device, primary, model, total, others: 0, pages: HashMap::new() };
        // What other processes (and this one, outside oomscope) hold when we start.
        let mem = d.mem_info();
        d.others = mem.total.saturating_sub(mem.free);
        Ok(d)
    }

    pub fn ordinal(&self) -> i32 {
        self.ordinal
    }

    /// The GPU can reserve address space and map memory into it (the driver's virtual
    /// memory management, which PyTorch's expandable segments use).
    pub fn maps_memory(&self) -> bool {
        let attribute = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED;
        // SAFETY: `device` comes from cuDeviceGet.
        guarded("cuDeviceGetAttribute", || unsafe { result::device::get_attribute(self.device, attribute) })
            .is_ok_and(|v| v != 0)
    }

    /// Physical memory on this GPU, as `cuMemCreate` takes it.
    fn allocation_prop(&self) -> sys::CUmemAllocationProp {
        // SAFETY: a plain C struct; all zeros is its documented default (no handle types,
        // no flags).
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = self.ordinal;
        prop
    }

    /// Makes sure this thread has a context: the caller's if it has one, else the primary.
    fn ensure_context(&self) -> Result<(), CudaError> {
        let current = guarded("cuCtxGetCurrent", result::ctx::get_current)?;
        if current.is_none() {
            // SAFETY: `primary` was retained in `open` and is released only on drop.
            guarded("cuCtxSetCurrent", || unsafe { result::ctx::set_current(self.primary) })?;
        }
        Ok(())
    }
}

impl Device for CudaDevice {
    fn alloc(&mut self, bytes: u64) -> Result<u64, DeviceError> {
        self.ensure_context().map_err(|e| DeviceError::Other(e.0))?;
        // SAFETY: allocates device memory; the bytes are never read by us.
        let r = std::panic::catch_unwind(|| unsafe { result::malloc_sync(bytes as usize) });
        match r {
            Ok(Ok(ptr)) => Ok(ptr),
            Ok(Err(e)) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                Err(DeviceError::OutOfMemory { requested: bytes, free: self.mem_info().free })
            }
            Ok(Err(e)) => Err(DeviceError::Other(format!("cuMemAlloc({bytes}): {}", driver_error(e)))),
            Err(_) => Err(DeviceError::Other("cuMemAlloc: the CUDA driver library is unusable".into())),
        }
    }

    fn free(&mut self, addr: u64, _bytes: u64) -> Result<(), DeviceError> {
        self.ensure_context().map_err(|e| DeviceError::Other(e.0))?;
        // SAFETY: `addr` came from cuMemAlloc on this device (the allocator frees only
        // regions it obtained).
        guarded("cuMemFree", || unsafe { result::free_sync(addr) }).map_err(|e| DeviceError::Other(e.0))
    }

    fn mem_info(&self) -> MemInfo {
        if self.ensure_context().is_err() {
            return MemInfo { free: 0, total: self.total };
        }
        match guarded("cuMemGetInfo", result::mem_get_info) {
            Ok((free, total)) => MemInfo { free: free as u64, total: total as u64 },
            Err(_) => MemInfo { free: 0, total: self.total },
        }
    }

    fn synchronize(&mut self) {
        if self.ensure_context().is_ok() {
            let _ = guarded("cuCtxSynchronize", result::ctx::synchronize);
        }
    }

    fn describe(&self) -> DeviceDescription {
        DeviceDescription { kind: oomscope_format::DeviceKind::Cuda, model: self.model.clone(), others: self.others }
    }

    // Expandable segments, as PyTorch makes them: address space reserved once, physical
    // memory created and mapped page by page (`cuMemCreate`, `cuMemMap`, `cuMemSetAccess`),
    // unmapped and released page by page.

    fn reserve(&mut self, bytes: u64) -> Result<u64, DeviceError> {
        self.ensure_context().map_err(|e| DeviceError::Other(e.0))?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: reserves address space only; `ptr` is written by the driver.
        guarded("cuMemAddressReserve", || unsafe {
            sys::cuMemAddressReserve(&mut ptr, bytes as usize, 0, 0, 0).result()
        })
        .map_err(|e| DeviceError::Other(e.0))?;
        Ok(ptr)
    }

    fn map(&mut self, addr: u64, bytes: u64) -> Result<(), DeviceError> {
        self.ensure_context().map_err(|e| DeviceError::Other(e.0))?;
        let prop = self.allocation_prop();
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: creates physical memory described by `prop`; `handle` is written by the driver.
        let created = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
            sys::cuMemCreate(&mut handle, bytes as usize, &prop, 0)
        }));
        match created {
            Ok(sys::CUresult::CUDA_SUCCESS) => {}
            Ok(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY) => {
                return Err(DeviceError::OutOfMemory { requested: bytes, free: self.mem_info().free });
            }
            Ok(e) => {
                return Err(DeviceError::Other(format!(
                    "cuMemCreate({bytes}): {}",
                    driver_error(result::DriverError(e))
                )));
            }
            Err(_) => return Err(DeviceError::Other("cuMemCreate: the CUDA driver library is unusable".into())),
        }
        // SAFETY: `addr..addr+bytes` lies in space this device reserved and has nothing
        // mapped (the allocator maps each page once); `handle` was just created.
        let mapped = guarded("cuMemMap", || unsafe { sys::cuMemMap(addr, bytes as usize, 0, handle, 0).result() });
        let access = mapped.and_then(|()| {
            let desc = sys::CUmemAccessDesc {
                location: prop.location,
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            // SAFETY: the range was just mapped.
            guarded("cuMemSetAccess", || unsafe { sys::cuMemSetAccess(addr, bytes as usize, &desc, 1).result() })
                .inspect_err(|_| {
                    // SAFETY: unmaps the range mapped above.
                    let _ = guarded("cuMemUnmap", || unsafe { sys::cuMemUnmap(addr, bytes as usize).result() });
                })
        });
        match access {
            Ok(()) => {
                self.pages.insert(addr, handle);
                Ok(())
            }
            Err(e) => {
                // SAFETY: releases the memory created above, mapped nowhere now.
                let _ = guarded("cuMemRelease", || unsafe { sys::cuMemRelease(handle).result() });
                Err(DeviceError::Other(e.0))
            }
        }
    }

    fn unmap(&mut self, addr: u64, bytes: u64) {
        if self.ensure_context().is_err() {
            return;
        }
        // Kernels queued on any stream may still read the page: cuMemUnmap, unlike
        // cudaFree, does not wait for them.
        let _ = guarded("cuCtxSynchronize", result::ctx::synchronize);
        // SAFETY: the range was mapped by `map` and is free in the allocator.
        let _ = guarded("cuMemUnmap", || unsafe { sys::cuMemUnmap(addr, bytes as usize).result() });
        if let Some(handle) = self.pages.remove(&addr) {
            // SAFETY: the handle's memory is mapped nowhere now.
            let _ = guarded("cuMemRelease", || unsafe { sys::cuMemRelease(handle).result() });
        }
    }

    fn unreserve(&mut self, addr: u64, bytes: u64) {
        if self.ensure_context().is_ok() {
            // SAFETY: the space was reserved by `reserve` and nothing in it is mapped.
            let _ = guarded("cuMemAddressFree", || unsafe { sys::cuMemAddressFree(addr, bytes as usize).result() });
        }
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // SAFETY: releases the reference taken in `open`.
        let _ = guarded("cuDevicePrimaryCtxRelease", || unsafe { result::primary_ctx::release(self.device) });
    }
}

/// A point in a stream's work, to know when memory the stream used may be reused.
#[derive(Debug)]
pub struct StreamEvent(sys::CUevent);

// SAFETY: event handles may be used from any thread (the driver synchronizes them).
unsafe impl Send for StreamEvent {}

impl StreamEvent {
    /// Records an event on `stream` (a `cudaStream_t`, 0 for the default stream) in the
    /// current context.
    pub fn record(stream: usize) -> Result<StreamEvent, CudaError> {
        let ev = guarded("cuEventCreate", || result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))?;
        // SAFETY: `ev` was just created; `stream` is a stream handle PyTorch gave us.
        match guarded("cuEventRecord", || unsafe { result::event::record(ev, stream as sys::CUstream) }) {
            Ok(()) => Ok(StreamEvent(ev)),
            Err(e) => {
                // SAFETY: destroys the event created above.
                let _ = guarded("cuEventDestroy", || unsafe { result::event::destroy(ev) });
                Err(e)
            }
        }
    }

    /// The stream has passed the event. An error counts as done: memory must not be held
    /// back for ever because the driver could not answer.
    pub fn done(&self) -> bool {
        // SAFETY: the event is alive until drop.
        let r = std::panic::catch_unwind(|| unsafe { result::event::query(self.0) });
        !matches!(r, Ok(Err(e)) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY)
    }

    /// Blocks until the stream has passed the event.
    pub fn wait(&self) {
        // SAFETY: the event is alive until drop.
        let _ = guarded("cuEventSynchronize", || unsafe { result::event::synchronize(self.0) });
    }
}

impl Drop for StreamEvent {
    fn drop(&mut self) {
        // SAFETY: created in `record`, destroyed once.
        let _ = guarded("cuEventDestroy", || unsafe { result::event::destroy(self.0) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a machine without a GPU (CI), opening is a clear error, not a panic.
    #[test]
    fn no_driver_is_an_error_that_says_what_to_do() {
        if driver_present() {
            eprintln!("a CUDA driver is present: the no-driver path is not exercised here");
            return;
        }
        let e = CudaDevice::open(0).unwrap_err().to_string();
        assert!(e.contains("no CUDA driver") && e.contains("sim:"), "{e}");
    }
}
